"""Timeline semantics on every backend: checkpoint, rollback, branch, merge, history, diff, tree."""

from __future__ import annotations

import pytest

import agentrewind
from agentrewind import Timeline, TimelineError


@pytest.fixture
def tl(store_url: str):  # type: ignore[no-untyped-def]
    store = agentrewind.connect(store_url)
    timeline = Timeline("agent", store=store)
    yield timeline
    store.close()


def reopen(tl: Timeline) -> Timeline:
    return Timeline(tl.name, store=tl.store)


def test_checkpoint_returns_id_hash_and_persists(tl: Timeline) -> None:
    assert tl.get_state() is None and tl.head is None and len(tl) == 0
    cp = tl.checkpoint({"step": "parse", "n": 1}, {"confidence": 0.9}, "Parsed", "parse")
    assert len(cp.id) == 32 and len(cp.hash) == 16
    assert cp.parent_id is None and cp.branch == "main" and cp.metadata == {"confidence": 0.9}
    assert (cp.description, cp.logic_step) == ("Parsed", "parse")
    same = tl.checkpoint({"n": 1, "step": "parse"})
    assert same.hash == cp.hash and same.parent_id == cp.id  # content hash ignores key order
    state = tl.get_state()
    state["n"] = 99  # a copy: changing it changes nothing stored
    assert tl.get_state() == {"step": "parse", "n": 1}
    other = reopen(tl)
    assert other.get_state() == {"step": "parse", "n": 1}
    assert [c.id for c in other.history()] == [same.id, cp.id]
    assert other.get_checkpoint(cp.id).metadata == {"confidence": 0.9}
    assert tl.logic_path() == ["parse"]
    record = tl.store.get_step("agent", cp.id)
    assert record is not None and record.kind == "checkpoint" and record.meta["hash"] == cp.hash


def test_rollback_moves_the_head_and_keeps_history(tl: Timeline) -> None:
    cps = [tl.checkpoint({"i": i}, description=f"c{i}") for i in range(5)]
    assert tl.rollback().id == cps[3].id
    assert tl.get_state() == {"i": 3}
    assert tl.rollback(steps=2).id == cps[1].id
    assert tl.rollback(to_checkpoint_id=cps[4].id).id == cps[4].id  # like git reset to any id
    tl.rollback(to_checkpoint_id=cps[2].id[-10:])  # short ids (the random tail) resolve
    assert tl.get_state() == {"i": 2}
    new = tl.checkpoint({"i": "new"})
    assert new.parent_id == cps[2].id
    # nothing was deleted: the abandoned checkpoints are still there, marked rolled back
    other = reopen(tl)
    assert len(other) == 6 and other.get_state() == {"i": "new"}
    assert other.status(cps[4].id) == "rolled_back"
    assert other.status(new.id) == "head" and other.status(cps[0].id) == "active"
    tree = other.visualize_tree()
    assert cps[4].id[-10:] in tree and "rolled back" in tree
    with pytest.raises(TimelineError, match="only 3 checkpoint"):
        tl.rollback(steps=4)
    with pytest.raises(TimelineError, match="matches no checkpoint"):
        tl.rollback(to_checkpoint_id="ffffffffff")
    with pytest.raises(TimelineError, match="positive"):
        tl.rollback(steps=0)


def test_rollback_on_empty_branch_is_a_clear_error(tl: Timeline) -> None:
    with pytest.raises(TimelineError, match="no checkpoints"):
        tl.rollback()


