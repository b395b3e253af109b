"""Entry point, public names, version guard, no pickle."""

from __future__ import annotations

import li_flows
import pytest
from workflows.context.serializers import PickleSerializer

import agentrewind
import agentrewind_llamaindex
from agentrewind.errors import AgentRewindError
from agentrewind_llamaindex import RewindWorkflow, check_workflows_version


def test_all_is_sorted_and_complete():
    assert agentrewind_llamaindex.__all__ == sorted(agentrewind_llamaindex.__all__)
    public = {n for n in dir(agentrewind_llamaindex) if not n.startswith("_")}
    assert set(agentrewind_llamaindex.__all__) <= public


async def test_core_middleware_wraps_through_the_entry_point(tmp_path):
    mw = agentrewind.Middleware(f"sqlite:///{tmp_path / 'e.db'}")
    wf = mw.wrap(li_flows.Flaky(timeout=30))
    assert isinstance(wf, RewindWorkflow)
    li_flows.FIX["fixed"] = True
    try:
        assert (await wf.run(run_id="ep-1"))["visits"] == 2
    finally:
        li_flows.FIX["fixed"] = False
    assert any(s.kind == "node" for s in mw.store.load_steps("ep-1"))
    mw.close()


def test_old_workflows_version_is_refused_clearly():
    with pytest.raises(AgentRewindError, match=r"llama-index-workflows>=2\.26.*2\.25\.0"):
        check_workflows_version("2.25.0")
    assert check_workflows_version("2.26.1") == "2.26.1"


async def test_journal_is_json_even_with_a_pickle_serializer(tmp_path):
    mw = agentrewind_llamaindex.Middleware(f"sqlite:///{tmp_path / 'p.db'}")
    li_flows.FIX["fixed"] = True
    try:
        wf = mw.wrap(li_flows.Flaky(timeout=30, serializer=PickleSerializer()))
        await wf.run(run_id="pk-1")
    finally:
        li_flows.FIX["fixed"] = False
    text = repr([s.output for s in mw.store.load_steps("pk-1")])
    assert "__is_pickle" not in text and "pickle" not in text.lower()
    mw.close()


def test_wrap_rejects_non_workflows():
    mw = agentrewind_llamaindex.Middleware("memory://wrap-x")
    with pytest.raises(agentrewind.AdapterNotFoundError):
        mw.wrap(object())
