"""ReActAgent and AgentWorkflow (with handoff) under the adapter."""

from __future__ import annotations

import pytest
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent, ReActAgent
from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole, ToolCallBlock
from llama_index.core.llms import MockLLM
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool

from agentrewind_llamaindex import Middleware

EXECUTED: list[str] = []


class ScriptedReAct(MockLLM):
    async def astream_chat(self, messages, **kwargs):
        EXECUTED.append("llm")
        seen = sum("HI!" in str(m.content) for m in messages[1:])
        text = (
            'Thought: I need the tool.\nAction: shout\nAction Input: {"text": "hi"}'
            if seen == 0
            else "Thought: I can answer.\nAnswer: HI!"
        )

        async def gen():
            yield ChatResponse(message=ChatMessage(role="assistant", content=text), delta=text)

        return gen()


def shout(text: str) -> str:
    """Shout the text."""
    EXECUTED.append("tool:shout")
    return text.upper() + "!"


# ReActAgent itself calls the deprecated ctx.is_running inside its step
@pytest.mark.filterwarnings("ignore:is_running called from within a step:DeprecationWarning")
async def test_react_agent_rerun_replays_llm_and_tool(tmp_path):
    mw = Middleware(f"sqlite:///{tmp_path / 'r.db'}")

    def agent():
        return ReActAgent(
            tools=[FunctionTool.from_defaults(shout)], llm=ScriptedReAct(), timeout=30
        )

    EXECUTED.clear()
    first = await mw.wrap(agent()).run(user_msg="shout hi", run_id="react-1")
    assert EXECUTED == ["llm", "tool:shout", "llm"]
    EXECUTED.clear()
    # the run completed: the same id starts over, every LLM and tool call replays
    again = await mw.wrap(agent()).run(user_msg="shout hi", run_id="react-1")
    assert EXECUTED == []
    assert str(again) == str(first) == "HI!"
    mw.close()


def _handoff_script(messages, **kwargs):
    EXECUTED.append("llm")
    tool_results = [m for m in messages if m.role == MessageRole.TOOL]
    system = str(messages[0].content) if messages else ""
    if "writer" in system:
        return ChatMessage(role="assistant", content="A poem about tides.")
    if not tool_results:
        return ChatMessage(
            role="assistant",
            blocks=[
                ToolCallBlock(
                    tool_call_id="h1",
                    tool_name="handoff",
                    tool_kwargs={"to_agent": "writer", "reason": "poetry"},
                )
            ],
        )
    return ChatMessage(role="assistant", content="handed off")


async def test_agent_workflow_with_handoff_is_journaled(tmp_path):
    mw = Middleware(f"sqlite:///{tmp_path / 'h.db'}")

    def team():
        llm = MockFunctionCallingLLM(response_generator=_handoff_script)
        router = FunctionAgent(
            name="router",
            description="routes",
            system_prompt="You are the router.",
            llm=llm,
            can_handoff_to=["writer"],
        )
        writer = FunctionAgent(
            name="writer", description="writes", system_prompt="You are the writer.", llm=llm
        )
        return AgentWorkflow(agents=[router, writer], root_agent="router", timeout=30)

    EXECUTED.clear()
    handler = mw.wrap(team()).run(user_msg="write a poem", run_id="team-1")
    first = await handler
    assert EXECUTED == ["llm", "llm"]
    assert first.current_agent_name == "writer"
    steps = mw.store.load_steps("team-1")
    assert [s.kind for s in steps].count("llm") == 2
    ticks = [s.name for s in steps if s.kind == "node"]
    assert "step_result:call_tool" in ticks and ticks[-1].startswith("step_result:")
    assert mw.store.get_run("team-1").status == "completed"
    mw.close()
