"""`agentrewind demo`: an offline run that fails part-way, then resumes with replay."""

from __future__ import annotations

import time
from typing import Any

from .middleware import Middleware
from .stores import Store

_flaky = {"fail": True}


def _fetch_order(order_id: str) -> dict[str, Any]:
    time.sleep(0.05)  # stands in for a slow API
    return {"order": order_id, "items": ["keyboard", "mouse"], "total": 129.0}


def _charge_card(order: dict[str, Any]) -> str:
    time.sleep(0.05)
    return f"ch_{order['order']}"


def _send_receipt(order: dict[str, Any], charge: str) -> str:
    if _flaky["fail"]:
        raise ConnectionError("mail API timed out (simulated)")
    return f"receipt for {order['order']} ({charge}) sent"


def _pipeline(mw: Middleware, run_id: str) -> str:
    with mw.run(run_id) as run:
        order = run.step("fetch_order", _fetch_order, run_id)
        charge = run.step("charge_card", _charge_card, order)
        try:
            return run.step("send_receipt", _send_receipt, order, charge)
        finally:
            for event in run.events:
                print(f"    {event.outcome:>9}  {event.kind}:{event.name}")


def run_demo(store: Store, out: Any = print) -> None:
    """Run the demo against `store`, printing what each attempt did."""
    mw = Middleware(store)
    run_id = f"demo-{int(time.time() * 1000)}"
    out(f"agentrewind demo on {store.url}  (run id {run_id})\n")
    out("1) first attempt: the third step fails")
    _flaky["fail"] = True
    try:
        _pipeline(mw, run_id)
    except ConnectionError as exc:
        out(f"    failed: {exc}")
    out("\n2) resume with the same run id: finished steps replay, the failed one runs")
    _flaky["fail"] = False
    result = _pipeline(mw, run_id)
    out(f"    result: {result}")
    m = mw.metrics(run_id)
    out(
        f"\nmetrics: {m.steps} steps recorded, {m.replay_hits} replayed, "
        f"{m.seconds_saved * 1000:.0f} ms saved, {m.failures} failure(s)"
    )
    from .plugins import demos

    for demo in demos():
        out("")
        demo(store, out)
