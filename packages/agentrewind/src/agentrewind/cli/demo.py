"""`agentrewind demo`: a run fails and resumes with replay; a timeline branches and merges.

Everything is offline and deterministic: simulated APIs, no LLM.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import time
from typing import Any

from ..journal.middleware import Middleware
from ..plugins import demos
from ..stores import Store
from ..timeline import Timeline
from ..tree import short_ids

_flaky = {"fail": True}


def command_hint() -> str:
    """How to type `agentrewind` in the shell the demo runs in.

    `agentrewind` when it is on PATH (an activated venv, pipx, `uv run`); otherwise the path of
    the script that is running, relative to the current directory when it lies below it (e.g.
    `.venv/bin/agentrewind`), so every hint the demo prints works as typed.
    """
    script = sys.argv[0] if sys.argv else ""
    if os.path.basename(script) != "agentrewind" or not os.path.isfile(script):
        return "agentrewind"
    on_path = shutil.which("agentrewind")
    if on_path is not None and os.path.samefile(on_path, script):
        return "agentrewind"
    absolute = os.path.abspath(script)
    relative = os.path.relpath(absolute)
    return shlex.quote(relative if not relative.startswith("..") else absolute)


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
        f"\nmetrics: {m.executions} executions, {m.steps} steps recorded (with "
        f"{m.attempts} failed attempt kept beside its retry), {m.replay_hits} replayed, "
        f"{m.seconds_saved * 1000:.0f} ms saved, {m.failures} failure(s)"
    )
    _timeline_story(store, run_id, out)
    for demo in demos():
        out("")
        demo(store, out)


def _timeline_story(store: Store, run_id: str, out: Any) -> None:
    out(f"\n3) the reply, as a timeline of checkpoints ({run_id}-reply)")
    tl = Timeline(f"{run_id}-reply", store=store)
    order = {"order": run_id, "customer": "Ada", "items": ["keyboard", "mouse"]}
    plan = tl.checkpoint(
        {**order, "plan": ["thank", "confirm shipping"]}, {"confidence": 0.7}, "Planned", "plan"
    )
    generic = tl.checkpoint(
        {**order, "plan": plan.state["plan"], "draft": "Thanks for your order."},
        {"confidence": 0.4},
        "Generic draft",
        "draft",
    )
    tl.rollback()
    tl.branch("personal-touch")
    draft = "Hi Ada, your keyboard and mouse ship today. Thank you!"
    tl.checkpoint(
        {**order, "plan": plan.state["plan"], "draft": draft},
        {"confidence": 0.9},
        "Personal draft",
        "draft",
    )
    tl.switch_branch("main")
    merged = tl.merge("personal-touch", strategy="prefer_higher_confidence")
    short = short_ids(n.id for n in tl.tree_nodes())  # as `tree`, `log` and the viewer print them
    out(f"    checkpoint {short[generic.id]}: a generic draft (confidence 0.4)")
    out(f"    rolled back to {short[plan.id]} (the draft stays in the tree)")
    out("    explored branch personal-touch: a personal draft (confidence 0.9)")
    out(f"    merged personal-touch into main -> {short[merged.id]}: {tl.get_state()['draft']!r}")
    out("")
    for line in tl.visualize_tree().splitlines():
        out(f"    {line}")
    changes = tl.diff(plan.id, merged.id)
    out(f"    diff plan -> merge: added {', '.join(changes['added']) or '-'}")
    m = store.get_run(run_id)
    if m is not None:
        saved = m.metrics
        out(
            f"\n4) what replay saved on {run_id}: {saved.replay_hits} call(s) not re-run, "
            f"{saved.seconds_saved * 1000:.0f} ms, {saved.tokens_saved} tokens"
        )
    out(f"    try: {command_hint()} --store {shlex.quote(store.url)} tree {shlex.quote(tl.name)}")
