"""A LangChain agent that fails in its second tool, then resumes with replay (offline).

Run:  python examples/langchain_agent_resume.py [STORE_URL]

The agent (langchain.agents.create_agent over a scripted, offline chat model) looks an
order up, then emails the customer. On the first run the mail API is down, so the email
tool raises. The second run uses the same thread id with fresh objects, as after a
restart: the two finished model calls and the lookup replay from the journal; only the
email and the final model call run. It prints what was replayed and what that saved.
"""

from __future__ import annotations

import sys
import time

from langchain.agents import create_agent
from langchain_core.tools import tool

from agentrewind_langchain import Middleware
from agentrewind_langchain.testing import order_model

MAIL_DOWN = True
REAL_CALLS = {"lookup_order": 0, "email_customer": 0}


@tool
def lookup_order(order_id: str) -> str:
    """Look up an order by id."""
    REAL_CALLS["lookup_order"] += 1
    time.sleep(0.2)  # a slow back-office API
    return f"order {order_id}: keyboard + mouse, 129.00 EUR, paid"


@tool
def email_customer(order_id: str, text: str) -> str:
    """Email the customer about their order."""
    REAL_CALLS["email_customer"] += 1
    if MAIL_DOWN:
        raise ConnectionError("mail API timed out")
    return f"email about {order_id} sent"


def build_agent(counter: dict[str, int]):
    # scripted: lookup_order, then email_customer, then the answer; each call takes 300 ms
    model = order_model(counter, delay=0.3, tokens=850)
    return create_agent(model, [lookup_order, email_customer])


def attempt(mw: Middleware, thread_id: str) -> None:
    counter: dict[str, int] = {}
    agent = mw.wrap(build_agent(counter))
    REAL_CALLS.update(lookup_order=0, email_customer=0)
    config = {"configurable": {"thread_id": thread_id}}
    try:
        result = agent.invoke({"messages": [("user", "Check A-17 and email the customer")]}, config)
        print(f"  answer: {result['messages'][-1].content}")
    except ConnectionError as exc:
        print(f"  failed: {exc}")
    print(
        f"  real calls: model {counter.get('calls', 0)}, lookup_order "
        f"{REAL_CALLS['lookup_order']}, email_customer {REAL_CALLS['email_customer']}"
    )


def main() -> None:
    global MAIL_DOWN
    url = sys.argv[1] if len(sys.argv) > 1 else "sqlite:///.agentrewind/examples.db"
    mw = Middleware(url)
    thread_id = f"order-A-17-{int(time.time())}"
    print(f"store {url}, thread {thread_id}\n")
    print("run 1 (the mail API is down):")
    attempt(mw, thread_id)
    MAIL_DOWN = False
    print("\nrun 2 (same thread id, fresh objects):")
    attempt(mw, thread_id)
    print("\njournal:")
    for step in mw.store.load_steps(thread_id):
        print(f"  {step.seq:>2}  {step.status:<9}  {step.kind}:{step.name}")
    m = mw.metrics(thread_id)
    print(
        f"\nreplayed {m.replay_hits} calls, saved {m.tokens_saved} tokens and "
        f"{m.seconds_saved:.2f} s; {m.failures} failure(s) over both runs"
    )
    mw.close()


if __name__ == "__main__":
    main()
