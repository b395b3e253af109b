"""The edit log: committed state edits applied in the order made, whatever the commit order."""

from __future__ import annotations

from agentrewind_llamaindex._edits import EditLog, describe, resolve


def _tree(**data):
    return {"state_data": {"_data": dict(data)}}


def _edit(before, path, value, op="replace"):
    return describe([{"op": op, "path": path, "value": value}], lambda p: resolve(before, p))


def test_increments_commute_and_skip_an_uncommitted_one():
    start = _tree(count=0)
    log = EditLog()
    # four edits made in order 0..3 on the live store; edit 0 never commits (its step crashed)
    edits = [_edit(_tree(count=n), "/state_data/_data/count", n + 1) for n in range(4)]
    data = start
    for seq in (3, 2, 1):  # committed in reverse order
        data = log.apply(data, seq + 1, edits[seq])
    assert data == _tree(count=3)  # the crashed step's re-run makes it 4


def test_a_later_value_wins_over_an_older_one_that_commits_last():
    log = EditLog()
    older = _edit(_tree(phase="a"), "/state_data/_data/phase", "b")
    newer = _edit(_tree(phase="b"), "/state_data/_data/phase", "c")
    data = log.apply(_tree(phase="a"), 2, newer)
    data = log.apply(data, 1, older)
    assert data == _tree(phase="c")


def test_appends_survive_a_missing_earlier_append():
    log = EditLog()
    edit = _edit(_tree(items=[1, 2]), "/state_data/_data/items/2", 3, op="add")
    assert edit[0]["path"].endswith("/-")
    assert log.apply(_tree(items=[1]), 1, edit) == _tree(items=[1, 3])


def test_a_float_written_over_the_committed_value_is_exact():
    edit = _edit(_tree(x=0.1), "/state_data/_data/x", 0.3)
    assert EditLog().apply(_tree(x=0.1), 1, edit) == _tree(x=0.3)
