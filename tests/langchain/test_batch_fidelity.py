"""A wrapped batch is the wrapped runnable's batch (issue 25): steps see the batch, a retry
retries what it retries, the inner runnable gets exactly its calls; the journal still keeps
one run per item, and a rerun replays each item's calls from its own run."""

from __future__ import annotations

import uuid
import warnings
from typing import Any
from unittest import mock

import pytest
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnableConfig, RunnableGenerator, RunnableLambda
from langchain_core.tracers.base import BaseTracer
from langchain_core.tracers.schemas import Run

from agentrewind_langchain import Middleware
from agentrewind_langchain.testing import ScriptedChatModel


class Recorder(Runnable[Any, Any]):
    """A step whose `batch` is its own: notes each batch it receives."""

    def __init__(self) -> None:
        self.batches: list[list[Any]] = []

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        raise AssertionError("called one by one")

    def batch(self, inputs: list[Any], config: Any = None, **kwargs: Any) -> list[Any]:
        self.batches.append(list(inputs))
        return [f"<{x}>" for x in inputs]

    async def abatch(self, inputs: list[Any], config: Any = None, **kwargs: Any) -> list[Any]:
        return self.batch(inputs, config, **kwargs)


def fails(x: str) -> str:
    if x.startswith("b"):
        raise ValueError(f"fail for {x}")
    return x


@pytest.mark.parametrize("async_api", [False, True])
async def test_a_sequence_step_receives_the_batch(durable_url: str, async_api: bool) -> None:
    step = Recorder()
    wrapped = Middleware(durable_url).wrap(RunnableLambda(lambda x: x * 2) | step)
    inputs = ["a", "b", "c"]
    out = await wrapped.abatch(inputs) if async_api else wrapped.batch(inputs)
    assert out == ["<aa>", "<bb>", "<cc>"]
    assert step.batches == [["aa", "bb", "cc"]]  # one batch of three, as unwrapped
    assert len(set(wrapped.last_run_ids)) == 3


@pytest.mark.parametrize("async_api", [False, True])
async def test_the_first_failing_step_of_the_batch_raises_as_unwrapped(
    durable_url: str, async_api: bool
) -> None:
    seq = RunnableLambda(lambda x: x + "a") | RunnableLambda(fails)
    inputs = ["foo", "bar", "baz"]
    wrapped = Middleware(durable_url).wrap(seq)
    with pytest.raises(ValueError) as unwrapped:
        await seq.abatch(inputs) if async_api else seq.batch(inputs)
    with pytest.raises(ValueError) as got:
        await wrapped.abatch(inputs) if async_api else wrapped.batch(inputs)
    assert str(got.value) == str(unwrapped.value) == "fail for bara"
    out = await (wrapped.abatch if async_api else _sync(wrapped.batch))(
        inputs, return_exceptions=True
    )
    assert [str(x) for x in out] == ["fooa", "fail for bara", "fail for baza"]