def test_branch_switch_and_list(tl: Timeline) -> None:
    a = tl.checkpoint({"x": 1})
    b = tl.checkpoint({"x": 2})
    branch = tl.branch("explore")
    assert branch.name == "explore" and branch.head == b.id and branch.is_current
    c = tl.checkpoint({"x": 3})
    assert c.parent_id == b.id and c.branch == "explore"
    old = tl.branch("from-a", from_checkpoint_id=a.id)
    assert old.head == a.id and tl.get_state() == {"x": 1}
    assert tl.switch_branch("main").head == b.id and tl.get_state() == {"x": 2}
    listed = {br.name: br for br in tl.list_branches()}
    assert set(listed) == {"main", "explore", "from-a"}
    assert listed["explore"].checkpoint_count == 3 and listed["main"].is_current
    other = reopen(tl)  # another process sees the same branches and the current one
    assert other.current_branch == "main"
    assert [b.to_dict() for b in other.list_branches()] == [b.to_dict() for b in tl.list_branches()]
    tl.switch_branch("explore")
    assert reopen(tl).current_branch == "explore" and reopen(tl).get_state() == {"x": 3}
    with pytest.raises(TimelineError, match="already exists"):
        tl.branch("main")
    with pytest.raises(TimelineError, match="no branch 'nope'"):
        tl.switch_branch("nope")
    with pytest.raises(TimelineError, match="invalid branch name"):
        tl.branch("HEAD")
    tl.delete_branch("from-a")
    assert "from-a" not in {b.name for b in reopen(tl).list_branches()}
    with pytest.raises(TimelineError, match="current branch"):
        tl.delete_branch("explore")


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        ("ours", {"plan": {"a": 1}, "shared": "main"}),
        ("theirs", {"plan": {"b": 2}, "shared": "side", "extra": True}),
        ("combine", {"plan": {"a": 1, "b": 2}, "shared": "side", "extra": True}),
        ("prefer_higher_confidence", {"plan": {"b": 2}, "shared": "side", "extra": True}),
    ],
)
def test_merge_strategies_record_both_parents(
    tl: Timeline, strategy: str, expected: dict[str, object]
) -> None:
    base = tl.checkpoint({"plan": {}, "shared": "base"}, {"confidence": 0.5})
    tl.branch("side")
    side = tl.checkpoint({"plan": {"b": 2}, "shared": "side", "extra": True}, {"confidence": 0.8})
    tl.switch_branch("main")
    main = tl.checkpoint({"plan": {"a": 1}, "shared": "main"}, {"confidence": 0.6})
    merged = tl.merge("side", strategy=strategy)
    assert merged.state == expected == tl.get_state()
    assert merged.parents == (main.id, side.id) and merged.is_merge
    assert merged.parent_id == main.id and tl.merge_base(main.id, "side").id == base.id
    assert tl.merge_base("main", "side").id == side.id  # after the merge, like git
    assert merged.metadata["merged_from"] == "side"
    assert merged.metadata["merge_strategy"] == strategy
    record = tl.store.get_step("agent", merged.id)
    assert record is not None and record.meta["parents"] == [main.id, side.id]
    other = reopen(tl)
    assert other.get_checkpoint(merged.id).parents == (main.id, side.id)
    assert other.status(side.id) == "head"  # the source branch is untouched


def test_merge_prefers_ours_when_more_confident_and_callable(tl: Timeline) -> None:
    tl.checkpoint({"v": 0})
    tl.branch("weak")
    tl.checkpoint({"v": "weak"}, {"confidence": 0.1})
    tl.switch_branch("main")
    tl.checkpoint({"v": "strong"}, {"confidence": 0.9})
    assert tl.merge("weak").state == {"v": "strong"}
    seen = []

    def pick(ours, theirs, base):  # type: ignore[no-untyped-def]
        seen.append((ours, theirs, base))
        return {"v": [ours["v"], theirs["v"], base["v"]]}

    merged = tl.merge("weak", strategy=pick)
    assert merged.state == {"v": ["strong", "weak", "weak"]}
    assert merged.metadata["merge_strategy"] == "pick" and len(seen) == 1
    assert tl.merge("weak", strategy=lambda ours, theirs: {"two": True}).state == {"two": True}
    with pytest.raises(TimelineError, match="unknown merge strategy"):
        tl.merge("weak", strategy="octopus")
    with pytest.raises(TimelineError, match="into itself"):
        tl.merge("main")
    with pytest.raises(TimelineError, match="no branch 'ghost'"):
        tl.merge("ghost")


