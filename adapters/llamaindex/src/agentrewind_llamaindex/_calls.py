"""Record and replay LLM and tool calls made inside workflow steps (DESIGN §3, hooks H3/H4).

Every LlamaIndex LLM and tool class gets its call methods wrapped once, at class level. A
wrapper does nothing unless an agentrewind run is active (`agentrewind.current_run()`); then
the call is looked up in the run's journal and either replayed or executed and recorded. A
guard per kind records a nested call once: `achat_with_tools` funnelling into `achat` is one
LLM call, while an LLM call made by a tool is still recorded on its own.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from contextvars import ContextVar
from typing import Any

from llama_index.core.base.llms.base import BaseLLM
from llama_index.core.base.llms.types import ChatMessage, ChatResponse, CompletionResponse
from llama_index.core.tools.types import BaseTool
from workflows import Context

import agentrewind
from agentrewind import Call
from agentrewind.adapters import AgentRewindError, CacheSites

from ._compat import subclasses
from ._keys import chat_inputs, llm_key, tool_key
from ._memory import install_memory_hooks
from ._state import Patch, StepScopedStore, capture_writes, current_invocation
from ._waits import install_wait_hook

__all__ = ["CACHE", "install_call_hooks"]

CACHE: ContextVar[CacheSites | None] = ContextVar("agentrewind_llamaindex_cache", default=None)
"""The `wrap(cache=...)` rules of the wrapped workflow whose run is active in this context."""

_LLM_METHODS = (
    "chat",
    "achat",
    "stream_chat",
    "astream_chat",
    "chat_with_tools",
    "achat_with_tools",
    "stream_chat_with_tools",
    "astream_chat_with_tools",
    "complete",
    "acomplete",
    "stream_complete",
    "astream_complete",
)
_TOOL_METHODS = ("call", "acall")
_MARK = "__agentrewind_wrapped__"
_GUARDS: dict[str, ContextVar[bool]] = {
    "llm": ContextVar("agentrewind_llamaindex_in_llm", default=False),
    "tool": ContextVar("agentrewind_llamaindex_in_tool", default=False),
}


# -- the replay decision, shared by every wrapper ---------------------------------------------
def _begin(
    kind: str, obj: Any, method: str, args: tuple[Any, ...], kw: dict[str, Any]
) -> Call | None:
    run = agentrewind.current_run()
    if run is None or _GUARDS[kind].get():
        return None
    if kind == "llm":
        key = llm_key(obj, method, args, kw)
        chat = chat_inputs(key)
        if chat is None:  # a completion: its key input (the prompt) is what it was given
            return run.begin("llm", type(obj).__name__, key, cache=CACHE.get())
        return run.begin("llm", type(obj).__name__, key, inputs=chat, cache=CACHE.get())
    name = getattr(getattr(obj, "metadata", None), "name", None) or type(obj).__name__
    return run.begin("tool", name, tool_key(args, kw), side_effects=True, cache=CACHE.get())


def _usage(out: Any, writes: list[Patch] | None = None) -> dict[str, Any]:
    """Meta of a recorded call: token usage, the step invocation that made it, its writes.

    A resumed run counts the calls of journaled steps as consumed (see `Journal.settle_calls`).
    `writes` are the `ctx.store` patches a tool made; a replay applies them again.
    """
    meta: dict[str, Any] = {"invocation": current_invocation()}
    if writes:
        meta["ctx_writes"] = writes
    raw = getattr(out, "raw", None)
    usage = raw.get("usage") if isinstance(raw, dict) else None
    tokens = usage.get("total_tokens") if isinstance(usage, dict) else None
    if isinstance(tokens, int):
        meta["tokens"] = tokens
    return meta


def _stream_record(chunks: list[Any]) -> dict[str, Any]:
    return {"deltas": [c.delta or "" for c in chunks], "final": chunks[-1] if chunks else None}


def _stream_replay(recorded: dict[str, Any]) -> list[Any]:
    """Re-chunk a recorded stream (chat or completion) so streaming consumers see deltas."""
    final: ChatResponse | CompletionResponse | None = recorded["final"]
    deltas: list[str] = recorded["deltas"]
    if final is None:
        return []
    out: list[Any] = []
    text = ""
    for delta in deltas[:-1]:
        text += delta
        if isinstance(final, CompletionResponse):
            out.append(CompletionResponse(text=text, delta=delta))
        else:
            message = ChatMessage(role=final.message.role, content=text)
            out.append(ChatResponse(message=message, delta=delta))
    out.append(final)
    return out


# -- sync and async executions ------------------------------------------------------------------
def _sync_wrapper(kind: str, method: str, orig: Callable[..., Any]) -> Callable[..., Any]:
    streaming = "stream" in method

    @functools.wraps(orig)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        call = _begin(kind, self, method, args, kwargs)
        if call is None:
            return orig(self, *args, **kwargs)
        if call.hit:
            value = call.value()
            return iter(_stream_replay(value)) if streaming else value
        call.start()
        token = _GUARDS[kind].set(True)
        try:
            with call.executing():
                out = orig(self, *args, **kwargs)
        except BaseException as exc:
            call.fail(exc)
            raise
        finally:
            _GUARDS[kind].reset(token)
        if streaming:
            return _record_sync_stream(call, out)
        call.complete(out, _usage(out))
        return out

    return wrapper


def _record_sync_stream(call: Call, gen: Iterator[Any]) -> Iterator[Any]:
    # The guard is up while the wrapped stream makes each chunk (a stream_complete that
    # funnels into stream_chat lazily is one call), down while the consumer handles it.
    chunks: list[Any] = []
    it = iter(gen)
    try:
        while True:
            token = _GUARDS["llm"].set(True)
            try:
                chunk = next(it)
            except StopIteration:
                break
            finally:
                _GUARDS["llm"].reset(token)
            chunks.append(chunk)
            yield chunk
    except BaseException as exc:
        call.fail(exc)
        raise
    call.complete(_stream_record(chunks), _usage(chunks[-1] if chunks else None))


def _async_wrapper(kind: str, method: str, orig: Callable[..., Any]) -> Callable[..., Any]:
    streaming = "stream" in method

    @functools.wraps(orig)
    async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        call = _begin(kind, self, method, args, kwargs)
        if call is None:
            return await orig(self, *args, **kwargs)
        if call.hit:
            value = call.value()
            await _replay_writes(call, args, kwargs)
            return _aiter(_stream_replay(value)) if streaming else value
        await call.astart()
        token = _GUARDS[kind].set(True)
        try:
            with call.executing(), capture_writes() as writes:
                out = await orig(self, *args, **kwargs)
        except BaseException as exc:
            await call.afail(exc)
            raise
        finally:
            _GUARDS[kind].reset(token)
        if streaming:
            return _record_async_stream(call, out)
        await call.acomplete(out, _usage(out, writes))
        return out

    return wrapper


def _store_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> StepScopedStore | None:
    """The journaled `ctx.store` of the workflow `Context` a tool call received, if any."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, Context):
            store = value.store
            return store if isinstance(store, StepScopedStore) else None
    return None


