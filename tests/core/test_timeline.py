"""Timeline semantics on every backend, through the sync API and its async twins.

Each test takes `t`, a `Driver` that sends the timeline's writes either to the sync methods or
to their `a`-prefixed twins (`mode`), so one test body covers both APIs.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from typing import Any

import pytest

import agentrewind
from agentrewind import Timeline, TimelineError
from agentrewind.tree import short_ids

WRITES = {"checkpoint", "rollback", "branch", "switch_branch", "delete_branch", "merge", "refresh"}


class Driver:
    """A timeline whose writes (and `reopen`) are awaited: sync methods or async twins."""

    def __init__(self, tl: Timeline, mode: str) -> None:
        self.tl, self.mode = tl, mode

    def __getattr__(self, name: str) -> Any:
        if name not in WRITES:
            return getattr(self.tl, name)
        method = getattr(self.tl, "a" + name if self.mode == "async" else name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            result = method(*args, **kwargs)
            return await result if self.mode == "async" else result

        return call

    async def reopen(self) -> Timeline:
        """Another Timeline object on the same store, as a new process would open it."""
        if self.mode == "async":
            return await Timeline.aopen(self.tl.name, store=self.tl.store)
        return Timeline(self.tl.name, store=self.tl.store)


@pytest.fixture
def tl(store_url: str) -> Iterator[Timeline]:
    store = agentrewind.connect(store_url)
    timeline = Timeline("agent", store=store)
    yield timeline
    store.close()


@pytest.fixture(params=["sync", "async"])
def t(request: pytest.FixtureRequest, tl: Timeline) -> Driver:
    return Driver(tl, request.param)


async def test_checkpoint_returns_id_hash_and_persists(t: Driver) -> None:
    assert t.get_state() is None and t.head is None and len(t.tl) == 0
    cp = await t.checkpoint({"step": "parse", "n": 1}, {"confidence": 0.9}, "Parsed", "parse")
    assert len(cp.id) == 32 and len(cp.hash) == 16
    assert cp.parent_id is None and cp.branch == "main" and cp.metadata == {"confidence": 0.9}
    assert (cp.description, cp.logic_step) == ("Parsed", "parse")
    same = await t.checkpoint({"n": 1, "step": "parse"})
    assert same.hash == cp.hash and same.parent_id == cp.id  # content hash ignores key order
    state = t.get_state()
    state["n"] = 99  # a copy: changing it changes nothing stored
    assert t.get_state() == {"step": "parse", "n": 1}
    other = await t.reopen()
    assert other.get_state() == {"step": "parse", "n": 1}
    assert [c.id for c in other.history()] == [same.id, cp.id]
    assert other.get_checkpoint(cp.id).metadata == {"confidence": 0.9}
    assert t.logic_path() == ["parse"]
    record = t.store.get_step("agent", cp.id)
    assert record is not None and record.kind == "checkpoint" and record.meta["hash"] == cp.hash


async def test_rollback_moves_the_head_and_keeps_history(t: Driver) -> None:
    cps = [await t.checkpoint({"i": i}, description=f"c{i}") for i in range(5)]
    assert (await t.rollback()).id == cps[3].id
    assert t.get_state() == {"i": 3}
    assert (await t.rollback(steps=2)).id == cps[1].id
    assert (await t.rollback(to_checkpoint_id=cps[4].id)).id == cps[
        4
    ].id  # like git reset to any id
    await t.rollback(to_checkpoint_id=cps[2].id[-10:])  # short ids (the random tail) resolve
    assert t.get_state() == {"i": 2}
    new = await t.checkpoint({"i": "new"})
    assert new.parent_id == cps[2].id
    # nothing was deleted: the abandoned checkpoints are still there, marked rolled back
    other = await t.reopen()
    assert len(other) == 6 and other.get_state() == {"i": "new"}
    assert other.status(cps[4].id) == "rolled_back"
    assert other.status(new.id) == "head" and other.status(cps[0].id) == "active"
    tree = other.visualize_tree()
    short = short_ids(c.id for c in [*cps, new])  # the spelling `log` and `tree` print
    assert f"{short[cps[4].id]}  " in tree and "rolled back" in tree
    with pytest.raises(TimelineError, match="only 3 checkpoint"):
        await t.rollback(steps=4)
    with pytest.raises(TimelineError, match="matches no checkpoint"):
        await t.rollback(to_checkpoint_id="ffffffffff")
    with pytest.raises(TimelineError, match="positive"):
        await t.rollback(steps=0)


async def test_rollback_on_empty_branch_is_a_clear_error(t: Driver) -> None:
    with pytest.raises(TimelineError, match="no checkpoints"):
        await t.rollback()


async def test_branch_switch_and_list(t: Driver) -> None:
    a = await t.checkpoint({"x": 1})
    b = await t.checkpoint({"x": 2})
    branch = await t.branch("explore")
    assert branch.name == "explore" and branch.head == b.id and branch.is_current
    c = await t.checkpoint({"x": 3})
    assert c.parent_id == b.id and c.branch == "explore"
    old = await t.branch("from-a", from_checkpoint_id=a.id)
    assert old.head == a.id and t.get_state() == {"x": 1}
    assert (await t.switch_branch("main")).head == b.id and t.get_state() == {"x": 2}
    listed = {br.name: br for br in t.list_branches()}
    assert set(listed) == {"main", "explore", "from-a"}
    assert listed["explore"].checkpoint_count == 3 and listed["main"].is_current
    other = await t.reopen()  # another process sees the same branches and the current one
    assert other.current_branch == "main"
    assert [b.to_dict() for b in other.list_branches()] == [b.to_dict() for b in t.list_branches()]
    await t.switch_branch("explore")
    assert (await t.reopen()).current_branch == "explore" and (await t.reopen()).get_state() == {
        "x": 3
    }
    with pytest.raises(TimelineError, match="already exists"):
        await t.branch("main")
    with pytest.raises(TimelineError, match="no branch 'nope'"):
        await t.switch_branch("nope")
    with pytest.raises(TimelineError, match="invalid branch name"):
        await t.branch("HEAD")
    await t.delete_branch("from-a")
    assert "from-a" not in {b.name for b in (await t.reopen()).list_branches()}
    with pytest.raises(TimelineError, match="current branch"):
        await t.delete_branch("explore")


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        ("ours", {"plan": {"a": 1}, "shared": "main"}),
        ("theirs", {"plan": {"b": 2}, "shared": "side", "extra": True}),
        ("combine", {"plan": {"a": 1, "b": 2}, "shared": "side", "extra": True}),
        ("prefer_higher_confidence", {"plan": {"b": 2}, "shared": "side", "extra": True}),
    ],
)
async def test_merge_strategies_record_both_parents(
    t: Driver, strategy: str, expected: dict[str, object]
) -> None:
    base = await t.checkpoint({"plan": {}, "shared": "base"}, {"confidence": 0.5})
    await t.branch("side")
    side = await t.checkpoint(
        {"plan": {"b": 2}, "shared": "side", "extra": True}, {"confidence": 0.8}
    )
    await t.switch_branch("main")
    main = await t.checkpoint({"plan": {"a": 1}, "shared": "main"}, {"confidence": 0.6})
    merged = await t.merge("side", strategy=strategy)
    assert merged.state == expected == t.get_state()
    assert merged.parents == (main.id, side.id) and merged.is_merge
    assert merged.parent_id == main.id and t.merge_base(main.id, "side").id == base.id
    assert t.merge_base("main", "side").id == side.id  # after the merge, like git
    assert merged.metadata["merged_from"] == "side"
    assert merged.metadata["merge_strategy"] == strategy
    record = t.store.get_step("agent", merged.id)
    assert record is not None and record.meta["parents"] == [main.id, side.id]
    other = await t.reopen()
    assert other.get_checkpoint(merged.id).parents == (main.id, side.id)
    assert other.status(side.id) == "head"  # the source branch is untouched


async def test_merge_prefers_ours_when_more_confident_and_callable(t: Driver) -> None:
    await t.checkpoint({"v": 0})
    await t.branch("weak")
    await t.checkpoint({"v": "weak"}, {"confidence": 0.1})
    await t.switch_branch("main")
    await t.checkpoint({"v": "strong"}, {"confidence": 0.9})
    assert (await t.merge("weak")).state == {"v": "strong"}
    seen = []

    def pick(ours, theirs, base):  # type: ignore[no-untyped-def]
        seen.append((ours, theirs, base))
        return {"v": [ours["v"], theirs["v"], base["v"]]}

    merged = await t.merge("weak", strategy=pick)
    assert merged.state == {"v": ["strong", "weak", "weak"]}
    assert merged.metadata["merge_strategy"] == "pick" and len(seen) == 1
    assert (await t.merge("weak", strategy=lambda ours, theirs: {"two": True})).state == {
        "two": True
    }
    with pytest.raises(TimelineError, match="unknown merge strategy"):
        await t.merge("weak", strategy="octopus")
    with pytest.raises(TimelineError, match="into itself"):
        await t.merge("main")
    with pytest.raises(TimelineError, match="no branch 'ghost'"):
        await t.merge("ghost")


async def test_history_follows_first_parents_with_limit(t: Driver) -> None:
    ids = [(await t.checkpoint({"i": i})).id for i in range(6)]
    await t.branch("b")
    extra = await t.checkpoint({"i": "b"})
    assert [c.id for c in t.history()] == [extra.id, *reversed(ids)]
    assert [c.id for c in t.history("main", limit=2)] == [ids[5], ids[4]]
    await t.rollback(steps=3)
    assert [c.id for c in t.history("b")] == [ids[3], ids[2], ids[1], ids[0]]
    with pytest.raises(TimelineError):
        t.history("missing")


async def test_diff_nested_keys(t: Driver) -> None:
    a = await t.checkpoint({"plan": {"steps": ["a", "b"], "owner": "x"}, "gone": 1})
    b = await t.checkpoint({"plan": {"steps": ["a", "c", "d"], "owner": "x"}, "new": {"k": True}})
    d = t.diff(a.id, b.id)
    assert d["a"] == a.id and d["b"] == b.id
    assert d["added"] == {"new": {"k": True}, "plan.steps[2]": "d"}
    assert d["removed"] == {"gone": 1}
    assert d["changed"] == {"plan.steps[1]": {"before": "b", "after": "c"}}
    assert t.diff("main", a.id)["removed"] == {"new": {"k": True}, "plan.steps[2]": "d"}


async def test_visualize_tree_shows_branches_statuses_and_ids(t: Driver) -> None:
    root = await t.checkpoint({"s": 0}, description="Root")
    bad = await t.checkpoint({"s": 1}, description="Dead end")
    await t.rollback()
    await t.branch("alt")
    alt = await t.checkpoint({"s": 2}, {"confidence": 0.9}, description="Alternative")
    await t.switch_branch("main")
    merged = await t.merge("alt", strategy="theirs")
    text = t.visualize_tree()
    lines = text.splitlines()
    assert lines[0].startswith("timeline agent: 4 checkpoint(s); branches: alt, main (HEAD)")
    short = short_ids(c.id for c in (root, bad, alt, merged))  # what `agentrewind tree` prints
    by_id: dict[str, str] = {}
    for c in (root, bad, alt, merged):
        by_id[c.id] = next(ln for ln in lines if f" {short[c.id]}  " in ln)
    assert "Root" in by_id[root.id]
    assert "[rolled back]" in by_id[bad.id]
    assert "<- alt" in by_id[alt.id] and "confidence 0.9" in by_id[alt.id]
    assert f"merge of {short[alt.id]}" in by_id[merged.id]
    assert "<- main (HEAD)" in by_id[merged.id]
    assert "\x1b[" not in text and "\x1b[" in t.visualize_tree(color=True)


async def test_checkpoints_iterate_and_bad_input(t: Driver) -> None:
    await t.checkpoint({"a": 1})
    await t.checkpoint({"a": 2})
    assert [c.state for c in t.checkpoints()] == [{"a": 1}, {"a": 2}]
    with pytest.raises(agentrewind.SerializationError):
        await t.checkpoint({"bad": object()})
    assert len(t.tl) == 2  # nothing half-written
    with pytest.raises(TimelineError):
        Timeline("", store=t.store)
    assert "Timeline('agent'" in repr(t.tl)
    assert t.metrics["total_checkpoints"] == 2


async def test_subscribe_in_process(t: Driver) -> None:
    if t.store.scheme in ("redis", "postgresql"):
        pytest.skip("server delivery is asynchronous: covered in test_timeline_process")
    events: list[agentrewind.TimelineEvent] = []
    merges: list[str] = []
    sub = t.subscribe("*", events.append)
    with t.subscribe("*:merge", lambda e: merges.append(e.checkpoint_id or "")):
        cp = await t.checkpoint({"a": 1})
        await t.branch("x")
        await t.checkpoint({"a": 2})
        await t.switch_branch("main")
        merged = await t.merge("x")
    await t.rollback(to_checkpoint_id=cp.id)
    sub.close()
    await t.checkpoint({"after": "close"})
    assert [e.topic for e in events] == [
        "main:checkpoint",
        "x:branch",
        "x:checkpoint",
        "main:switch",
        "main:merge",
        "main:rollback",
    ]
    assert events[0].checkpoint_id == cp.id and events[0].hash == cp.hash
    assert merges == [merged.id]
    seen: list[str] = []
    t.tl.close()  # frees the timeline's lease: one writer object at a time
    other = Timeline("agent", store=t.store)  # another Timeline object on the same store
    with t.subscribe("main", lambda e: seen.append(e.kind)):
        other.checkpoint({"from": "other"})
    assert seen == ["checkpoint"]


class SpyStore(agentrewind.MemoryStore):
    """A real memory store that records its writes and can fail the next `put_steps`."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.writes: list[tuple[str, Any]] = []
        self.fail_next = False

    def put_steps(
        self,
        records: list[Any],
        *,
        heads: dict[str, str] | None = None,
        owner: Any = None,
        durable: bool = True,
    ) -> None:
        if self.fail_next:
            self.fail_next = False
            raise agentrewind.StoreUnavailableError("store went away")
        self.writes.append(("put_steps", ([r.step_id for r in records], heads)))
        super().put_steps(records, heads=heads, owner=owner, durable=durable)

    def set_head(self, run_id: str, branch: str, step_id: str | None, *, owner: Any = None) -> None:
        self.writes.append(("set_head", (branch, step_id)))
        super().set_head(run_id, branch, step_id, owner=owner)


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_checkpoint_and_its_head_move_in_one_write(mode: str, namespace: str) -> None:
    store = SpyStore(namespace)
    t = Driver(Timeline("agent", store=store), mode)
    first = await t.checkpoint({"n": 1})
    store.writes.clear()
    second = await t.checkpoint({"n": 2})
    assert store.writes == [("put_steps", ([second.id], {"main": second.id}))]
    store.fail_next = True
    with pytest.raises(agentrewind.StoreUnavailableError):
        await t.checkpoint({"n": 3})
    # nothing half-written: neither the step nor the head, in the store or in the object
    assert len(t.tl) == 2 and t.head.id == second.id
    assert store.get_heads("agent")["main"] == second.id and len(store.load_steps("agent")) == 2
    third = await t.checkpoint({"n": 3})
    assert third.parent_id == second.id and [c.id for c in t.history()][1:] == [second.id, first.id]
    records = store.load_steps("agent")
    assert [r.seq for r in records] == [1, 2, 3]


