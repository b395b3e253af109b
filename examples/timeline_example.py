import agentrewind

store = agentrewind.connect("sqlite:///runs.db")
store.delete_run("research-agent")  # start over each time this example runs
tl = agentrewind.Timeline("research-agent", store=store)

plan = tl.checkpoint(
    state={"question": "best laptop under $1000", "sources": []},
    metadata={"confidence": 0.6},
    description="Parsed the question",
    logic_step="parse",
)
tl.checkpoint(
    state={"question": "best laptop under $1000", "sources": ["ads"]},
    metadata={"confidence": 0.2},
    description="Searched ads",
)
tl.rollback()  # a dead end: the head moves back, nothing is lost

tl.branch("reviews-first")  # explore another path
tl.checkpoint(
    state={"question": "best laptop under $1000", "sources": ["reviews"]},
    metadata={"confidence": 0.9},
    description="Read reviews",
)
tl.switch_branch("main")
merged = tl.merge("reviews-first", strategy="prefer_higher_confidence")

print(tl.get_state()["sources"])  # ['reviews']
print(merged.parents == (plan.id, tl.history(branch="reviews-first")[0].id))  # True
print(tl.diff(plan.id, merged.id)["added"])  # {'sources[0]': 'reviews'}
print(tl.visualize_tree())


def summarise(state):
    if not state.get("retried"):
        raise TimeoutError("LLM timed out")
    return {"summary": "The reviewed laptop wins."}


result, cp = tl.safe_execute(
    summarise,
    state={"sources": ["reviews"]},
    description="summarise",
    max_retries=2,
    strategy=agentrewind.AlternativePathStrategy(state_modifiers={"retried": True}),
)
print(result["summary"])  # The reviewed laptop wins.
