"""RewindSaver on PostgreSQL: lean writes on a known thread, and row-level security."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest

from agentrewind_langgraph import RewindSaver
from postgres_support import tenant_role

psycopg = pytest.importorskip("psycopg")
pytestmark = pytest.mark.postgres


def _cp(i: int) -> dict[str, Any]:
    from langgraph.checkpoint.base.id import uuid6

    return {
        "v": 4, "id": str(uuid6(clock_seq=i)), "ts": "2030-01-01T00:00:00+00:00",
        "channel_values": {"x": i}, "channel_versions": {"x": f"{i + 1:010d}"},
        "versions_seen": {}, "updated_channels": None,
    }  # fmt: skip


def _cfg(thread: str) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def test_a_known_thread_is_written_without_its_thread_row(postgres_url: str) -> None:
    url = f"{postgres_url}?namespace=k-{uuid.uuid4().hex[:8]}"
    with RewindSaver(url) as saver:
        cfg = saver.put(_cfg("t"), _cp(0), {"step": 0}, {"x": "0000000001"})
        store: Any = saver.store
        row = store.render("SELECT xmin::text, xmax::text FROM {s}.lg_threads WHERE ns = %s")
        first = store.db.fetchone(row, (store.namespace,))
        for i in range(1, 6):
            cfg = saver.put(cfg, _cp(i), {"step": i}, {"x": f"{i + 1:010d}"})
            saver.put_writes(cfg, [("x", i)], "task", "~0")
        # neither updated nor locked (an upsert that changes nothing still locks the row)
        assert store.db.fetchone(row, (store.namespace,)) == first
        assert first[1] == "0"
        assert saver.get_tuple(_cfg("t")).checkpoint["channel_values"] == {"x": 5}  # type: ignore[union-attr]


def test_a_thread_deleted_elsewhere_refuses_the_late_write_of_a_known_thread(
    postgres_url: str,
) -> None:
    url = f"{postgres_url}?namespace=k-{uuid.uuid4().hex[:8]}"
    with RewindSaver(url) as mine, RewindSaver(url) as other:
        cfg = mine.put(_cfg("t"), _cp(0), {"step": 0}, {"x": "0000000001"})
        cfg = mine.put(cfg, _cp(1), {"step": 1}, {"x": "0000000002"})
        other.delete_thread("t")  # another process: `mine` still knows the thread
        mine.put(cfg, _cp(2), {"step": 2}, {"x": "0000000003"})  # its history is gone
        assert mine.get_tuple(_cfg("t")) is None
        mine.put(_cfg("t"), _cp(3), {"step": 3}, {"x": "0000000004"})  # a new history
        assert [t.metadata["step"] for t in other.list(_cfg("t"))] == [3]
        store: Any = other.store
        rows = store.db.fetchall(
            store.render("SELECT thread_id FROM {s}.lg_threads WHERE ns = %s"),
            (store.namespace,),
        )
        assert rows == [("t",)]


def test_a_tenant_saver_sees_only_its_namespace(postgres_url: str) -> None:
    schema = f"lgrls_{uuid.uuid4().hex[:8]}"
    owner = RewindSaver(f"{postgres_url}?schema={schema}&rls=1&namespace=admin")
    owner.close()  # the owner made the tables and enabled row-level security on them
    with tenant_role(postgres_url, schema) as url:
        base = f"{url}?schema={schema}"
        with RewindSaver(f"{base}&namespace=a") as a, RewindSaver(f"{base}&namespace=b") as b:
            a.put(_cfg("t"), _cp(0), {"step": 0, "who": "a"}, {"x": "0000000001"})
            b.put(_cfg("t"), _cp(1), {"step": 1, "who": "b"}, {"x": "0000000002"})
            assert [t.metadata["who"] for t in a.list(None)] == ["a"]
            assert [t.metadata["who"] for t in b.list(None, filter={"step": 1})] == ["b"]
            a.delete_thread("t")
            assert b.get_tuple(_cfg("t")).metadata["who"] == "b"  # type: ignore[union-attr]
            store: Any = a.store
            table = store.render("{s}.lg_checkpoints")

            def crafted(conn: Any) -> int:
                with store.db.transaction(conn):
                    return int(conn.execute(f"DELETE FROM {table} WHERE ns = 'b'").rowcount)

            assert store.db.call(crafted) == 0
            assert b.get_tuple(_cfg("t")) is not None


def test_with_roles_bound_a_tenant_role_cannot_reach_another_namespaces_threads(
    postgres_url: str,
) -> None:
    from agentrewind.errors import StoreError

    schema = f"lgrole_{uuid.uuid4().hex[:8]}"
    owner = RewindSaver(f"{postgres_url}?schema={schema}&rls=role&namespace=admin")
    try:
        with tenant_role(postgres_url, schema) as url_a, tenant_role(postgres_url, schema) as url_b:
            role_a, role_b = (url.split("//")[1].split("@")[0] for url in (url_a, url_b))
            owner.store.bind_tenant(role_a, "a")  # type: ignore[attr-defined]
            owner.store.bind_tenant(role_b, "b")  # type: ignore[attr-defined]
            with RewindSaver(f"{url_b}?schema={schema}&namespace=b") as b:
                b.put(_cfg("t"), _cp(1), {"step": 1, "who": "b"}, {"x": "0000000002"})
            with pytest.raises(StoreError, match="may not open namespace 'b'"):
                RewindSaver(f"{url_a}?schema={schema}&namespace=b")
            with RewindSaver(f"{url_a}?schema={schema}&namespace=a") as a:
                store: Any = a.store

                def crafted(conn: Any) -> tuple[int, int]:
                    with conn.transaction():
                        conn.execute("SELECT set_config('agentrewind.namespace', 'b', true)")
                        seen = conn.execute(
                            store.render("SELECT count(*) FROM {s}.lg_checkpoints")
                        ).fetchone()[0]
                        gone = conn.execute(
                            store.render("DELETE FROM {s}.lg_threads WHERE ns = 'b'")
                        ).rowcount
                    return int(seen), int(gone)

                assert store.db.call(crafted) == (0, 0)
            with RewindSaver(f"{url_b}?schema={schema}&namespace=b") as b:
                assert b.get_tuple(_cfg("t")).metadata["who"] == "b"  # type: ignore[union-attr]
    finally:
        owner.close()


def test_a_superstep_on_a_known_thread_is_one_statement_with_its_held_writes(
    postgres_url: str,
) -> None:
    from langgraph_support import cfg, line_graph

    url = f"{postgres_url}?namespace=k-{uuid.uuid4().hex[:8]}"
    with RewindSaver(url) as saver:
        graph = line_graph(4).compile(checkpointer=saver)
        config = cfg()
        graph.invoke({"items": []}, config, durability="sync")  # the thread is now known
        db: Any = saver.store.db
        plan = db.plan
        sent: list[list[str]] = []

        def counted(statements: Any, *args: Any) -> Any:
            out = plan(statements, *args)
            # a write on the checkpoint's path (the writer marks go on a thread of their own)
            if args[1] and threading.current_thread().name != "agentrewind-lg-marks":
                sent.append([text.split("(")[0].strip() for text, _ in out[0]])
            return out

        db.plan = counted
        try:
            out = graph.invoke({"items": []}, config, durability="sync")
        finally:
            del db.plan
        assert out["items"] == [f"n{i}" for i in range(4)] * 2
        # The input's put, then one per superstep (`__start__` and 4 nodes), each carrying
        # the writes of the task before it; the thread row is refreshed at most once a second
        # (then the put's writes go first in its pipeline, with the transaction's settings).
        assert len(sent) == 6, sent
        assert sum(len(s) > 1 for s in sent) <= 1, sent
        history = list(saver.list(config))
        # every checkpoint the second run wrote but its last has its task's writes
        assert all(t.pending_writes for t in history[1:6]), [t.metadata for t in history]
        assert history[0].pending_writes == []