async def test_concurrent_async_and_threaded_writes_form_one_line(tl: Timeline) -> None:
    async def one(i: int) -> None:
        await tl.acheckpoint({"i": i})

    def sync_ones(base: int) -> None:
        for i in range(5):
            tl.checkpoint({"i": base + i})

    await asyncio.gather(
        *(one(i) for i in range(15)),
        asyncio.to_thread(sync_ones, 100),
        asyncio.to_thread(sync_ones, 200),
    )
    history = tl.history(limit=100)
    assert len(history) == len(tl) == 25  # no write was lost to a fork of the branch
    assert all(a.parent_id == b.id for a, b in itertools.pairwise(history))
    assert history[-1].parent_id is None
    assert sorted(r.seq for r in tl.store.load_steps("agent")) == list(range(1, 26))
    other = await Timeline.aopen("agent", store=tl.store)
    assert [c.id for c in other.history(limit=100)] == [c.id for c in history]


async def test_arefresh_sees_another_objects_writes(tl: Timeline) -> None:
    await tl.acheckpoint({"v": 1})
    await tl.aclose()  # frees the timeline's lease: one writer object at a time
    other = await Timeline.aopen("agent", store=tl.store)
    await other.abranch("side")
    await other.acheckpoint({"v": "side"})
    assert tl.current_branch == "main" and tl.get_state() == {"v": 1}
    await tl.arefresh()
    assert tl.current_branch == "side" and tl.get_state() == {"v": "side"}
    async with Timeline("owned", store=f"memory://{tl.store.namespace}-owned") as owned:
        await owned.acheckpoint({"x": 1})
    assert owned.store is not tl.store
