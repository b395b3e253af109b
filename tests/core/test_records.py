from __future__ import annotations

import pytest

from agentrewind import CorruptRecordError, SchemaVersionError, StepRecord


def make() -> StepRecord:
    return StepRecord(
        "r", "s1", "custom:a:00#0", "custom", "a", "completed", 1, None, {"x": 1}, {"duration": 0.1}
    )


def test_encode_decode() -> None:
    record = make()
    assert StepRecord.decode(record.encode()) == record


@pytest.mark.parametrize(
    "mutate",
    [
        lambda b: b.replace(b'"x":1', b'"x":2'),
        lambda b: b[:-3],
        lambda b: b"XX" + b[2:],
        lambda b: b"AR1:zzzz:" + b.split(b":", 2)[2],
        lambda b: b"AR1:" + b.split(b":", 2)[1] + b":{not json",
    ],
)
def test_altered_bytes_are_detected(mutate) -> None:  # type: ignore[no-untyped-def]
    data = mutate(make().encode())
    with pytest.raises(CorruptRecordError, match="run 'r'"):
        StepRecord.decode(data, where="run 'r'")


def test_newer_format_is_refused() -> None:
    data = make().encode().replace(b"AR1:", b"AR9:", 1)
    with pytest.raises(SchemaVersionError, match="upgrade agentrewind"):
        StepRecord.decode(data)
