"""One store write per superstep: a task's pending writes ride in the next `put`'s transaction.

Counted at the store boundary of a real store: SQLite commits (trace callback), Redis requests
sent (each is one round trip, a pipeline included), PostgreSQL write transactions. Error,
interrupt and parallel-branch writes are checked through a second saver opened while the
first is still open, so they are in the store, not only in the first saver's memory.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from agentrewind_langgraph import RewindSaver
from langgraph_support import State, cfg, line_graph

NODES = 10
PULL = "~__pregel_pull, n0"  # the path of a task LangGraph runs for a triggered node


MARKS_THREAD = "agentrewind-lg-marks"  # the saver's writer marks (`_writers`)


def _packed(command: Any) -> bytes:
    """A Redis request as bytes (what `send_packed_command` is given), else b''."""
    if isinstance(command, bytes | bytearray | memoryview):
        return bytes(command)
    if isinstance(command, list | tuple):
        return b"".join(bytes(c) for c in command if isinstance(c, bytes | bytearray | memoryview))
    return b""


def _in_marks_task() -> bool:
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running loop in this thread
        return False
    return task is not None and task.get_name() == MARKS_THREAD


@contextmanager
def count_writes(saver: RewindSaver) -> Iterator[list[int]]:
    """Count the saver's store writes: commits, Redis requests or Postgres transactions."""
    n = [0]
    lock = threading.Lock()

    def bump(*args: Any) -> None:
        if threading.current_thread().name == MARKS_THREAD or _in_marks_task():
            return  # the writer marks: off the checkpoint's path (see `_writers`)
        if args and b"langgraph-writer" in _packed(args[0]):
            return  # the same, sent from a worker thread of the marks' task

        with lock:
            n[0] += 1

    backend: Any = saver.backend
    scheme = saver.store.scheme
    if scheme == "sqlite":
        conn = backend._wdb.connection()
        conn.set_trace_callback(lambda sql: bump() if sql == "COMMIT" else None)
        try:
            yield n
        finally:
            conn.set_trace_callback(None)
        return
    if scheme == "redis":
        import redis.asyncio.connection
        import redis.connection

        target: Any = redis.connection.AbstractConnection
        name = "send_packed_command"
        # The async API sends through redis.asyncio's connections: count those requests too.
        atarget: Any = redis.asyncio.connection.AbstractConnection
        areal = atarget.send_packed_command

        async def acounted(*args: Any, **kw: Any) -> Any:
            bump(*args[1:2])  # the connection, then the request
            return await areal(*args, **kw)

        atarget.send_packed_command = acounted
    else:  # PostgreSQL: write transactions, sync (`run_in`) or async (`AsyncPostgres.run`)
        target, name = saver.store.db, "run_in"
        aside: Any = saver.store.aio
        arun = aside.run

        async def arun_counted(txn: Any, **kw: Any) -> Any:
            if txn.write:
                bump()
            return await arun(txn, **kw)

        aside.run = arun_counted
    real = getattr(target, name)

    def counted(*args: Any, **kw: Any) -> Any:
        if kw.get("write", True):
            bump(*args[1:2])
        return real(*args, **kw)

    setattr(target, name, counted)
    try:
        yield n
    finally:
        if scheme == "postgresql":
            delattr(target, name)
            del aside.run
        else:
            setattr(target, name, real)
        if scheme == "redis":
            atarget.send_packed_command = areal


def history_writes(saver: RewindSaver, config: dict[str, Any]) -> list[list[tuple[str, str]]]:
    """Per stored checkpoint (oldest first), its pending writes as (channel, value)."""
    return [
        sorted((str(w[1]), repr(saver.serde.loads_typed(saver.serde.dumps_typed(w[2]))))
               for w in t.pending_writes or [])
        for t in reversed(list(saver.list(config)))
    ]  # fmt: skip


def test_one_write_per_superstep_and_the_same_history(saver_url: str) -> None:
    figures: dict[bool, int] = {}
    histories: dict[bool, Any] = {}
    for defer in (False, True):
        with RewindSaver(saver_url, defer_writes=defer) as saver:
            graph = line_graph(NODES).compile(checkpointer=saver)
            graph.invoke({"items": []}, cfg(), durability="sync")  # warm up (schema, scripts)
            config = cfg()
            with count_writes(saver) as n:
                out = graph.invoke({"items": []}, config, durability="sync")
            assert out["items"] == [f"n{i}" for i in range(NODES)]
            figures[defer] = n[0]
            histories[defer] = history_writes(saver, config)
    # The input checkpoint, `__start__`'s, then one per node; on Redis the run's one read
    # (`get_tuple`) is counted too.
    puts = NODES + 2 + (1 if saver_url.startswith("redis") else 0)
    # Held: one write per put (one more if a `put` ever overtakes the task's `put_writes`).
    assert puts <= figures[True] <= puts + 1, figures
    # Not held: one more per task (`__start__` and each node). SQLite's group commit folds
    # a varying share of them into a neighbour's transaction (more under load).
    if saver_url.startswith("sqlite"):
        assert figures[False] >= figures[True], figures
    else:
        assert figures[False] >= puts + NODES + 1, figures
    assert histories[True] == histories[False]
    assert all(len(ws) > 0 for ws in histories[True][:-1])  # every superstep's writes stored


