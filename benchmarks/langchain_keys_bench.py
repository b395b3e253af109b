"""Cost of one LangChain chat key (`chat_key`) against history length, paired with a base revision.

Run:  python benchmarks/langchain_keys_bench.py [--against REV] [--rounds R] [--calls N]

Each case makes the prompt a call of an agent makes (new message objects are built outside
the timing), and times `chat_key(llm_string, prompt, params)`:

* 1 message: a new question alone;
* 200 messages: the same 199-message history plus a new question (langchain_bench's case);
* 200+, growing: an agent's history (199 at first), one new message appended per call;
* 200, sliding: the last 200 messages of a growing history (a trimmed history);
* 200, repeated: the same 200-message prompt again (a retry, or a replay of the same call);
* 200, 1 edited: an early message's field reassigned before every call (the slow path).

With `--against REV` the `_keys.py` of that git revision is loaded beside the working tree's and
both are timed in the same rounds, interleaved. In the first and last round some keys of every
case are computed again from deep copies of their prompts (new objects: nothing cached) by every
module, and must be equal. Medians of all rounds in microseconds per key, and new/base.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

import agentrewind_langchain._keys as current

KEYS_PATH = "adapters/langchain/src/agentrewind_langchain/_keys.py"
PARAMS = {"stop": ["\n"], "temperature": 0}


def load_revision(rev: str) -> ModuleType:
    """The `_keys` module as it was at git revision `rev`, imported under another name."""
    root = Path(__file__).resolve().parent.parent
    text = subprocess.run(
        ["git", "show", f"{rev}:{KEYS_PATH}"], cwd=root, check=True, capture_output=True, text=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "base_keys.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("base_keys", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["base_keys"] = module
    spec.loader.exec_module(module)
    return module


def history(n: int) -> list[BaseMessage]:
    return [
        HumanMessage(f"question {i}: " + "words " * 30)
        if i % 2 == 0
        else AIMessage("an answer " * 30)
        for i in range(n)
    ]


Prompts = Callable[[int], list[BaseMessage]]


def case(name: str) -> Prompts:
    """A new sequence of prompts for case `name` (each module gets its own message objects)."""
    base = history(199)
    fixed = [*base, HumanMessage("the same question")]

    def prompt(i: int) -> list[BaseMessage]:
        if name == "1 message":
            return [HumanMessage(f"question {i}")]
        if name == "200 messages":
            return [*base, HumanMessage(f"question {i}")]
        if name == "200+, growing":
            base.append(HumanMessage(f"question {i}"))
            return list(base)
        if name == "200, sliding":
            base.append(HumanMessage(f"question {i}"))
            return base[-200:]
        if name == "200, repeated":
            return fixed
        base[3].content = f"edited {i}"  # "200, 1 edited"
        return [*base, HumanMessage("question")]

    return prompt


CASES = ["1 message", "200 messages", "200+, growing", "200, sliding", "200, repeated"]
CASES.append("200, 1 edited")


def time_keys(
    module: Any, make: Prompts, calls: int, check: bool
) -> tuple[list[float], list[list[Any]]]:
    """Seconds per key (the prompt is built outside the timing), and, to `check`, some keys
    with deep copies of their prompts."""
    clock = time.perf_counter
    out: list[float] = []
    seen: list[list[Any]] = []
    for i in range(calls):
        prompt = make(i)
        t0 = clock()
        key = module.chat_key("scripted-model", prompt, PARAMS)
        out.append(clock() - t0)
        if check and (i < 3 or i == calls - 1):
            seen.append([key, [m.model_copy(deep=True) for m in prompt]])
    return out, seen


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--against", default=None, help="git revision to compare with")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=200, help="calls per case and round")
    args = parser.parse_args()
    modules: dict[str, Any] = {"new": current}
    if args.against:
        modules = {"base": load_revision(args.against), "new": current}
    samples: dict[str, dict[str, list[float]]] = {c: {m: [] for m in modules} for c in CASES}
    for r in range(args.rounds + 1):  # round 0 warms up
        order = list(modules) if r % 2 else list(reversed(modules))
        for name in CASES:
            for label in order:
                check = r in (0, args.rounds)
                seconds, seen = time_keys(modules[label], case(name), args.calls, check)
                if r:
                    samples[name][label].extend(seconds)
                for key, prompt in seen:
                    for module in modules.values():
                        assert module.chat_key("scripted-model", prompt, PARAMS) == key, name
    print(f"median us per chat_key ({args.calls} calls x {args.rounds} rounds, interleaved)\n")
    ratio = "    new/base" if len(modules) > 1 else ""
    print(f"{'':<16}" + "".join(f"{m:>10}" for m in modules) + ratio)
    for name, row in samples.items():
        medians = {m: statistics.median(v) * 1e6 for m, v in row.items()}
        line = f"{name:<16}" + "".join(f"{medians[m]:>10.2f}" for m in modules)
        if "base" in medians:
            line += f"{medians['new'] / medians['base']:>11.2f}x"
        print(line)


if __name__ == "__main__":
    main()
