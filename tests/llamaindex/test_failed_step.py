"""A step that raises; after the fix the resume runs from that step on the state before it."""

from __future__ import annotations

import li_flows
import pytest
from workflows.events import StopEvent

import agentrewind
from agentrewind_llamaindex import Middleware


async def test_failed_step_resumes_with_store_as_before(durable_url, side):
    li_flows.SIDE["file"] = str(side.path)
    li_flows.FIX["fixed"] = False
    try:
        mw = Middleware(durable_url)
        wf = mw.wrap(li_flows.Flaky(timeout=30))
        with pytest.raises(RuntimeError, match="second step is broken"):
            await wf.run(run_id="flaky-1")
        assert side.lines() == ["step:first", "step:second"]
        with agentrewind.connect(durable_url) as store:
            assert store.get_run("flaky-1").status == "failed"
        li_flows.FIX["fixed"] = True
        result = await wf.run(run_id="flaky-1")
        # the first step did not run again; the second saw the store as before its first try
        assert side.lines() == ["step:first", "step:second", "step:second"]
        assert result == {"seen": {"visits": 1, "log": ["first"]}, "visits": 2}
        assert mw.store.get_run("flaky-1").status == "completed"
        mw.close()
    finally:
        li_flows.SIDE["file"] = None
        li_flows.FIX["fixed"] = False


async def test_stream_events_reemitted_once_on_resume(tmp_path, side):
    li_flows.SIDE["file"] = str(side.path)
    li_flows.FIX["fixed"] = False
    mw = Middleware(f"sqlite:///{tmp_path / 's.db'}")
    wf = mw.wrap(_Streaming(timeout=30))
    try:
        handler = wf.run(run_id="stream-1")
        first = [ev.msg async for ev in _progress(handler)]
        with pytest.raises(RuntimeError):
            await handler
        assert first == ["one", "two"]
        li_flows.FIX["fixed"] = True
        handler = wf.run(run_id="stream-1")
        second = [ev.msg async for ev in _progress(handler)]
        await handler
        # "one" comes from the journal; "two" only from the re-run (its step failed, so the
        # journaled copy was dropped): each exactly once for the resumed consumer
        assert second == ["one", "two", "three"]
    finally:
        li_flows.SIDE["file"] = None
        li_flows.FIX["fixed"] = False
        mw.close()


async def _progress(handler):
    async for ev in handler.stream_events():
        if isinstance(ev, Progress):
            yield ev


from workflows import Context, Workflow, step  # noqa: E402
from workflows.events import Event, StartEvent  # noqa: E402


class Progress(Event):
    msg: str


class Half(Event):
    pass


class _Streaming(Workflow):
    @step
    async def a(self, ctx: Context, ev: StartEvent) -> Half:
        ctx.write_event_to_stream(Progress(msg="one"))
        return Half()

    @step
    async def b(self, ctx: Context, ev: Half) -> StopEvent:
        ctx.write_event_to_stream(Progress(msg="two"))
        if not li_flows.FIX["fixed"]:
            raise RuntimeError("b fails once")
        ctx.write_event_to_stream(Progress(msg="three"))
        return StopEvent(result="ok")
