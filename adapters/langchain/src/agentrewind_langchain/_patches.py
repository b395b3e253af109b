"""Class-level interception of every chat-model and tool call, inert outside a wrapped run.

Six funnels (research/langchain-durable-anchors.md §2.2-2.3): `BaseChatModel`
`_generate_with_cache`/`_agenerate_with_cache` (invoke, batch, implicit streaming),
`stream`/`astream` (explicit streaming) and `BaseTool.run`/`arun`. Each wrapper first reads
one `ContextVar`; when no wrapped run is active it calls the original straight away.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import wrapt
from langchain_core.callbacks import AsyncCallbackManager, CallbackManager
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models import chat_models as _chat_models
from langchain_core.runnables.config import ensure_config
from langchain_core.tools import BaseTool

from . import _chat
from ._outcome import aexecute, asettle, execute, settle
from ._scope import FORCED, REPLAYED_TAG, Scope, scope_for
from ._tools import ToolCallInfo, begin_tool

__all__ = ["install", "installed"]

_lock = threading.Lock()
_installed = False


def _as_is(messages: Any) -> Any:
    return messages


# A private helper (absent from some langchain-core versions): the cache funnel receives
# messages already normalised by it, so a stream's key must see them normalised too.
_normalize_messages: Callable[[Any], Any] = getattr(_chat_models, "_normalize_messages", _as_is)


def installed() -> bool:
    """True once the patches are in place (they stay for the life of the process)."""
    return _installed


def install() -> None:
    """Patch the six funnels once per process (idempotent, thread-safe).

    `Middleware.wrap` calls this; outside a wrapped run each patch costs one `ContextVar` read.
    """
    global _installed
    with _lock:
        if _installed:
            return
        mod = "langchain_core.language_models.chat_models"
        wrapt.wrap_function_wrapper(mod, "BaseChatModel._generate_with_cache", _generate)
        wrapt.wrap_function_wrapper(mod, "BaseChatModel._agenerate_with_cache", _agenerate)
        wrapt.wrap_function_wrapper(mod, "BaseChatModel.stream", _stream)
        wrapt.wrap_function_wrapper(mod, "BaseChatModel.astream", _astream)
        wrapt.wrap_function_wrapper("langchain_core.tools.base", "BaseTool.run", _tool_run)
        wrapt.wrap_function_wrapper("langchain_core.tools.base", "BaseTool.arun", _tool_arun)
        _installed = True


# -- chat: the cache funnel (invoke, ainvoke, batch, implicit streaming) -------------------
def _bind_generate(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    extra = dict(kwargs)
    messages = args[0] if args else extra.pop("messages")
    stop = args[1] if len(args) > 1 else extra.pop("stop", None)
    run_manager = args[2] if len(args) > 2 else extra.pop("run_manager", None)
    return messages, stop, run_manager, extra


def _call_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The model-call kwargs of a `_generate_with_cache` call (what decides v2 streaming)."""
    return {k: v for k, v in kwargs.items() if k not in ("messages", "stop", "run_manager")}