def test_async_api_one_write_per_superstep(saver_url: str) -> None:
    import asyncio

    async def main() -> tuple[int, list[str]]:
        async with RewindSaver(saver_url) as saver:
            graph = line_graph(NODES).compile(checkpointer=saver)
            await graph.ainvoke({"items": []}, cfg(), durability="sync")
            config = cfg()
            with count_writes(saver) as n:
                out = await graph.ainvoke({"items": []}, config, durability="sync")
            return n[0], out["items"]

    n, items = asyncio.run(main())
    assert items == [f"n{i}" for i in range(NODES)]
    assert NODES + 2 <= n - (1 if saver_url.startswith("redis") else 0) <= NODES + 3


class Signalling(RewindSaver):
    """A saver that tells when a task's writes reached it (held or stored)."""

    wrote = threading.Event()

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        super().put_writes(config, writes, task_id, task_path)
        if ("items", ["a"]) in list(writes):
            self.wrote.set()


def _parallel(runs: dict[str, int], fail: dict[str, bool]) -> StateGraph:

    def a(state: State) -> dict[str, Any]:
        runs["a"] += 1
        return {"items": ["a"]}

    def b(state: State) -> dict[str, Any]:
        runs["b"] += 1
        if fail["on"]:
            assert Signalling.wrote.wait(5)  # a's writes reached the saver before b fails
            raise RuntimeError("boom")
        return {"items": ["b"]}

    g = StateGraph(State)
    g.add_node("a", a)
    g.add_node("b", b)
    g.add_node("c", lambda s: {"items": ["c"]})
    g.add_edge(START, "c")  # a superstep of one task first: its writes are held
    g.add_edge("c", "a")
    g.add_edge("c", "b")
    g.add_edge("a", END)
    g.add_edge("b", END)
    return g


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_error_in_a_branch_keeps_the_finished_siblings_writes(
    saver_url: str, durability: Any
) -> None:
    runs = {"a": 0, "b": 0}
    fail = {"on": True}
    config = cfg()
    Signalling.wrote.clear()
    with Signalling(saver_url) as first:
        with pytest.raises(RuntimeError, match="boom"):
            _parallel(runs, fail).compile(checkpointer=first).invoke(
                {"items": []}, config, durability=durability
            )
        fail["on"] = False
        # Another saver (as another process would) while the first still holds whatever it holds.
        with Signalling(saver_url) as second:
            graph = _parallel(runs, fail).compile(checkpointer=second)
            out = graph.invoke(None, config, durability=durability)
    assert sorted(out["items"]) == ["a", "b", "c"]
    assert runs == {"a": 1, "b": 2}  # a's writes were stored: a did not run again


def test_an_interrupt_keeps_its_writes(saver_url: str) -> None:
    asked: list[str] = []

    def ask(state: State) -> dict[str, Any]:
        answer = interrupt("name?")
        asked.append(answer)
        return {"items": [f"hi {answer}"]}

    def build() -> StateGraph:
        g = StateGraph(State)
        g.add_node("first", lambda s: {"items": ["first"]})
        g.add_node("ask", ask)
        g.add_edge(START, "first")
        g.add_edge("first", "ask")
        g.add_edge("ask", END)
        return g

    config = cfg()
    with RewindSaver(saver_url) as first:
        first_graph = build().compile(checkpointer=first)
        first_graph.invoke({"items": []}, config, durability="sync")
        with RewindSaver(saver_url) as second:
            graph = build().compile(checkpointer=second)
            state = graph.get_state(config)
            assert [i.value for t in state.tasks for i in t.interrupts] == ["name?"]
            out = graph.invoke(Command(resume="Ada"), config, durability="sync")
    assert out["items"] == ["first", "hi Ada"]
    assert asked == ["Ada"]


def test_held_writes_are_stored_by_reads_and_close(saver_url: str) -> None:
    """Outside a graph run nothing is held; inside one, reads and `close` store what is."""
    inside: Callable[[dict[str, Any]], dict[str, Any]] = lambda c: {  # noqa: E731
        "configurable": {**c["configurable"], "__pregel_runtime": object()}
    }
    with RewindSaver(saver_url, defer_writes=600) as saver:  # no timer in this test
        graph = line_graph(1).compile(checkpointer=saver)
        config = cfg()
        graph.invoke({"items": []}, config, durability="sync")
        head = saver.get_tuple(config)
        assert head is not None
        saver.put_writes(inside(head.config), [("items", ["x"])], "task-1", PULL)
        with RewindSaver(saver_url) as other:  # not stored yet: held for the next put
            held = other.get_tuple(config)
            assert held is not None and held.pending_writes == []
        again = saver.get_tuple(config)  # the saver's own read stores them first
        assert again is not None and again.pending_writes == [("task-1", "items", ["x"])]
        saver.put_writes(inside(head.config), [("items", ["x"]), ("items", ["y"])], "task-1", PULL)
        with RewindSaver(saver_url) as other:
            still = other.get_tuple(config)
            assert still is not None and len(still.pending_writes or []) == 1
    with RewindSaver(saver_url) as other:  # close stored the second call's new write
        after = other.get_tuple(config)
        assert after is not None
        assert [w[2] for w in after.pending_writes or []] == [["x"], ["y"]]


