"""agentrewind for LlamaIndex: workflows and agents resume after a crash, step by step.

>>> from agentrewind_llamaindex import Middleware        # doctest: +SKIP
>>> wf = Middleware("sqlite:///runs.db").wrap(MyWorkflow())  # doctest: +SKIP
>>> await wf.run(run_id="job-1", topic="pirates")          # doctest: +SKIP

Run the same line again after a crash or a failed step: finished steps and LLM/tool calls
replay from the journal, the rest runs.
"""

from __future__ import annotations

from ._compat import check_workflows_version

check_workflows_version()

from ._adapter import ADAPTER, LlamaIndexAdapter, Middleware  # noqa: E402
from ._calls import install_call_hooks  # noqa: E402
from ._codecs import register_llamaindex_codecs  # noqa: E402
from ._runtime import RewindRuntime  # noqa: E402
from ._workflow import RewindWorkflow  # noqa: E402

register_llamaindex_codecs()

__all__ = [
    "ADAPTER",
    "LlamaIndexAdapter",
    "Middleware",
    "RewindRuntime",
    "RewindWorkflow",
    "check_workflows_version",
    "install_call_hooks",
]