def _sync(fn: Any) -> Any:
    async def call(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return call


def _retrying(counter: mock.Mock) -> Any:
    def body(x: int) -> int:
        counter(x)
        if x == 1:
            raise ValueError("x is 1")
        if x == 2:
            raise RuntimeError("x is 2")
        return x

    return RunnableLambda(body).with_retry(
        stop_after_attempt=2, wait_exponential_jitter=False, retry_if_exception_type=(ValueError,)
    )


@pytest.mark.parametrize("async_api", [False, True])
async def test_a_retried_batch_runs_every_attempt(durable_url: str, async_api: bool) -> None:
    plain, inner = mock.Mock(), mock.Mock()
    runnable, wrapped = _retrying(plain), Middleware(durable_url).wrap(_retrying(inner))
    for target, counter in ((runnable, plain), (wrapped, inner)):
        run = target.abatch if async_api else _sync(target.batch)
        out = await run([1, 2, 0], return_exceptions=True)
        assert [type(x) for x in out] == [ValueError, RuntimeError, int]
        # the batch is retried whole (items 1 and 2) once: 3 + 2 calls
        assert sorted(c.args[0] for c in counter.call_args_list) == [0, 1, 1, 2, 2]


def test_the_inner_runnable_receives_exactly_the_calls_unwrapped_does(durable_url: str) -> None:
    class Fake(Runnable[str, int]):
        def invoke(self, input: str, config: RunnableConfig | None = None, **kw: Any) -> int:
            return len(input)

    fake = Fake()
    spy = mock.Mock(wraps=fake.invoke)
    object.__setattr__(fake, "invoke", spy)
    wrapped = Middleware(durable_url).wrap(fake.with_config(recursion_limit=5, tags=["c"]))
    assert wrapped.invoke("hello", {"tags": ["a-tag"]}) == 5
    assert spy.call_count == 1
    spy.reset_mock()
    assert wrapped.batch(["hello", "wooorld"], {"metadata": {"key": "value"}}) == [5, 7]
    expected = {
        "tags": ["c"],
        "metadata": {"key": "value"},
        "callbacks": None,
        "recursion_limit": 5,
        "configurable": {},
    }
    assert sorted(spy.call_args_list) == [
        mock.call("hello", expected),
        mock.call("wooorld", expected),
    ]


PROMPT = ChatPromptTemplate.from_messages([("user", "{q}")])


class BatchingParser(StrOutputParser):
    """A parser step with a batch of its own, so the sequence hands it the whole batch."""

    seen: list[int] = []

    def batch(self, inputs: list[Any], config: Any = None, **kwargs: Any) -> list[Any]:
        BatchingParser.seen.append(len(inputs))
        return super().batch(inputs, config, **kwargs)


def test_a_batched_chain_journals_each_item_in_its_run_and_replays_it(durable_url: str) -> None:
    mw = Middleware(durable_url)
    counter: dict[str, int] = {}
    model = ScriptedChatModel(responses=["one", "two", "three"], counter=counter)
    config = {"configurable": {"thread_id": "batch-7"}}
    wrapped = mw.wrap(PROMPT | model | BatchingParser())
    questions = [{"q": "first"}, {"q": "second"}, {"q": "third"}]
    BatchingParser.seen = []
    first = wrapped.batch(questions, config)
    assert counter["calls"] == 3 and BatchingParser.seen == [3]
    assert wrapped.last_run_ids == ["batch-7:0", "batch-7:1", "batch-7:2"]
    again: dict[str, int] = {}
    rerun = mw.wrap(
        PROMPT | ScriptedChatModel(responses=["x"], counter=again) | BatchingParser()
    ).batch(questions, config)
    assert rerun == first and again.get("calls", 0) == 0  # each item replayed from its run
    for i, run_id in enumerate(wrapped.last_run_ids):
        steps = [s for s in mw.store.load_steps(run_id) if s.kind == "llm"]
        assert len(steps) == 1, (i, steps)


class Roots(BaseTracer):
    """The root runs a batch starts (each with its children)."""

    def __init__(self) -> None:
        super().__init__()
        self.roots: list[Run] = []

    def _persist_run(self, run: Run) -> None:
        self.roots.append(run)


@pytest.mark.parametrize("async_api", [False, True])
async def test_one_run_id_for_a_batch_names_the_first_item_and_warns_as_unwrapped(
    durable_url: str, async_api: bool
) -> None:
    """A shared config naming a `run_id` for several items: LangChain warns that it names the
    first item only, and each item's callback tree has its own root. The wrapper passes one
    config per item on, so it warns in LangChain's place and gives the id to the first only."""
    inner = RunnableLambda(len)

    async def agen(_: Any) -> Any:
        yield await inner.ainvoke("a")
        yield await inner.ainvoke("aa")

    def gen(_: Any) -> Any:
        yield inner.invoke("a")
        yield inner.invoke("aa")

    run_id = uuid.uuid4()
    wrapped = Middleware(durable_url).wrap(RunnableGenerator(agen if async_api else gen))
    for runnable in (RunnableGenerator(agen if async_api else gen), wrapped):
        tracer = Roots()
        config: RunnableConfig = {"run_id": run_id, "callbacks": [tracer]}
        with pytest.warns(RuntimeWarning, match="first element of the batch"):
            out = (
                await runnable.abatch([None, None], config)
                if async_api
                else runnable.batch([None, None], config)
            )
        assert out == [3, 3]
        assert len(tracer.roots) == 2  # one callback tree per item
        assert [len(root.child_runs) for root in tracer.roots] == [2, 2]
        assert run_id in {root.id for root in tracer.roots}
        assert tracer.roots[0].id != tracer.roots[1].id
    assert len(set(wrapped.last_run_ids)) == 2
    with warnings.catch_warnings():  # one item, or one config per item: no warning
        warnings.simplefilter("error")
        single = Middleware(durable_url).wrap(RunnableLambda(lambda x: x + 1))
        assert single.batch([1], {"run_id": uuid.uuid4()}) == [2]
        assert single.batch([1, 2], [{"run_id": uuid.uuid4()}, {"run_id": uuid.uuid4()}]) == [2, 3]
