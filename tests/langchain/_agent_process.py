"""Child process for test_processes.py: one attempt of the agent run (killed or finishing)."""

from __future__ import annotations

import json
import os
import signal
import sys
import warnings

from lc_support import Flaky, contents, make_agent

import agentrewind
from agentrewind_langchain import Middleware

# Run with -W error: every warning fails the attempt but the one a resume after a kill gives,
# which is shown on stderr for the test to read.
warnings.filterwarnings("default", category=agentrewind.RerunWarning)


def main() -> None:
    url, run_id, mode = sys.argv[1:4]
    flaky = Flaky()
    flaky.fail = False
    counter: dict[str, int] = {}
    agent = make_agent(flaky, counter)
    tools = agent.nodes["tools"].bound.tools_by_name
    email = tools["email_customer"]
    original = email.func

    def email_then_maybe_die(order_id: str, text: str) -> str:
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)  # dies inside the tool call
        return original(order_id, text)

    email.func = email_then_maybe_die
    mw = Middleware(url)
    result = mw.wrap(agent).invoke(
        {"messages": [("user", "Check order A-17 and email the customer")]},
        {"configurable": {"thread_id": run_id}},
    )
    m = mw.metrics(run_id)
    print(
        json.dumps(
            {
                "model_calls": counter.get("calls", 0),
                "lookups": flaky.lookups,
                "emails": flaky.emails,
                "result": contents(result),
                "reruns": m.reruns,
                "replay_hits": m.replay_hits,
            }
        )
    )


if __name__ == "__main__":
    main()
