"""Inputs are recorded beside outputs: serializer, redaction, encryption, and each store."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentrewind import Middleware, StepRecord
from agentrewind.adapters import Chat, resolve_inputs
from agentrewind.cli import main
from agentrewind.documents import export_run, import_run
from agentrewind.ui import api

Cli = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    def run(url: str, *args: str) -> tuple[int, str, str]:
        code = main(["--store", url, *args])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def _inputs(mw: Middleware, run_id: str) -> list[tuple[str, str, Any]]:
    steps = mw.store.load_steps(run_id)
    found = resolve_inputs(steps, mw.serializer, mw.store.namespace)
    return [(s.name, s.status, found[s.step_id]) for s in steps]


def test_a_call_that_raised_then_a_resume_keeps_its_error_and_inputs(
    store_url: str, cli: Cli
) -> None:
    mw = Middleware(store_url)
    calls: list[tuple[str, int]] = []

    def lookup(order: str, retries: int = 0) -> str:
        calls.append((order, retries))
        if len(calls) == 1:
            raise TimeoutError("LLM timed out on A-17")
        return f"found {order}"

    with pytest.raises(TimeoutError), mw.run("r") as run:
        run.step("plan", lambda goal: "plan", "ship A-17")
        run.step("lookup", lookup, "A-17", retries=2)
    with mw.run("r") as run:
        run.step("plan", lambda goal: "plan", "ship A-17")
        assert run.step("lookup", lookup, "A-17", retries=2) == "found A-17"
    assert calls == [("A-17", 2), ("A-17", 2)]

    given = {"args": ["A-17"], "kwargs": {"retries": 2}}
    assert _inputs(mw, "r") == [
        ("plan", "completed", {"args": ["ship A-17"], "kwargs": {}}),
        ("lookup", "failed", given),
        ("lookup", "completed", given),
    ]
    if store_url.startswith("memory://"):
        return  # the CLI reads a store another process can open
    code, out, err = cli(store_url, "show", "r", "2")
    assert code == 0, err
    assert "error      TimeoutError: LLM timed out on A-17" in out
    shown_inputs = out.split("inputs     ", 1)[1].split("\noutput", 1)[0]
    assert json.loads(shown_inputs) == given
    code, out, _ = cli(store_url, "show", "r", "2", "--json")
    shown = json.loads(out)
    assert shown["inputs"] == given and shown["status"] == "failed"
    assert "inputs" not in shown["meta"]  # shown once, beside the output
    assert shown["meta"]["error"]["message"] == "LLM timed out on A-17"
    # the viewer's JSON API gives the same, by the seq `log` prints
    detail = api.step_detail(mw.store, "r", "2")
    assert detail["inputs"] == given and detail["meta"]["error"]["type"] == "TimeoutError"


def test_record_inputs_false_per_middleware_and_per_call_site(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    with Middleware(url, record_inputs=False).run("off") as run:
        run.step("a", lambda x: x, "secret")
    assert _inputs(Middleware(url), "off") == [("a", "completed", None)]

    mw = Middleware(url)

    @mw.step("decorated", record_inputs=False)
    def decorated(x: str) -> str:
        return "ok"

    with mw.run("sites") as run:
        run.step("kept", lambda x: x, "shown")
        run.step("dropped", lambda x: "ok", "secret", record_inputs=False)
        decorated("secret")
    assert _inputs(mw, "sites") == [
        ("kept", "completed", {"args": ["shown"], "kwargs": {}}),
        ("dropped", "completed", None),
        ("decorated", "completed", None),
    ]
    assert all(b"secret" not in s.encode() for s in mw.store.load_steps("sites"))


def test_inputs_go_through_the_redaction_hook_and_a_custom_key_keeps_the_arguments() -> None:
    def redact(field: str, value: Any) -> Any:
        if field == "inputs":
            return json.loads(json.dumps(value).replace("hunter2", "***"))
        return value

    mw = Middleware("memory://", redact=redact)

    @mw.step("login", key=lambda user, password: user)
    def login(user: str, password: str) -> str:
        return "ok"

    with mw.run("r"):
        login("ada", "hunter2")
    assert _inputs(mw, "r") == [("login", "completed", {"args": ["ada", "***"], "kwargs": {}})]


def test_encrypted_inputs_are_bound_to_their_place_and_move_with_an_import(
    tmp_path: Path,
) -> None:
    pytest.importorskip("cryptography")
    from agentrewind.errors import DecryptionError
    from agentrewind.serde.encryption import Encryption, generate_key

    enc = Encryption(generate_key())
    url = f"sqlite:///{tmp_path / 'r.db'}"
    mw = Middleware(url, encryption=enc)
    with mw.run("r") as run:
        run.step("charge", lambda card: "ok", "4111-1111")
    (record,) = mw.store.load_steps("r")
    assert b"4111" not in record.encode()  # sealed at rest
    assert _inputs(mw, "r") == [("charge", "completed", {"args": ["4111-1111"], "kwargs": {}})]

    # a sealed value planted on another step does not open there
    with mw.run("r") as run:
        run.step("other", lambda x: x, 1)
    other = mw.store.load_steps("r")[1]
    other.meta["inputs"] = record.meta["inputs"]
    with pytest.raises(DecryptionError):
        resolve_inputs([other], mw.serializer, mw.store.namespace)

    doc = export_run(mw.store, "r")
    import_run(mw.store, doc.to_dict(), run_id="copy", encryption=enc)
    copied = [row for row in _inputs(mw, "copy") if row[0] != "run-document"]
    assert copied[0] == ("charge", "completed", {"args": ["4111-1111"], "kwargs": {}})


def test_old_records_without_inputs_still_read(tmp_path: Path, cli: Cli) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    mw = Middleware(url)
    old = StepRecord("r", "s1", "custom:a:00#0", "custom", "a", "completed", 1, output=1)
    mw.store.put_step(old)
    assert _inputs(mw, "r") == [("a", "completed", None)]
    code, out, _ = cli(url, "show", "r", "1", "--json")
    assert code == 0 and json.loads(out)["inputs"] is None


class _Msg:
    def __init__(self, text: str) -> None:
        self.text = text


def _digest(text: str) -> bytes:
    import hashlib

    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def test_a_chat_stores_each_message_once_and_show_rebuilds_every_prompt(tmp_path: Path) -> None:
    """A growing history: each prompt is a delta, the model's answers are referenced."""
    url = f"sqlite:///{tmp_path / 'r.db'}"
    mw = Middleware(url)
    history: list[str] = ["system: be brief"]
    prompts: list[list[str]] = []
    with mw.run("chat") as run:
        for turn in range(30):
            history.append(f"user: question {turn}")
            prompt = list(history)
            digests = b"".join(map(_digest, prompt))
            call = run.begin("llm", "model", digests.hex(), inputs=Chat(prompt, digests, {"t": 0}))
            answer = f"assistant: answer {turn}"
            call.produced(_digest(answer), ["text"])
            call.complete({"text": answer})
            prompts.append(prompt)
            history.append(answer)
    steps = mw.store.load_steps("chat")
    found = resolve_inputs(steps, mw.serializer, mw.store.namespace)
    assert [found[s.step_id] for s in steps] == [{"messages": p, "t": 0} for p in prompts]
    # every message is written once: the last record holds its new question only
    assert b"answer 28" not in steps[-1].encode() and b"question 29" in steps[-1].encode()
    assert sum(s.encode().count(b'question 3"') for s in steps) == 1


