"""RewindSaver on PostgreSQL: what only this backend has to get right."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from agentrewind_langgraph import RewindSaver

psycopg = pytest.importorskip("psycopg")
pytestmark = pytest.mark.postgres


def _cp(i: int) -> dict[str, Any]:
    from langgraph.checkpoint.base.id import uuid6

    return {
        "v": 4, "id": str(uuid6(clock_seq=i)), "ts": "2030-01-01T00:00:00+00:00",
        "channel_values": {"x": i}, "channel_versions": {"x": f"{i + 1:010d}"},
        "versions_seen": {}, "updated_channels": None,
    }  # fmt: skip


@pytest.fixture
def url(postgres_url: str) -> str:
    return f"{postgres_url}?namespace=pg-{uuid.uuid4().hex[:8]}&schema=lg_{uuid.uuid4().hex[:6]}"


def test_metadata_jsonb_cannot_hold_nul_but_round_trips(url: str) -> None:
    with RewindSaver(url) as saver:
        cfg = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        saver.put(cfg, _cp(0), {"note": "a\x00b", "step": 0}, {"x": "0000000001"})
        saver.put(cfg, _cp(1), {"note": "plain", "step": 1}, {"x": "0000000002"})
        assert saver.get_tuple(cfg).metadata["note"] == "plain"  # type: ignore[union-attr]
        found = list(saver.list(None, filter={"step": 0}))
        # LangGraph strips NUL from metadata strings; nothing else may be lost or fail
        assert [t.metadata["note"].replace("\x00", "") for t in found] == ["ab"]
        assert [t.metadata["step"] for t in saver.list(cfg, filter={"note": "plain"})] == [1]


def test_metadata_filter_across_threads_uses_the_gin_index(url: str) -> None:
    with RewindSaver(url) as saver:
        for t in range(30):
            cfg = {"configurable": {"thread_id": f"t{t}", "checkpoint_ns": ""}}
            saver.put(cfg, _cp(t), {"source": "loop", "user": f"u{t % 3}"}, {"x": "0000000001"})
        got = {
            t.config["configurable"]["thread_id"] for t in saver.list(None, filter={"user": "u1"})
        }
        assert got == {f"t{t}" for t in range(1, 30, 3)}
        store = saver.store
        table = store.render("{s}.lg_checkpoints")

        def plan(conn: Any) -> str:
            with conn.transaction():
                # 5,000 more checkpoints with other metadata, so the planner has a choice
                conn.execute(
                    f"INSERT INTO {table} SELECT %s, 'bulk' || g, '', lpad(g::text, 10, '0'),"
                    " NULL, NULL, 'msgpack', '\\x00', '{}'::jsonb,"
                    " jsonb_build_object('user', 'b' || g), 'json', NULL"
                    " FROM generate_series(1, 5000) g",
                    (store.namespace,),
                )
                conn.execute(f"ANALYZE {table}")
                rows = conn.execute(
                    f"EXPLAIN SELECT checkpoint_id FROM {table} c WHERE c.ns = %s"
                    " AND (c.metadata @> %s::jsonb OR c.metadata IS NULL)",
                    (store.namespace, '{"user": "u1"}'),
                ).fetchall()
            return "\n".join(r[0] for r in rows)

        assert "lg_checkpoints_md" in store.db.call(plan)


def test_latest_read_is_by_primary_key_not_by_history(url: str) -> None:
    with RewindSaver(url) as saver:
        cfg: Any = {"configurable": {"thread_id": "long", "checkpoint_ns": ""}}
        for i in range(200):
            cfg = saver.put(cfg, _cp(i), {"step": i}, {"x": f"{i + 1:010d}"})
        latest = {"configurable": {"thread_id": "long", "checkpoint_ns": ""}}
        assert saver.get_tuple(latest).checkpoint["channel_values"] == {"x": 199}  # type: ignore[union-attr]
        sql = next(v for k, v in saver.backend._sql.items() if k.startswith("QUERY:"))
        args = {"ns": saver.store.namespace, "now": time.time(), "tid": "long", "cns": "",
                "limit": 1}  # fmt: skip

        def analyze(conn: Any) -> str:
            rows = conn.execute("EXPLAIN (ANALYZE, FORMAT TEXT) " + sql, args).fetchall()
            return "\n".join(r[0] for r in rows)

        plan = saver.store.db.call(analyze)
        assert "Seq Scan" not in plan
        # no node reads more than a handful of rows, whatever the thread's length
        counts = [int(p.split("rows=")[2].split()[0]) for p in plan.splitlines() if "actual" in p]
        assert max(counts) <= 2, plan


def test_graph_survives_the_server_dropping_its_connections(url: str, postgres_url: str) -> None:
    from langgraph.graph import END, START, MessagesState, StateGraph

    b = StateGraph(MessagesState)
    b.add_node("echo", lambda s: {"messages": [("ai", f"seen {len(s['messages'])}")]})
    b.add_edge(START, "echo")
    b.add_edge("echo", END)
    with RewindSaver(url) as saver:
        graph = b.compile(checkpointer=saver)
        cfg = {"configurable": {"thread_id": "drop"}}
        graph.invoke({"messages": [HumanMessage(content="one")]}, cfg)
        dbname = postgres_url.rsplit("/", 1)[1]
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (dbname,),
            )
        out = graph.invoke({"messages": [HumanMessage(content="two")]}, cfg)
        assert [m.content for m in out["messages"]] == ["one", "seen 1", "two", "seen 3"]


async def test_async_api_on_postgres(url: str) -> None:
    async with RewindSaver.from_conn_string(url) as saver:
        cfg: Any = {"configurable": {"thread_id": "a", "checkpoint_ns": ""}}
        stored = await saver.aput(cfg, _cp(0), {"step": 0}, {"x": "0000000001"})
        await saver.aput_writes(stored, [("x", 5)], "task", "~0")
        tup = await saver.aget_tuple(cfg)
        assert tup is not None and tup.pending_writes == [("task", "x", 5)]
        assert [t.metadata["step"] async for t in saver.alist(cfg)] == [0]


def test_migrate_postgres_saver_keeps_history_and_pending_interrupt(
    postgres_url: str, saver_url: str
) -> None:
    pg_saver = pytest.importorskip("langgraph.checkpoint.postgres")
    from langgraph.types import Command

    from agentrewind_langgraph import migrate_postgres_saver
    from langgraph_support import ask_graph

    schema = f"pgsaver_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    src = f"{postgres_url}?options=-csearch_path%3D{schema}"
    with pg_saver.PostgresSaver.from_conn_string(src) as old:
        old.setup()
        graph = ask_graph().compile(checkpointer=old)
        graph.invoke({"items": []}, {"configurable": {"thread_id": "done"}})
        graph.invoke(Command(resume="yes"), {"configurable": {"thread_id": "done"}})
        graph.invoke({"items": []}, {"configurable": {"thread_id": "paused"}})
        old_hist = {
            t: [(c.config, c.metadata, c.checkpoint["channel_values"], c.parent_config)
                for c in old.list({"configurable": {"thread_id": t}})]
            for t in ("done", "paused")
        }  # fmt: skip
    counts = migrate_postgres_saver(src, saver_url)
    assert counts["threads"] == 2 and counts["checkpoints"] == sum(map(len, old_hist.values()))
    assert counts["writes"] > 0
    with RewindSaver(saver_url) as saver:
        for t, hist in old_hist.items():
            new = [(c.config, c.metadata, c.checkpoint["channel_values"], c.parent_config)
                   for c in saver.list({"configurable": {"thread_id": t}})]  # fmt: skip
            assert new == hist
        graph = ask_graph().compile(checkpointer=saver)
        out = graph.invoke(Command(resume="later"), {"configurable": {"thread_id": "paused"}})
        assert out["items"] == ["a", "answer:later"]


def test_cli_migrate_postgres_saver_reports_a_bad_source(tmp_path: Any) -> None:
    import subprocess
    import sys

    cli = [sys.executable, "-m", "agentrewind.cli", "--store", f"sqlite:///{tmp_path / 'n.db'}"]
    bad = subprocess.run(
        [*cli, "migrate-postgres-saver", "postgresql://postgres@127.0.0.1:1/x?connect_timeout=2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 3 and "cannot open the PostgresSaver database" in bad.stderr
