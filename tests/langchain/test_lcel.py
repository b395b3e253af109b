"""LCEL: chains, parallel branches, batch, retry, fallbacks, and a lambda that streams."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda, RunnableParallel
from langchain_core.tools import tool

from agentrewind import DivergenceWarning
from agentrewind_langchain import Middleware
from agentrewind_langchain.testing import ScriptedChatModel

PROMPT = ChatPromptTemplate.from_messages([("system", "Be brief."), ("user", "{q}")])


def chain(counter: dict[str, int], reply: str = "forty-two") -> Any:
    return PROMPT | ScriptedChatModel(responses=[reply], counter=counter) | StrOutputParser()


def cfg(run_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": run_id}}


def test_prompt_model_parser_sync_async_stream(sqlite_url: str) -> None:
    mw = Middleware(sqlite_url)
    first: dict[str, int] = {}
    assert mw.wrap(chain(first)).invoke({"q": "answer?"}, cfg("c1")) == "forty-two"
    assert first["calls"] == 1
    again: dict[str, int] = {}
    wrapped = mw.wrap(chain(again))
    assert wrapped.invoke({"q": "answer?"}, cfg("c1")) == "forty-two"
    assert "".join(wrapped.stream({"q": "answer?"}, cfg("c1"))) == "forty-two"
    assert again.get("calls", 0) == 0
    with pytest.warns(DivergenceWarning):  # new input under the same run id: runs, warns
        other = wrapped.invoke({"q": "another?"}, cfg("c1"))
    assert other == "forty-two" and again["calls"] == 1


async def test_async_and_astream(sqlite_url: str) -> None:
    mw = Middleware(sqlite_url)
    counter: dict[str, int] = {}
    wrapped = mw.wrap(chain(counter))
    assert await wrapped.ainvoke({"q": "x"}, cfg("a1")) == "forty-two"
    parts = [p async for p in wrapped.astream({"q": "x"}, cfg("a1"))]
    assert "".join(parts) == "forty-two"
    assert counter["calls"] == 1


def test_parallel_branches_replay(sqlite_url: str) -> None:
    mw = Middleware(sqlite_url)

    def build(counter: dict[str, int]) -> Any:
        return RunnableParallel(
            short=chain(counter, "short answer"),
            long=PROMPT
            | ScriptedChatModel(responses=["long answer"], model="big", counter=counter)
            | StrOutputParser(),
        )

    c1: dict[str, int] = {}
    out1 = mw.wrap(build(c1)).invoke({"q": "q"}, cfg("p1"))
    c2: dict[str, int] = {}
    out2 = mw.wrap(build(c2)).invoke({"q": "q"}, cfg("p1"))
    assert out1 == out2 == {"short": "short answer", "long": "long answer"}
    assert (c1["calls"], c2.get("calls", 0)) == (2, 0)


def test_batch_gives_each_item_its_own_run(sqlite_url: str) -> None:
    mw = Middleware(sqlite_url)
    counter: dict[str, int] = {}
    wrapped = mw.wrap(chain(counter))
    inputs = [{"q": "a"}, {"q": "b"}, {"q": "a"}]
    assert wrapped.batch(inputs, cfg("b")) == ["forty-two"] * 3
    assert wrapped.last_run_ids == ["b:0", "b:1", "b:2"]
    assert counter["calls"] == 3
    assert wrapped.batch(inputs, cfg("b")) == ["forty-two"] * 3
    assert counter["calls"] == 3
    assert [len(mw.store.load_steps(r)) for r in wrapped.last_run_ids] == [1, 1, 1]


async def test_abatch(sqlite_url: str) -> None:
    mw = Middleware(sqlite_url)
    counter: dict[str, int] = {}
    wrapped = mw.wrap(chain(counter))
    configs = [cfg("x"), cfg("y")]
    assert await wrapped.abatch([{"q": "1"}, {"q": "2"}], configs) == ["forty-two"] * 2
    assert await wrapped.abatch([{"q": "1"}, {"q": "2"}], configs) == ["forty-two"] * 2
    assert wrapped.last_run_ids == ["x", "y"] and counter["calls"] == 2


class Boom(RuntimeError):
    pass


def test_with_retry_replays_after_a_failed_attempt(sqlite_url: str) -> None:
    mw = Middleware(sqlite_url)
    attempts = {"n": 0}
    counter: dict[str, int] = {}
    model = ScriptedChatModel(responses=["ok"], counter=counter)

    def flaky_model() -> Any:
        def call(prompt: Any) -> Any:
            attempts["n"] += 1
            if attempts["n"] == 1:
                model.invoke(prompt)  # recorded, then the step fails after it
                raise Boom("transient")
            return model.invoke(prompt)

        return RunnableLambda(call)

    retried = PROMPT | flaky_model().with_retry(
        stop_after_attempt=3, wait_exponential_jitter=False, retry_if_exception_type=(Boom,)
    )
    out = mw.wrap(retried).invoke({"q": "r"}, cfg("r1"))
    assert out.content == "ok"
    assert counter["calls"] == 2  # each attempt's call is its own occurrence (#0, #1)
    attempts["n"] = 0  # rerun the whole story: both attempts' calls replay
    assert mw.wrap(retried).invoke({"q": "r"}, cfg("r1")).content == "ok"
    assert counter["calls"] == 2


def test_model_with_retry_releases_the_failed_occurrence(sqlite_url: str) -> None:
    mw = Middleware(sqlite_url)
    state = {"fail": 1, "real": 0}

    class Flaky(ScriptedChatModel):
        def _generate(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> Any:
            state["real"] += 1
            if state["fail"]:
                state["fail"] -= 1
                raise Boom("429")
            return super()._generate(messages, stop, run_manager, **kw)

    def build():
        return PROMPT | Flaky(responses=["fine"]).with_retry(
            stop_after_attempt=2, wait_exponential_jitter=False
        )

    assert mw.wrap(build()).invoke({"q": "z"}, cfg("w")).content == "fine"
    assert state["real"] == 2
    assert mw.wrap(build()).invoke({"q": "z"}, cfg("w")).content == "fine"
    assert state["real"] == 2  # the successful attempt replays under occurrence #0
    keys = [s.key for s in mw.store.load_steps("w") if s.status == "completed"]
    assert len(keys) == 1 and keys[0].endswith("#0")


def test_with_fallbacks(sqlite_url: str) -> None:
    mw = Middleware(sqlite_url)
    real = {"primary": 0}

    class Down(ScriptedChatModel):
        def _generate(self, *a: Any, **k: Any) -> Any:
            real["primary"] += 1
            raise Boom("primary down")

    backup: dict[str, int] = {}

    def build():
        return PROMPT | Down(responses=["x"], model="primary").with_fallbacks(
            [ScriptedChatModel(responses=["from backup"], model="backup", counter=backup)]
        )

    assert mw.wrap(build()).invoke({"q": "f"}, cfg("f")).content == "from backup"
    assert mw.wrap(build()).invoke({"q": "f"}, cfg("f")).content == "from backup"
    assert backup["calls"] == 1  # the backup's answer replays
    assert real["primary"] == 2  # failures are not journaled: the primary is tried again


def test_lambda_calling_model_stream_and_tools(durable_url: str) -> None:
    mw = Middleware(durable_url)
    runs = {"search": 0, "save": 0, "fail": True}

    @tool
    def search(query: str) -> str:
        """Search."""
        runs["search"] += 1
        return f"results for {query}"

    @tool
    def save(text: str) -> str:
        """Save."""
        if runs["fail"]:
            raise OSError("disk full")
        runs["save"] += 1
        return "saved"

    def pipeline(counter: dict[str, int]) -> Any:
        model = ScriptedChatModel(responses=["a streamed draft answer"], counter=counter)

        def body(q: str) -> str:
            found = search.invoke({"query": q})
            draft = "".join(str(c.content) for c in model.stream(f"{q}: {found}"))
            save.invoke({"text": draft})
            return draft

        return RunnableLambda(body)

    c1: dict[str, int] = {}
    with pytest.raises(OSError):
        mw.wrap(pipeline(c1)).invoke("cats", cfg("l1"))
    runs["fail"] = False
    c2: dict[str, int] = {}
    assert mw.wrap(pipeline(c2)).invoke("cats", cfg("l1")) == "a streamed draft answer"
    assert (c1["calls"], c2.get("calls", 0)) == (1, 0)
    assert (runs["search"], runs["save"]) == (1, 1)
    statuses = {s.name: s.status for s in mw.store.load_steps("l1")}
    assert statuses == {
        "search": "completed",
        "ScriptedChatModel": "completed",
        "save": "completed",
    }
    mw.close()


def test_replayed_explicit_stream_is_rechunked(sqlite_url: str) -> None:
    mw = Middleware(sqlite_url)
    counter: dict[str, int] = {}
    model = ScriptedChatModel(responses=["one two three four"], counter=counter)
    lam = RunnableLambda(lambda q: [c.content for c in model.stream(q)])
    live = mw.wrap(lam).invoke("go", cfg("s"))
    replay = mw.wrap(lam).invoke("go", cfg("s"))
    assert counter["calls"] == 1
    assert "".join(replay) == "".join(live) == "one two three four"
    assert len([p for p in replay if p]) == 4  # word by word, as the live stream was