def test_diff_shows_inputs_beside_outputs(tmp_path: Path, cli: Cli) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    with Middleware(url).run("r") as run:
        run.step("price", lambda item, qty: 3 * qty, "pen", qty=2)
        run.step("price", lambda item, qty: 3 * qty, "pen", qty=5)
    code, out, _ = cli(url, "diff", "r@1", "r@2", "--json")
    assert code == 0
    shown = json.loads(out)
    assert shown["changed"] == {"$": {"before": 6, "after": 15}}
    assert shown["inputs"]["changed"] == {"kwargs.qty": {"before": 2, "after": 5}}
    code, out, _ = cli(url, "diff", "r@1", "r@2")
    assert "inputs:" in out and "~ kwargs.qty: 2 -> 5" in out


def test_a_prompt_whose_earlier_records_are_gone_shows_what_it_can(tmp_path: Path) -> None:
    mw = Middleware(f"sqlite:///{tmp_path / 'r.db'}")
    with mw.run("chat") as run:
        for turn in range(3):
            prompt = [f"q{i}" for i in range(turn + 1)]
            digests = b"".join(map(_digest, prompt))
            run.begin("llm", "m", digests.hex(), inputs=Chat(prompt, digests)).complete("a")
    last = mw.store.load_steps("chat")[-1]
    (found,) = resolve_inputs([last], mw.serializer, mw.store.namespace).values()
    assert found["messages"] == [None, None, "q2"]  # its base is not among the records given


def test_export_and_import_carry_the_inputs_and_chat_deltas(store_url: str, tmp_path: Path) -> None:
    src = Middleware(f"sqlite:///{tmp_path / 'src.db'}")
    with src.run("chat") as run:
        for turn in range(3):
            prompt = [f"q{i}" for i in range(turn + 1)]
            digests = b"".join(map(_digest, prompt))
            call = run.begin("llm", "m", digests.hex(), inputs=Chat(prompt, digests, {"t": 1}))
            call.complete(f"a{turn}")
        run.step("tool", lambda x: x, "arg")
    document = export_run(src.store, "chat").to_dict()
    dst = Middleware(store_url)
    import_run(dst.store, document, run_id="copy")
    found = [row for row in _inputs(dst, "copy") if row[0] != "run-document"]
    assert [given for _, _, given in found] == [
        {"messages": ["q0"], "t": 1},
        {"messages": ["q0", "q1"], "t": 1},
        {"messages": ["q0", "q1", "q2"], "t": 1},
        {"args": ["arg"], "kwargs": {}},
    ]
