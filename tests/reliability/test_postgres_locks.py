"""PostgreSQL row locks held by a stalled writer: nobody hangs, nothing stale is applied.

A writer paused inside its write transaction (SIGSTOP, a GC pause, a frozen VM) keeps the
rows it locked, first of all its run's lease row (the fence locks it until the commit):

- a taker waits at most the store's `lock_timeout`, then gets `StoreBusyError` naming the
  run, with nothing written (before, it waited forever);
- a transaction of ours left idle by its paused client is ended by the server after half the
  writer's `lock_timeout`, so the taker goes on; the writer, resumed, is fenced off;
- `delete_run` checks the lease in the delete's own transaction, after locking the lease row,
  so a run taken over meanwhile is refused instead of deleted under its new owner.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import pytest

import agentrewind
from agentrewind import RunLockedError, StoreBusyError

psycopg = pytest.importorskip("psycopg")
pytestmark = pytest.mark.postgres


def ns() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def test_a_taker_behind_a_held_lease_row_gets_a_named_busy_error(postgres_url: str) -> None:
    space = ns()
    with agentrewind.connect(postgres_url, namespace=space) as owner:
        owner.begin_run("r")
        assert owner.acquire_lease("r", "host:1:stale", 0.2).acquired
    time.sleep(0.3)  # the lease has expired
    with psycopg.connect(postgres_url) as stalled:  # a writer stopped inside its write
        stalled.execute("SELECT public.ar_fence(%s, %s, %s)", (space, "r", "host:1:stale"))
        taker = agentrewind.connect(postgres_url, namespace=space, lock_timeout=0.5)
        try:
            t = time.monotonic()
            with pytest.raises(StoreBusyError, match=r"run 'r'.*locked by another transaction"):
                taker.acquire_lease("r", "host:2:taker", 5.0)
            assert time.monotonic() - t < 5
            stalled.rollback()
            assert taker.acquire_lease("r", "host:2:taker", 5.0).acquired  # nothing was left
        finally:
            taker.close()


_WRITER = r"""
import sys, time, agentrewind
from agentrewind import StepRecord
store = agentrewind.connect(sys.argv[1], lock_timeout=1.0, pipeline=False)
owner = "localhost-other:1:" + sys.argv[2]
store.begin_run("r")
assert store.acquire_lease("r", owner, 0.5).acquired
print("ready", flush=True)
i = 0
try:
    while True:
        i += 1
        now = time.time()
        rec = StepRecord(run_id="r", step_id=f"s{i}", key=f"k{i}", kind="custom", name="k",
                         status="completed", seq=i, output=i, created_at=now, updated_at=now)
        store.put_steps([rec], owner=owner)
        store.renew_lease("r", owner, 0.5)
except agentrewind.LeaseLostError:
    print("lost", flush=True)
    sys.exit(3)
"""


def _holds_row_idle(url: str, dbname: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid "
            "WHERE a.datname = %s AND a.state = 'idle in transaction' "
            "AND l.locktype = 'transactionid' AND l.granted",
            (dbname,),
        ).fetchone()
    return bool(row and row[0])


def test_a_writer_paused_idle_in_its_transaction_is_ended_and_the_taker_goes_on(
    postgres_url: str,
) -> None:
    url = f"{postgres_url}?namespace={ns()}"
    dbname = postgres_url.rsplit("/", 1)[1]
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, url, uuid.uuid4().hex],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().startswith("ready")
        for _ in range(200):  # stop it where it waits, idle, inside its write transaction
            writer.send_signal(signal.SIGSTOP)
            time.sleep(0.05)
            if _holds_row_idle(postgres_url, dbname):
                break
            writer.send_signal(signal.SIGCONT)
            time.sleep(0.01)
        else:
            pytest.fail("the writer was never caught idle inside its write transaction")
        time.sleep(0.6)  # its lease (0.5 s) has expired; the server ends it after 0.5 s idle
        with agentrewind.connect(url, lock_timeout=10.0) as taker:
            t = time.monotonic()
            assert taker.acquire_lease("r", "host:2:taker", 30.0).acquired
            assert time.monotonic() - t < 3  # not the taker's 10 s lock_timeout
            writer.send_signal(signal.SIGCONT)
            out, err = writer.communicate(timeout=30)
            assert writer.returncode == 3 and "lost" in out, err[-2000:]
            assert taker.renew_lease("r", "host:2:taker", 30.0).acquired
    finally:
        writer.send_signal(signal.SIGCONT)
        writer.kill()
        writer.communicate()


def test_delete_waits_for_a_takeover_in_flight_then_refuses(postgres_url: str) -> None:
    space = ns()
    with agentrewind.connect(postgres_url, namespace=space) as store:
        store.begin_run("r")
        assert store.acquire_lease("r", "host:1:old", 0.1).acquired
        time.sleep(0.2)  # expired: a delete without force may go ahead
        with psycopg.connect(postgres_url) as taker:  # a takeover, not yet committed
            taker.execute(
                "UPDATE public.ar_leases SET owner = 'host:2:new', expires_at = %s "
                "WHERE ns = %s AND run_id = 'r'",
                (time.time() + 30, space),
            )
            result: list[Any] = []

            def delete() -> None:
                try:
                    result.append(store.delete_run("r"))
                except Exception as exc:
                    result.append(exc)

            thread = threading.Thread(target=delete)
            thread.start()
            time.sleep(0.5)
            assert thread.is_alive()  # waiting on the lease row, not deciding from a stale read
            taker.commit()
            thread.join(10)
        assert len(result) == 1 and isinstance(result[0], RunLockedError), result
        assert "host:2:new" in str(result[0])
        assert store.get_run("r") is not None
        lease = store.acquire_lease("r", "host:3:other", 5.0)
        assert not lease.acquired and lease[1] == "host:2:new"
        assert store.delete_run("r", force=True)


def test_a_transaction_ended_by_the_idle_timeout_is_retried_on_a_fresh_connection(
    postgres_url: str,
) -> None:
    from agentrewind.stores.postgres import PostgresStore

    store = PostgresStore(postgres_url, namespace=ns(), lock_timeout=0.4)  # idle: 0.2 s
    try:
        store.begin_run("r")
        assert store.acquire_lease("r", "host:1:me", 30.0).acquired
        attempts: list[int] = []

        def write(conn: Any) -> str:
            attempts.append(1)
            if len(attempts) == 1:
                time.sleep(0.6)  # the client pauses inside its transaction: the server ends it
            conn.execute("SELECT 1")
            return "written"

        assert store.db.call(lambda conn: store.fenced_in(conn, "r", "host:1:me", write)) == (
            "written"
        )
        assert len(attempts) == 2
    finally:
        store.close()
