"""Calls a resume pays after a crash inside a node with several calls: agentrewind vs LangGraph.

Run:  python benchmarks/langchain_multicall.py [--redis URL]

Each scenario of tests/langchain/_multicall.py is killed (SIGKILL, in a forked child) at its
crash point inside one LangGraph node, with a `SqliteSaver` checkpointing every superstep
(`durability="sync"`). The thread is then resumed (`invoke(None)`) in this process with fresh
objects: once with the `SqliteSaver` alone, once with the same graph wrapped by agentrewind
(journal on SQLite, and on Redis with `--redis`). The table counts model requests (failed
attempts included) and tool executions paid by the resume, beside a clean run's totals.
tests/langchain/test_multicall_resume.py asserts the same figures.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "langchain"))

from _multicall import SCENARIOS, clean_run, measure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", help="also journal on this Redis URL")
    args = parser.parse_args()
    stores = ["sqlite"] + (["redis"] if args.redis else [])
    head = f"{'scenario':<10} {'dies':<40} {'clean run':>10} {'SqliteSaver':>12}"
    head += "".join(f" {'+ agentrewind/' + s:>20}" for s in stores)
    print("model requests / tool executions paid by the resume")
    print(head)
    print("-" * len(head))
    for scenario in SCENARIOS:
        with tempfile.TemporaryDirectory() as tmp:
            workdir = Path(tmp)
            clean = clean_run(scenario, workdir)
            alone = measure(scenario, workdir, None)
            row = f"{scenario.name:<10} {scenario.dies:<40} "
            row += f"{clean.models:>5} / {clean.tools:<2} {alone.models:>6} / {alone.tools:<3}"
            for store in stores:
                url = f"sqlite:///{workdir / 'journal.db'}"
                if store == "redis":
                    url = f"{args.redis}?namespace=multicall-{workdir.name}"
                ours = measure(scenario, workdir, url, tag=store)
                row += f" {ours.models:>14} / {ours.tools:<3}"
            print(row)


if __name__ == "__main__":
    main()
