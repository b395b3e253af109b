"""Runs a store holds that no installed run source can show.

A LangGraph thread where `agentrewind-langgraph` is not installed, for example: the CLI and
the viewer then say how many there are and what to install, instead of "no run". Only
counting and membership are read here, from the adapter's own tables or keys (their names
are part of its storage format); nothing of the framework is imported.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..stores import Store

__all__ = ["Hidden", "hidden_runs", "hidden_source_of", "install_hint", "noun"]


@dataclasses.dataclass(frozen=True, slots=True)
class Hidden:
    """Runs of one framework in the store that this installation cannot show."""

    source: str
    """The run source's name (`langgraph`)."""
    count: int
    install: str
    """The command that installs what shows them."""

    def sentence(self) -> str:
        """`3 LangGraph thread(s) not shown here: run `pip install ...` to see them`."""
        return (
            f"{self.count} {_NOUN[self.source]}(s) not shown here: run `{self.install}` to see them"
        )


_INSTALL = {"langgraph": 'pip install "agentrewind[langgraph]"'}
_NOUN = {"langgraph": "LangGraph thread"}
_TABLE = {"langgraph": "lg_threads"}
_REDIS_REGISTRY = {"langgraph": "lg:threads"}


def noun(source: str) -> str:
    """What one run of `source` is called (`LangGraph thread`)."""
    return _NOUN.get(source, f"{source} run")


def install_hint(source: str) -> str | None:
    """The command that installs run source `source`, if known."""
    return _INSTALL.get(source)


def _missing(installed: list[str]) -> list[str]:
    return [name for name in _INSTALL if name not in installed]


def _sql_threads(store: Any, table: str, run_id: str | None) -> int:
    where, args = ("ns = ?", [store.namespace]) if store.scheme == "sqlite" else ("ns = %s", [])
    if run_id is not None:
        where += " AND thread_id = " + ("?" if store.scheme == "sqlite" else "%s")
    if store.scheme == "sqlite":
        with store.db.read() as conn:
            if not conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
            ).fetchone():
                return 0
            row = conn.execute(f"SELECT count(*) FROM {table} WHERE {where}",
                               (*args, *([run_id] if run_id else []))).fetchone()  # fmt: skip
        return int(row[0])
    found = store.db.fetchone(
        "SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
        (store.schema, table),
    )
    if not found:
        return 0
    row = store.db.fetchone(f"SELECT count(*) FROM {store._q}.{table} WHERE {where}",
                            (store.namespace, *([run_id] if run_id else [])))  # fmt: skip
    return int(row[0])


def _count(store: Store, source: str, run_id: str | None = None) -> int:
    st: Any = store
    if store.scheme in ("sqlite", "postgresql"):
        return _sql_threads(st, _TABLE[source], run_id)
    if store.scheme == "redis":
        key = st.namespace_key(_REDIS_REGISTRY[source])
        with st.translate_errors():
            if run_id is None:
                return int(st.client.zcard(key))
            return int(st.client.zscore(key, run_id) is not None)
    return 0


def hidden_runs(store: Store, installed: list[str]) -> list[Hidden]:
    """Per framework whose run source is not among `installed`: its runs in the store."""
    out = []
    for name in _missing(installed):
        n = _count(store, name)
        if n:
            out.append(Hidden(name, n, _INSTALL[name]))
    return out


def hidden_source_of(store: Store, run_id: str, installed: list[str]) -> Hidden | None:
    """The framework (not installed) that `run_id` is a run of in the store, if any."""
    for name in _missing(installed):
        if _count(store, name, run_id):
            return Hidden(name, 1, _INSTALL[name])
    return None