def test_history_follows_first_parents_with_limit(tl: Timeline) -> None:
    ids = [tl.checkpoint({"i": i}).id for i in range(6)]
    tl.branch("b")
    extra = tl.checkpoint({"i": "b"})
    assert [c.id for c in tl.history()] == [extra.id, *reversed(ids)]
    assert [c.id for c in tl.history("main", limit=2)] == [ids[5], ids[4]]
    tl.rollback(steps=3)
    assert [c.id for c in tl.history("b")] == [ids[3], ids[2], ids[1], ids[0]]
    with pytest.raises(TimelineError):
        tl.history("missing")


def test_diff_nested_keys(tl: Timeline) -> None:
    a = tl.checkpoint({"plan": {"steps": ["a", "b"], "owner": "x"}, "gone": 1})
    b = tl.checkpoint({"plan": {"steps": ["a", "c", "d"], "owner": "x"}, "new": {"k": True}})
    d = tl.diff(a.id, b.id)
    assert d["a"] == a.id and d["b"] == b.id
    assert d["added"] == {"new": {"k": True}, "plan.steps[2]": "d"}
    assert d["removed"] == {"gone": 1}
    assert d["changed"] == {"plan.steps[1]": {"before": "b", "after": "c"}}
    assert tl.diff("main", a.id)["removed"] == {"new": {"k": True}, "plan.steps[2]": "d"}


def test_visualize_tree_shows_branches_statuses_and_ids(tl: Timeline) -> None:
    root = tl.checkpoint({"s": 0}, description="Root")
    bad = tl.checkpoint({"s": 1}, description="Dead end")
    tl.rollback()
    tl.branch("alt")
    alt = tl.checkpoint({"s": 2}, {"confidence": 0.9}, description="Alternative")
    tl.switch_branch("main")
    merged = tl.merge("alt", strategy="theirs")
    text = tl.visualize_tree()
    lines = text.splitlines()
    assert lines[0].startswith("timeline agent: 4 checkpoint(s); branches: alt, main (HEAD)")
    by_id: dict[str, str] = {}
    for c in (root, bad, alt, merged):
        by_id[c.id[-10:]] = next(ln for ln in lines if f" {c.id[-10:]}  " in ln)
    assert "Root" in by_id[root.id[-10:]]
    assert "[rolled back]" in by_id[bad.id[-10:]]
    assert "<- alt" in by_id[alt.id[-10:]] and "confidence 0.9" in by_id[alt.id[-10:]]
    assert f"merge of {alt.id[-10:]}" in by_id[merged.id[-10:]]
    assert "<- main (HEAD)" in by_id[merged.id[-10:]]
    assert "\x1b[" not in text and "\x1b[" in tl.visualize_tree(color=True)


def test_checkpoints_iterate_and_bad_input(tl: Timeline) -> None:
    tl.checkpoint({"a": 1})
    tl.checkpoint({"a": 2})
    assert [c.state for c in tl.checkpoints()] == [{"a": 1}, {"a": 2}]
    with pytest.raises(agentrewind.SerializationError):
        tl.checkpoint({"bad": object()})
    assert len(tl) == 2  # nothing half-written
    with pytest.raises(TimelineError):
        Timeline("", store=tl.store)
    assert "Timeline('agent'" in repr(tl)
    assert tl.metrics["total_checkpoints"] == 2


def test_subscribe_in_process(tl: Timeline) -> None:
    if tl.store.scheme == "redis":
        pytest.skip("Redis delivery is asynchronous: covered in test_timeline_process")
    events: list[agentrewind.TimelineEvent] = []
    merges: list[str] = []
    sub = tl.subscribe("*", events.append)
    with tl.subscribe("*:merge", lambda e: merges.append(e.checkpoint_id or "")):
        cp = tl.checkpoint({"a": 1})
        tl.branch("x")
        tl.checkpoint({"a": 2})
        tl.switch_branch("main")
        merged = tl.merge("x")
    tl.rollback(to_checkpoint_id=cp.id)
    sub.close()
    tl.checkpoint({"after": "close"})
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
    other = Timeline("agent", store=tl.store)  # another Timeline object on the same store
    with tl.subscribe("main", lambda e: seen.append(e.kind)):
        other.checkpoint({"from": "other"})
    assert seen == ["checkpoint"]
