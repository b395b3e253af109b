"""agentrewind adapter (work in progress)."""
