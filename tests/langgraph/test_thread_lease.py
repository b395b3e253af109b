"""The opt-in lease per LangGraph thread (issue 11, item 8): one saver writes a thread at a time.

Before it, two savers on one thread interleaved their checkpoints into one history silently.
"""

from __future__ import annotations

import asyncio
import operator
import threading
import time
import uuid
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph

from agentrewind import DataLostError, LeaseLostError, RunLockedError
from agentrewind_langgraph import RewindSaver
from cli_support import batch


class State(TypedDict):
    items: Annotated[list[str], operator.add]


def cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def paused_graph(gate: threading.Event, entered: threading.Event) -> Any:
    """first -> slow (waits for `gate`) -> last."""
    b = StateGraph(State)

    def slow(state: State) -> dict[str, list[str]]:
        entered.set()
        assert gate.wait(120)  # the test runs two CLI processes meanwhile (slow under load)
        return {"items": ["slow"]}

    b.add_node("first", lambda s: {"items": ["first"]})
    b.add_node("slow", slow)
    b.add_node("last", lambda s: {"items": ["last"]})
    b.add_edge(START, "first")
    b.add_edge("first", "slow")
    b.add_edge("slow", "last")
    b.add_edge("last", END)
    return b


def _history(saver: RewindSaver, thread: str) -> list[str | None]:
    return [t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg(thread))]


def test_off_by_default_two_savers_may_write_one_thread(saver_url: str) -> None:
    with RewindSaver(saver_url) as a, RewindSaver(saver_url) as b:
        graph_a = paused_graph(threading.Event(), threading.Event())
        graph_a.nodes.pop("slow")
        simple = StateGraph(State)
        simple.add_node("n", lambda s: {"items": ["n"]})
        simple.add_edge(START, "n")
        simple.add_edge("n", END)
        simple.compile(checkpointer=a).invoke({"items": []}, cfg("t"))
        simple.compile(checkpointer=b).invoke({"items": []}, cfg("t"))
        assert len(_history(a, "t")) == 6


def test_a_second_owner_of_a_thread_gets_run_locked_error(saver_url: str) -> None:
    thread = uuid.uuid4().hex
    gate, entered = threading.Event(), threading.Event()
    with (
        RewindSaver(saver_url, lease=True) as a,
        RewindSaver(saver_url, lease=True) as b,
    ):
        graph_a = paused_graph(gate, entered).compile(checkpointer=a)
        errors: list[BaseException] = []

        def drive_a() -> None:
            try:
                graph_a.invoke({"items": []}, cfg(thread), durability="sync")
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        worker = threading.Thread(target=drive_a)
        worker.start()
        assert entered.wait(10)
        before = _history(a, thread)
        graph_b = paused_graph(threading.Event(), threading.Event()).compile(checkpointer=b)
        with pytest.raises(RunLockedError) as locked:
            # With durability="sync" the refused first write stops B before its first node;
            # with LangGraph's default "async" durability the error surfaces when LangGraph
            # collects the failed write (its checkpoints are refused all the same).
            graph_b.invoke({"items": []}, cfg(thread), durability="sync")
        assert locked.value.owner == a._leases.owner  # type: ignore[union-attr]
        assert _history(a, thread) == before  # B wrote nothing
        gate.set()
        worker.join()
        assert not errors
        assert a.get_tuple(cfg(thread)).checkpoint["channel_values"]["items"] == [  # type: ignore[union-attr]
            "first",
            "slow",
            "last",
        ]
    with RewindSaver(saver_url, lease=True) as c:  # a closed saver freed its leases
        state = StateGraph(State)
        state.add_node("more", lambda s: {"items": ["more"]})
        state.add_edge(START, "more")
        state.add_edge("more", END)
        state.compile(checkpointer=c).invoke({"items": []}, cfg(thread))


def test_a_saver_whose_lease_lapsed_writes_nothing(saver_url: str) -> None:
    thread = uuid.uuid4().hex
    with (
        RewindSaver(saver_url, lease=True, lease_ttl=0.3) as a,
        RewindSaver(saver_url, lease=True) as b,
    ):
        simple = StateGraph(State)
        simple.add_node("n", lambda s: {"items": ["n"]})
        simple.add_edge(START, "n")
        simple.add_edge("n", END)
        simple.compile(checkpointer=a).invoke({"items": []}, cfg(thread))
        leases = a._leases
        assert leases is not None
        leases._stop.set()  # A's process stops: nothing renews its lease
        assert leases._keeper is not None
        leases._keeper.join()
        time.sleep(0.4)
        simple.compile(checkpointer=b).invoke({"items": []}, cfg(thread))  # B takes it over
        latest = a.get_tuple(cfg(thread))
        assert latest is not None
        stale = {**cfg(thread), "configurable": {**latest.config["configurable"]}}
        before = _history(b, thread)
        with pytest.raises(LeaseLostError):  # A wakes up mid-invocation: refused
            a.put(stale, latest.checkpoint, latest.metadata, {})
        assert _history(b, thread) == before
        if saver_url.startswith(("sqlite", "postgresql")):
            # A stopped between its check and its write: the write's own transaction refuses.
            leases._lost.clear()
            leases._held[thread] = time.monotonic()
            with pytest.raises(LeaseLostError):
                a.put(stale, latest.checkpoint, latest.metadata, {})
            leases._lost.clear()
            leases._held[thread] = time.monotonic()
            with pytest.raises(LeaseLostError):
                a.put_writes(stale, [("items", ["late"])], "task-1")
            assert _history(b, thread) == before
            leases._held.clear()
        with pytest.raises(RunLockedError):  # its next invocation finds B holding the thread
            simple.compile(checkpointer=a).invoke({"items": []}, cfg(thread))


