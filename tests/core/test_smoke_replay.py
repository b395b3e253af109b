from __future__ import annotations

import agentrewind


def test_resume_replays_completed_steps(store_url: str) -> None:
    mw = agentrewind.Middleware(store_url)
    calls: list[str] = []

    def work(name: str) -> dict[str, str]:
        calls.append(name)
        if name == "c" and len(calls) == 3:
            raise RuntimeError("flaky")
        return {"done": name}

    try:
        with mw.run("r") as run:
            for name in "abc":
                run.step(name, work, name)
    except RuntimeError:
        pass
    with mw.run("r") as run:
        results = [run.step(name, work, name) for name in "abc"]
    assert results == [{"done": n} for n in "abc"]
    assert calls == ["a", "b", "c", "c"]
    assert mw.metrics("r").replay_hits == 2
    mw.close()
