"""Replay keys of pydantic-ai durable units: their cache identity, projected and hashed.

pydantic-ai hands every durable unit its cache identity (`CacheIdentity.project(params)`): the
model id, messages, settings and request parameters of a model request; the tool's name,
arguments, `RunContext` and tool of a tool call. Those are live objects; the journal key needs
what identifies the call and nothing that changes when the same run executes again:

- messages lose the fields a run stamps afresh (`timestamp`, `run_id`, `conversation_id`);
  a recorded response replays with its own tool-call ids, so the calls it asks for keep
  their keys;
- a `RunContext` keeps the run step, retry, tool name, tool-call id, approval and the run's
  prompt, never the user's `deps` (live clients, connections), pydantic-ai's `run_id` or the
  history (a tool call is pinned to its history by its call id, which comes from the recorded
  model response that asked for it; hashing the history again per tool call would make every
  tool call O(history));
- a tool keeps its name (its schema is part of the model request that asked for it).

A changed input (another prompt, other arguments, an approval) hashes differently and runs:
it never receives another call's result.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from pydantic import BaseModel
from pydantic_ai import RunContext
from pydantic_ai.durable_exec import (
    CapabilityOperationId,
    DurableOperationId,
    EventStreamHandlerId,
    ModelCancelSuspendedResponseId,
    ModelCompactMessagesId,
    ModelRequestId,
    ToolsetCallToolId,
    ToolsetValidateToolArgumentsId,
)
from pydantic_ai.messages import ModelRequest, ModelResponse
from pydantic_ai.models import Model
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import ToolsetTool
from pydantic_core import to_jsonable_python

from agentrewind.adapters import Chat

__all__ = ["key_and_inputs", "key_input", "kind_of", "project"]

# Stamped by the run that builds the message, so a resumed run's history differs in them only.
_VOLATILE_MESSAGE_KEYS = frozenset({"timestamp", "run_id", "conversation_id"})
_VOLATILE_PART_KEYS = frozenset({"timestamp"})


def kind_of(operation_id: DurableOperationId) -> str:
    """The journal kind of a durable unit: `llm`, `tool` or `custom`."""
    if isinstance(operation_id, ModelRequestId | ModelCompactMessagesId):
        return "llm"
    if isinstance(operation_id, ModelCancelSuspendedResponseId):
        return "llm"
    if isinstance(operation_id, ToolsetCallToolId | ToolsetValidateToolArgumentsId):
        return "tool"
    if isinstance(operation_id, EventStreamHandlerId | CapabilityOperationId):
        return "custom"
    return "custom"  # discovery and operations added in later minor releases


def _fallback(value: Any) -> str:
    # Live objects (clients, locks) inside user values: their type identifies them, not their
    # address, so the key is the same in every process.
    return f"<{type(value).__module__}.{type(value).__qualname__}>"


def _message(message: ModelRequest | ModelResponse) -> Any:
    tree = to_jsonable_python(message, fallback=_fallback)
    if not isinstance(tree, dict):  # pragma: no cover - messages are dataclasses
        return tree
    out = {k: v for k, v in tree.items() if k not in _VOLATILE_MESSAGE_KEYS}
    parts = out.get("parts")
    if isinstance(parts, list):
        out["parts"] = [
            {k: v for k, v in p.items() if k not in _VOLATILE_PART_KEYS}
            if isinstance(p, dict)
            else p
            for p in parts
        ]
    return out


def _run_context(ctx: RunContext[Any]) -> dict[str, Any]:
    return {
        "step": ctx.run_step,
        "retry": ctx.retry,
        "tool": ctx.tool_name,
        "call": ctx.tool_call_id,
        "approved": ctx.tool_call_approved,
        "prompt": ctx.prompt,
    }


def project(value: Any) -> Any:
    """Reduce one element of a cache identity to JSON that is the same on every resume."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, ModelRequest | ModelResponse):
        return _message(value)
    if isinstance(value, RunContext):
        return _run_context(value)
    if isinstance(value, Model):
        return {"model": f"{value.system}:{value.model_name}"}
    if isinstance(value, ToolsetTool):
        return {"tool": value.tool_def.name}
    if isinstance(value, ToolDefinition):
        return {"tool": value.name}
    if isinstance(value, list | tuple):
        return [project(item) for item in value]
    if isinstance(value, dict):
        return {str(k): project(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        # e.g. ModelRequestParameters, ModelRequestContext: project field by field, so the
        # messages and run contexts inside them lose their volatile parts too
        return {f.name: project(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, BaseModel):
        return to_jsonable_python(value, fallback=_fallback)
    return to_jsonable_python(value, fallback=_fallback)


def key_input(cache_key: tuple[object, ...]) -> str:
    """The digest of a unit's projected cache identity (what `Run.begin` keys the call by)."""
    text = json.dumps(project(cache_key), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def key_and_inputs(cache_key: tuple[object, ...]) -> tuple[str, Any]:
    """`key_input(cache_key)`, and what the call was given, recorded beside its output.

    The inputs are the projected identity; a model request's message history becomes a
    `Chat` (each message stored once per run), the rest of the identity stored whole.
    """
    projected = project(cache_key)
    key = hashlib.blake2b(_dumps(projected).encode(), digest_size=16).hexdigest()
    for i, item in enumerate(cache_key):
        if (
            isinstance(item, list)
            and item
            and all(isinstance(m, ModelRequest | ModelResponse) for m in item)
        ):
            messages = projected[i]
            digests = b"".join(
                hashlib.blake2b(_dumps(m).encode(), digest_size=16).digest() for m in messages
            )
            rest = {"identity": [*projected[:i], "<messages>", *projected[i + 1 :]]}
            return key, Chat(messages, digests, rest)
    return key, json.loads(_dumps(projected))
