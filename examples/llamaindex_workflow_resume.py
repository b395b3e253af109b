"""A LlamaIndex workflow whose second step fails; the same run id resumes it (offline).

Run: python examples/llamaindex_workflow_resume.py
The first attempt fails after the LLM call in `write`; the second attempt does not run
`outline` again and replays the finished LLM calls from the journal.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import agentrewind
from agentrewind_llamaindex._demo import DemoResearch, _EchoLLM, _state


async def main() -> None:
    db = Path(tempfile.mkdtemp()) / "runs.db"
    mw = agentrewind.Middleware(f"sqlite:///{db}")  # dispatches to the LlamaIndex adapter
    wf = DemoResearch(timeout=30)
    wf.llm = _EchoLLM()
    wf = mw.wrap(wf)
    _state.update(fail=True, log=[])
    try:
        await wf.run(run_id="essay-1", topic="tide pools")
    except ConnectionError as exc:
        print("attempt 1:", _state["log"], "->", exc)
    _state.update(fail=False, log=[])
    result = await wf.run(run_id="essay-1")
    print("attempt 2:", _state["log"], "->", result)
    m = mw.metrics("essay-1")
    print(f"replayed {m.replay_hits} call(s), saved {m.seconds_saved * 1000:.0f} ms")


if __name__ == "__main__":
    asyncio.run(main())
