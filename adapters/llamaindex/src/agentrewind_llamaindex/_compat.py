"""Version guard: the adapter needs the tick journal of llama-index-workflows 2.26."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from agentrewind.adapters import AgentRewindError

__all__ = ["MIN_WORKFLOWS", "check_workflows_version", "subclasses"]

MIN_WORKFLOWS = (2, 26)
"""`BasicRuntime.restore` and the journaled ticks it replays arrived in 2.26.0."""


def _parse(text: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in text.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def check_workflows_version(installed: str | None = None) -> str:
    """Return the installed `llama-index-workflows` version, or raise a clear error.

    Args:
        installed: A version string to check instead of the installed distribution's.

    Raises:
        AgentRewindError: The package is missing or older than 2.26.
    """
    if installed is None:
        try:
            installed = version("llama-index-workflows")
        except PackageNotFoundError as exc:
            raise AgentRewindError(
                "agentrewind-llamaindex needs llama-index-workflows>=2.26: "
                'pip install "agentrewind[llamaindex]"'
            ) from exc
    if _parse(installed) < MIN_WORKFLOWS:
        raise AgentRewindError(
            f"agentrewind-llamaindex needs llama-index-workflows>=2.26 (its tick journal and "
            f"BasicRuntime.restore), but {installed} is installed: "
            'pip install -U "llama-index-workflows>=2.26"'
        )
    return installed


def subclasses(root: type) -> list[type]:
    """`root` and every subclass defined so far (the classes whose methods get hooked)."""
    seen: list[type] = []
    stack = [root]
    while stack:
        cls = stack.pop()
        if cls in seen:
            continue
        seen.append(cls)
        stack.extend(cls.__subclasses__())
    return seen