# -- issue 23, item 1: deletes respect the thread's lease -------------------------------------
def _run_paused(saver: RewindSaver, thread: str) -> tuple[Any, threading.Event, list[Any]]:
    """Start the paused graph on `saver` in a thread; returns (worker, gate, outcome)."""
    gate, entered = threading.Event(), threading.Event()
    graph = paused_graph(gate, entered).compile(checkpointer=saver)
    outcome: list[Any] = []

    def drive() -> None:
        try:
            outcome.append(graph.invoke({"items": []}, cfg(thread), durability="sync"))
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=drive)
    worker.start()
    assert entered.wait(10)
    return worker, gate, outcome


async def _on_a_loop(url: str, call: Any) -> None:
    """`call(saver)` on a saver opened and closed on this event loop (its async pool too)."""
    async with RewindSaver(url) as saver:
        await call(saver)


def test_a_leased_thread_is_not_deleted_under_its_owner(saver_url: str) -> None:
    thread = uuid.uuid4().hex
    with RewindSaver(saver_url, lease=True) as a, RewindSaver(saver_url) as b:
        worker, gate, outcome = _run_paused(a, thread)
        before = _history(a, thread)
        with pytest.raises(RunLockedError, match="not deleted"):
            b.delete_thread(thread)
        with pytest.raises(RunLockedError, match="not deleted"):
            asyncio.run(_on_a_loop(saver_url, lambda c: c.adelete_thread(thread)))
        with pytest.raises(RunLockedError, match="not deleted"):
            b.prune(["free-thread", thread], strategy="delete")  # every lease first, or none
        with pytest.raises(RunLockedError, match="not deleted"):
            asyncio.run(_on_a_loop(saver_url, lambda c: c.aprune([thread], strategy="delete")))
        assert _history(b, thread) == before  # nothing lost
        gate.set()
        worker.join()
        assert outcome == [{"items": ["first", "slow", "last"]}]
        assert a.get_tuple(cfg(thread)).checkpoint["channel_values"]["items"] == [  # type: ignore[union-attr]
            "first", "slow", "last",
        ]  # fmt: skip
    with RewindSaver(saver_url) as c:  # the owner closed (its lease freed): the delete goes
        c.delete_thread(thread)
        assert c.get_tuple(cfg(thread)) is None


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_forced_delete_stops_the_owner_with_data_lost_error(saver_url: str, mode: str) -> None:
    thread = uuid.uuid4().hex
    with RewindSaver(saver_url, lease=True) as a, RewindSaver(saver_url) as b:
        worker, gate, outcome = _run_paused(a, thread)
        if mode == "sync":
            b.delete_thread(thread, force=True)
        else:
            asyncio.run(_on_a_loop(saver_url, lambda c: c.adelete_thread(thread, force=True)))
        gate.set()
        worker.join()
        assert len(outcome) == 1 and isinstance(outcome[0], DataLostError), outcome
        assert thread in str(outcome[0])
        assert b.get_tuple(cfg(thread)) is None  # the late checkpoint did not come back


def test_cli_prune_skips_a_leased_thread_unless_forced(saver_url: str) -> None:
    thread = uuid.uuid4().hex
    with RewindSaver(saver_url, lease=True) as a:
        worker, gate, outcome = _run_paused(a, thread)
        before = _history(a, thread)
        (kept,) = batch(["prune", "--keep-last", "0", "-y", "--store", saver_url])
        assert f"skipped 1 run(s) another process is driving (live lease): {thread}" in kept.out
        assert f"deleted {thread}" not in kept.out
        assert _history(a, thread) == before
        (forced,) = batch(["prune", "--keep-last", "0", "-y", "--force", "--store", saver_url])
        assert f"deleted {thread}" in forced.out, forced.out + forced.err
        gate.set()
        worker.join()
        assert len(outcome) == 1 and isinstance(outcome[0], DataLostError), outcome