async def _replay_writes(call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    writes: list[Patch] | None = call.meta.get("ctx_writes")
    if not writes:
        return
    store = _store_of(args, kwargs)
    if store is None:
        raise AgentRewindError(
            f"recorded tool call {call.name!r} wrote to ctx.store, but its replay received no "
            "workflow Context to apply those writes to: pass the Context as a tool argument"
        )
    await store.replay(writes)


async def _aiter(items: list[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item


async def _record_async_stream(call: Call, gen: AsyncIterator[Any]) -> AsyncIterator[Any]:
    chunks: list[Any] = []
    it = aiter(gen)
    try:
        while True:
            token = _GUARDS["llm"].set(True)
            try:
                chunk = await anext(it)
            except StopAsyncIteration:
                break
            finally:
                _GUARDS["llm"].reset(token)
            chunks.append(chunk)
            yield chunk
    except BaseException as exc:
        await call.afail(exc)
        raise
    await call.acomplete(_stream_record(chunks), _usage(chunks[-1] if chunks else None))


# -- installation -------------------------------------------------------------------------------
def _patch(cls: type, kind: str, methods: tuple[str, ...]) -> None:
    for method in methods:
        orig = cls.__dict__.get(method)
        if orig is None or not callable(orig) or getattr(orig, _MARK, False):
            continue
        make = _async_wrapper if inspect.iscoroutinefunction(orig) else _sync_wrapper
        wrapper = make(kind, method, orig)
        setattr(wrapper, _MARK, True)
        setattr(cls, method, wrapper)


def install_call_hooks() -> None:
    """Wrap the call methods of every LlamaIndex LLM, tool and memory class defined so far.

    Idempotent and cheap: already-wrapped methods are skipped. Called when a workflow is
    wrapped and again when each of its runs starts, so classes defined later are covered.
    """
    for cls in subclasses(BaseLLM):
        _patch(cls, "llm", _LLM_METHODS)
    for cls in subclasses(BaseTool):
        _patch(cls, "tool", _TOOL_METHODS)
    install_memory_hooks()
    install_wait_hook()