def _decide(scope: Scope, model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    forced = FORCED.get()
    messages, stop, run_manager, extra = _bind_generate(args, kwargs)
    if forced is not None:
        FORCED.set(None)
        return forced, run_manager, True
    metadata = run_manager.metadata if run_manager is not None else None
    call = _chat.begin_chat(scope, model, messages, stop, extra, metadata)
    return call, run_manager, False


def _own_run(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[], Any]:
    """The callback run of a `_generate_with_cache` call (how a batch finds its item)."""
    return lambda: getattr(_bind_generate(args, kwargs)[2], "run_id", None)


def _parent_run(config: Any) -> Callable[[], Any]:
    """The callback run a call with `config` (or the ambient config) runs under."""
    return lambda: getattr(ensure_config(config).get("callbacks"), "parent_run_id", None)


def _generate(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    scope = scope_for(_own_run(args, kwargs))
    if scope is None or not isinstance(instance, BaseChatModel):
        return wrapped(*args, **kwargs)
    call, run_manager, forced = _decide(scope, instance, args, kwargs)
    if call.hit:
        result, tokens = _chat.replay(call, run_manager, forced)
        for chunk in tokens:
            run_manager.on_llm_new_token(chunk.text, chunk=chunk)
        replay_events = getattr(instance, "_replay_v2_events_for_cache_hit", None)
        if replay_events is not None and not forced:  # v3 `stream_events` consumers
            replay_events(result.generations, run_manager=run_manager, **_call_kwargs(kwargs))
        return result
    result = execute(call, lambda: wrapped(*args, **kwargs))
    settle(call, _chat.outcome(result))
    return result


async def _agenerate(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    scope = scope_for(_own_run(args, kwargs))
    if scope is None or not isinstance(instance, BaseChatModel):
        return await wrapped(*args, **kwargs)
    call, run_manager, forced = _decide(scope, instance, args, kwargs)
    if call.hit:
        result, tokens = _chat.replay(call, run_manager, forced)
        for chunk in tokens:
            await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
        replay_events = getattr(instance, "_areplay_v2_events_for_cache_hit", None)
        if replay_events is not None and not forced:
            await replay_events(result.generations, run_manager=run_manager, **_call_kwargs(kwargs))
        return result
    result = await aexecute(call, lambda: wrapped(*args, **kwargs))
    await asettle(call, _chat.outcome(result))
    return result


# -- chat: explicit streaming ---------------------------------------------------------------
class _StreamCall:
    """The parts of a `stream(input, config, *, stop, **kwargs)` call the journal needs."""

    def __init__(self, model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        extra = dict(kwargs)
        self.model = model
        self.input = args[0] if args else extra.pop("input")
        self.config = args[1] if len(args) > 1 else extra.pop("config", None)
        self.stop = extra.pop("stop", None)
        self.extra = extra

    def streams(self, *, async_api: bool) -> bool:
        # Models that cannot stream fall back to (a)invoke, which the cache funnel records.
        return bool(
            self.model._should_stream(async_api=async_api, **{**self.extra, "stream": True})
        )

    def begin(self, scope: Scope) -> Any:
        messages = _normalize_messages(self.model._convert_input(self.input).to_messages())
        metadata = ensure_config(self.config).get("metadata")
        return _chat.begin_chat(scope, self.model, messages, self.stop, self.extra, metadata)

    def replay_config(self) -> Any:
        config = ensure_config(self.config)
        config["tags"] = [*config.get("tags", []), REPLAYED_TAG]
        config["metadata"] = {**config.get("metadata", {}), "agentrewind": "replayed"}
        return config


@contextmanager
def _forcing(call: Any) -> Iterator[None]:
    """Hand a replayed stream's decided call to the (a)invoke that fires its callbacks."""
    token = FORCED.set(call)
    try:
        yield
    finally:
        FORCED.reset(token)


def _stream(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    scope = scope_for(_parent_run(args[1] if len(args) > 1 else kwargs.get("config")))
    if scope is None or not isinstance(instance, BaseChatModel):
        return wrapped(*args, **kwargs)
    return _stream_in_run(scope, wrapped, _StreamCall(instance, args, kwargs), args, kwargs)


def _stream_in_run(
    scope: Scope, wrapped: Any, sc: _StreamCall, args: Any, kwargs: Any
) -> Iterator[Any]:
    if not sc.streams(async_api=False):
        yield from wrapped(*args, **kwargs)
        return
    call = sc.begin(scope)
    if call.hit:
        with _forcing(call):  # fires on_chat_model_start / tokens / on_llm_end, tagged replayed
            message = sc.model.invoke(sc.input, sc.replay_config(), stop=sc.stop, **sc.extra)
        yield from _chat.rechunk(message)
        return
    call.start()
    chunks: list[Any] = []
    try:
        for chunk in wrapped(*args, **kwargs):
            chunks.append(chunk)
            yield chunk
    except BaseException as exc:
        call.fail(exc)
        raise
    settle(call, _chat.stream_outcome(chunks))


def _astream(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    scope = scope_for(_parent_run(args[1] if len(args) > 1 else kwargs.get("config")))
    if scope is None or not isinstance(instance, BaseChatModel):
        return wrapped(*args, **kwargs)
    return _astream_in_run(scope, wrapped, _StreamCall(instance, args, kwargs), args, kwargs)


async def _astream_in_run(
    scope: Scope, wrapped: Any, sc: _StreamCall, args: Any, kwargs: Any
) -> AsyncIterator[Any]:
    if not sc.streams(async_api=True):
        async for chunk in wrapped(*args, **kwargs):
            yield chunk
        return
    call = sc.begin(scope)
    if call.hit:
        with _forcing(call):
            message = await sc.model.ainvoke(sc.input, sc.replay_config(), stop=sc.stop, **sc.extra)
        for piece in _chat.rechunk(message):
            yield piece
        return
    await call.astart()
    chunks: list[Any] = []
    try:
        async for chunk in wrapped(*args, **kwargs):
            chunks.append(chunk)
            yield chunk
    except BaseException as exc:
        await call.afail(exc)
        raise
    await asettle(call, _chat.stream_outcome(chunks))


# -- tools ------------------------------------------------------------------------------------
def _tool_runs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Callable[[], Any], ...]:
    """A tool call's own run id, then the run it was started under (batch items' roots)."""
    callbacks = args[4] if len(args) > 4 else kwargs.get("callbacks")
    return (lambda: kwargs.get("run_id"), lambda: getattr(callbacks, "parent_run_id", None))


def _tool_run(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    scope = scope_for(*_tool_runs(args, kwargs))
    if scope is None or not isinstance(instance, BaseTool):
        return wrapped(*args, **kwargs)
    info = ToolCallInfo(instance, args, kwargs)
    call = begin_tool(scope, info)
    if call.hit:
        r = info.replay(call)
        manager = CallbackManager.configure(*r.configure)
        run_manager = manager.on_tool_start(*r.start, **r.start_kwargs)
        run_manager.on_tool_end(r.output, name=instance.name)
        return r.output
    output = execute(call, lambda: wrapped(*args, **kwargs))
    settle(call, info.outcome(output))
    return output


async def _tool_arun(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    scope = scope_for(*_tool_runs(args, kwargs))
    if scope is None or not isinstance(instance, BaseTool):
        return await wrapped(*args, **kwargs)
    info = ToolCallInfo(instance, args, kwargs)
    call = begin_tool(scope, info)
    if call.hit:
        r = info.replay(call)
        manager = AsyncCallbackManager.configure(*r.configure)
        run_manager = await manager.on_tool_start(*r.start, **r.start_kwargs)
        await run_manager.on_tool_end(r.output, name=instance.name)
        return r.output
    output = await aexecute(call, lambda: wrapped(*args, **kwargs))
    await asettle(call, info.outcome(output))
    return output
