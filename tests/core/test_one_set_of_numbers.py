"""One set of numbers for a plain Python run that failed, was SIGKILLed, then resumed.

`runs`, `metrics`, the viewer's JSON API and the OpenTelemetry run span report the same
figures, and a killed execution's replays count (they are written before the call it died in).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk")

import agentrewind
from numbers_support import assert_one_set, die, in_child, spans

RUN = "order-7"


def _attempt(url: str, counter: Path, *, fail_charge: bool, kill_in_send: bool) -> str:
    mw = agentrewind.Middleware(url)

    def charge(order: str) -> str:
        if fail_charge:
            raise ConnectionError("payments API timed out")
        return f"ch_{order}"

    def send(receipt: str) -> str:
        with counter.open("a") as f:
            f.write("send\n")
        if kill_in_send:
            die()
        return f"sent {receipt}"

    try:
        with mw.run(RUN) as run:
            order = run.step("fetch", lambda: "A-17")
            receipt = run.step("charge", charge, order)
            sent = run.step("send", send, receipt)
            return run.step("log", lambda s: s.upper(), sent)
    finally:
        mw.close()


def test_a_killed_then_resumed_run_has_one_set_of_numbers(
    shared_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = tmp_path / "sends"

    def attempt(fail_charge: bool = False, kill_in_send: bool = False) -> str:
        return _attempt(shared_url, counter, fail_charge=fail_charge, kill_in_send=kill_in_send)

    # 1: charge raises. 2: fetch replays, charge runs again, send dies by SIGKILL.
    assert in_child(lambda: attempt(fail_charge=True)) == 0
    assert in_child(lambda: attempt(kill_in_send=True)) == -9
    with spans(monkeypatch) as exporter:  # 3: fetch and charge replay, send runs again, log runs
        with pytest.warns(agentrewind.RerunWarning, match="send"):
            assert attempt() == "SENT CH_A-17"
        figures = assert_one_set(
            shared_url,
            RUN,
            exporter,
            executions=3,
            replay_hits=3,  # fetch in the killed execution (written before send ran), then two
            failures=1,
            reruns=1,
            attempts=2,  # charge after it failed, send after it was killed
            steps=6,  # fetch, charge (failed), charge, send (killed), send, log
            cache_hits=0,
        )
    assert counter.read_text().count("send") == 2
    assert figures["seconds_saved"] > 0  # what fetch and charge took when they ran