def test_a_functional_task_is_stored_before_its_caller_goes_on(saver_url: str) -> None:
    from langgraph.func import entrypoint, task

    seen: list[list[Any]] = []
    config = cfg()

    @task
    def charge(amount: int) -> str:
        return f"charged {amount}"

    @task
    def look() -> int:
        # LangGraph stores a task's writes on an executor thread: give it a moment, as
        # another process would see the thread (a held write would not come before the end).
        with RewindSaver(saver_url) as other:
            for _ in range(100):
                head = other.get_tuple(config)
                writes = [w[2] for w in (head.pending_writes if head else None) or []]
                if writes:
                    break
                time.sleep(0.02)
            seen.append(writes)
        return 0

    with RewindSaver(saver_url) as saver:

        @entrypoint(checkpointer=saver)
        def flow(amount: int) -> str:
            receipt = charge(amount).result()
            look().result()
            return receipt

        assert flow.invoke(5, config, durability="sync") == "charged 5"
    assert seen == [["charged 5"]]


def _seen_from_another_saver(url: str, config: dict[str, Any], within: float) -> list[Any]:
    """The pending writes of the thread's head, polled through a new saver for `within` s."""
    with RewindSaver(url) as other:
        deadline = time.monotonic() + within
        while True:
            head = other.get_tuple(config)
            writes = [w[2] for w in (head.pending_writes if head else None) or []]
            if writes or time.monotonic() > deadline:
                return writes
            time.sleep(0.02)


def test_reading_a_thread_stores_its_held_writes_only(saver_url: str) -> None:
    """Writes held for two threads: a read of one stores its own; `close` stores the other."""
    with RewindSaver(saver_url, defer_writes=600) as saver:  # no timer in this test
        graph = line_graph(1).compile(checkpointer=saver)
        configs = [cfg(), cfg()]
        heads = []
        for config in configs:
            graph.invoke({"items": []}, config, durability="sync")
            head = saver.get_tuple(config)
            assert head is not None
            heads.append(head)
        for n, head in enumerate(heads):
            inside = {"configurable": {**head.config["configurable"], "__pregel_runtime": 1}}
            saver.put_writes(inside, [("items", [f"held {n}"])], f"task-{n}", PULL)
        assert saver.get_tuple(configs[0]) is not None  # stores thread 0's held write
        with RewindSaver(saver_url) as other:
            seen = [other.get_tuple(c) for c in configs]
            assert [[w[2] for w in t.pending_writes or []] for t in seen if t] == [
                [["held 0"]],
                [],
            ]
    with RewindSaver(saver_url) as other:  # close stored thread 1's
        last = other.get_tuple(configs[1])
        assert last is not None and [w[2] for w in last.pending_writes or []] == [["held 1"]]


def test_a_held_write_is_stored_within_the_hold_time(saver_url: str) -> None:
    """No put, read or close follows: the timer thread stores the write after `defer_writes` s."""
    with RewindSaver(saver_url, defer_writes=0.2) as saver:
        graph = line_graph(1).compile(checkpointer=saver)
        config = cfg()
        graph.invoke({"items": []}, config, durability="sync")
        head = saver.get_tuple(config)
        assert head is not None
        inside = {"configurable": {**head.config["configurable"], "__pregel_runtime": 1}}
        held_at = time.monotonic()
        saver.put_writes(inside, [("items", ["late"])], "task-1", PULL)
        assert _seen_from_another_saver(saver_url, config, within=5) == [["late"]]
        assert time.monotonic() - held_at >= 0.2
        assert saver._buffer is not None and saver._buffer._held == 0


def test_a_finished_branch_is_stored_while_its_sibling_still_runs(saver_url: str) -> None:
    config = cfg()
    seen: list[Any] = []

    def slow(state: State) -> dict[str, Any]:
        seen.append(_seen_from_another_saver(saver_url, config, within=5))
        return {"items": ["slow"]}

    g = StateGraph(State)
    g.add_node("c", lambda s: {"items": ["c"]})
    g.add_node("fast", lambda s: {"items": ["fast"]})
    g.add_node("slow", slow)
    g.add_edge(START, "c")
    g.add_edge("c", "fast")
    g.add_edge("c", "slow")
    g.add_edge("fast", END)
    g.add_edge("slow", END)
    with RewindSaver(saver_url) as saver:
        g.compile(checkpointer=saver).invoke({"items": []}, config, durability="sync")
    assert seen == [[["fast"]]]
