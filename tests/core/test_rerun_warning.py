"""A call killed in flight that runs again on resume says so, at the user's line."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import agentrewind

KILLED = textwrap.dedent(
    """
    import os, sys
    import agentrewind

    mw = agentrewind.Middleware(sys.argv[1])
    with mw.run("pay-1") as run:
        run.step("quote", lambda: 42)
        run.step("charge", lambda: os._exit(9))  # the process dies inside the call
    """
)


def _killed_run(url: str, tmp_path: Path) -> None:
    script = tmp_path / "killed.py"
    script.write_text(KILLED)
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    done = subprocess.run([sys.executable, str(script), url], env=env, check=False)
    assert done.returncode == 9


@pytest.mark.parametrize(
    "kind", ["sqlite", "redis", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_a_call_killed_in_flight_warns_where_the_user_calls_it_again(
    kind: str, tmp_path: Path, namespace: str, request: pytest.FixtureRequest
) -> None:
    url = {
        "sqlite": lambda: f"sqlite:///{tmp_path / 'runs.db'}",
        "redis": lambda: request.getfixturevalue("redis_url"),
        "postgres": lambda: request.getfixturevalue("postgres_url"),
    }[kind]() + f"?namespace={namespace}"
    _killed_run(url, tmp_path)
    mw = agentrewind.Middleware(url)
    charged: list[int] = []
    with mw.run("pay-1") as run, warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert run.step("quote", lambda: -1) == 42  # replayed: no warning
        assert seen == []
        run.step("charge", lambda: charged.append(1))  # <- the warning's line
    mw.close()
    assert charged == [1]
    (warning,) = seen
    assert warning.category is agentrewind.RerunWarning
    assert warning.filename == __file__
    assert "charge" in str(warning.message) and "pay-1" in str(warning.message)
    assert "idempotency_key" in str(warning.message)


def test_the_warning_points_past_nested_agentrewind_frames(tmp_path: Path) -> None:
    """Through `@middleware.step` (a decorator: more of our frames between) it still lands here."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    _killed_run(url, tmp_path)
    mw = agentrewind.Middleware(url)

    @mw.step("charge")
    def charge() -> str:
        return "charged"

    with mw.run("pay-1"):
        mw.step("quote")(lambda: -1)()
        with pytest.warns(agentrewind.RerunWarning) as seen:
            assert charge() == "charged"  # <- the warning's line
    mw.close()
    assert [w.filename for w in seen] == [__file__]


def test_a_call_that_raised_before_is_retried_without_a_warning(tmp_path: Path) -> None:
    """Only a call that may have had its effect (killed in flight) warns; a failure is a retry."""
    mw = agentrewind.Middleware(f"sqlite:///{tmp_path / 'runs.db'}")

    def flaky() -> str:
        raise TimeoutError("LLM timed out")

    with pytest.raises(TimeoutError), mw.run("r"):
        mw.step("call")(flaky)()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with mw.run("r"):
            assert mw.step("call")(lambda: "ok")() == "ok"
    mw.close()
