"""Issue 23 ("Trust, round three"), part A: each reproduction, on every store it applies to.

Each test failed on main before its fix: a paused timeline writer re-took its lapsed lease
and overwrote the new owner's head, a document whose checkpoints' parents form a cycle was
imported (and readers then spun), and the smaller findings (viewer numbers, huge `seq`).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import json
import os
import re
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentrewind
from agentrewind import LeaseLostError, Timeline
from agentrewind.ui import ViewerServer, make_server
from cli_support import batch
from redis_support import RedisServer


async def _on_a_loop(store: agentrewind.Store, coro: Any) -> Any:
    """Await `coro`, then close the store's async side on this loop (its pool or client)."""
    try:
        return await coro
    finally:
        close = getattr(store, "aclose_async", None)
        if close is not None:
            await close()


# -- item 2: a timeline writer paused past its lease ------------------------------------------
def test_a_timeline_writer_paused_past_its_lease_cannot_overwrite_the_new_owner(
    store_url: str,
) -> None:
    store = agentrewind.connect(store_url)
    try:
        a = Timeline("agent", store=store, lease_ttl=0.3)
        a.checkpoint({"by": "a", "n": 1})
        time.sleep(0.45)  # A is paused (SIGSTOP, GC) past its lease
        with Timeline("agent", store=store) as b:  # B takes over, checkpoints and closes
            b_cp = b.checkpoint({"by": "b", "n": 2})
        with pytest.raises(LeaseLostError, match="lost its lease"):
            a.checkpoint({"by": "a", "n": 2})  # computed from A's state before the pause
        fresh = Timeline("agent", store=store)
        assert fresh.head is not None and fresh.head.id == b_cp.id  # nothing moved
        assert [c.state["by"] for c in fresh.history()] == ["b", "a"]  # nothing written
        # A was told and its view reloaded: its next write goes on from B's head
        after = a.checkpoint({"by": "a", "n": 3})
        assert after.parent_id == b_cp.id
        a.close()
    finally:
        store.close()


def test_a_timeline_writer_idle_past_its_lease_goes_on_when_nobody_wrote(store_url: str) -> None:
    store = agentrewind.connect(store_url)
    try:
        with Timeline("agent", store=store, lease_ttl=0.3) as a:
            first = a.checkpoint({"n": 1})
            a.branch("side")
            a.checkpoint({"n": 2})
            a.switch_branch("main")
            time.sleep(0.45)
            second = a.checkpoint({"n": 3})
            assert second.parent_id == first.id
    finally:
        store.close()


def test_a_lapsed_timeline_writer_is_refused_while_the_new_owner_holds_it(store_url: str) -> None:
    store = agentrewind.connect(store_url)
    try:
        a = Timeline("agent", store=store, lease_ttl=0.3)
        a.checkpoint({"by": "a"})
        time.sleep(0.45)
        b = Timeline("agent", store=store)
        b.checkpoint({"by": "b"})
        with pytest.raises(LeaseLostError):
            a.checkpoint({"by": "a"})
        b.close()
        assert [c.state["by"] for c in Timeline("agent", store=store).history()] == ["b", "a"]
    finally:
        store.close()


# -- item 8: checkpoints whose parents form a cycle -------------------------------------------
def _timeline_doc(store: agentrewind.Store, name: str) -> dict[str, Any]:
    with Timeline(name, store=store) as tl:
        for n in range(3):
            tl.checkpoint({"n": n})
    return agentrewind.export_run(store, name).to_dict()


def _cyclic(doc: dict[str, Any]) -> dict[str, Any]:
    """The document with its first checkpoint's parent set to its last one."""
    doc = copy.deepcopy(doc)
    cps = [s for s in doc["steps"] if s["kind"] == "checkpoint"]
    cps[0]["parent_id"] = cps[-1]["step_id"]
    return doc


def test_import_refuses_a_document_whose_parents_form_a_cycle(store_url: str) -> None:
    store = agentrewind.connect(store_url)
    try:
        doc = _cyclic(_timeline_doc(store, "good"))
        for source in (doc, json.dumps(doc), agentrewind.RunDocument(**{
            k: v for k, v in doc.items() if k not in ("format", "version")
        })):  # fmt: skip
            with pytest.raises(agentrewind.DocumentError, match="cycle"):
                agentrewind.import_run(store, source, run_id="crafted")
            assert store.get_run("crafted") is None and store.load_steps("crafted") == []
        assert any("cycle" in i.message for i in agentrewind.validate(doc))
    finally:
        store.close()


def test_readers_stop_on_a_cycle_already_in_the_store(store_url: str) -> None:
    store = agentrewind.connect(store_url)
    try:
        _timeline_doc(store, "tl")
        cps = [r for r in store.load_steps("tl") if r.kind == "checkpoint"]
        # a crafted or damaged store: written under the lease-free tools' path (owner=None)
        store.put_steps([dataclasses.replace(cps[0], parent_id=cps[-1].step_id)])
        with pytest.raises(agentrewind.CheckpointCycleError, match="form a cycle"):
            Timeline("tl", store=store)
        with pytest.raises(agentrewind.CheckpointCycleError):
            asyncio.run(_on_a_loop(store, Timeline.aopen("tl", store=store)))
        if not store_url.startswith("memory"):
            url = store_url
            for argv in (["branches", "tl"], ["tree", "tl"], ["log", "tl"]):
                (result,) = batch([*argv, "--store", url])
                if argv[0] == "log":  # the journal view lists steps: no walk, no cycle
                    assert result.code == 0, result.err
                    continue
                assert result.code != 0 and "Traceback" not in result.err, result.err
                assert "CheckpointCycleError" in result.err or "cycle" in result.err
        server = make_server(store, "127.0.0.1", 0)
        thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        try:
            status, body = _get(server, "/api/runs/tl/graph")
            assert status == 400 and "cycle" in body["error"]
        finally:
            server.shutdown()
            server.server_close()
    finally:
        store.close()


# -- smaller items: the viewer's numbers and idle connections, huge seq ------------------------
def _get(server: ViewerServer, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(server.url.rstrip("/") + path, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def test_the_viewer_answers_bad_numbers_with_400_and_drops_idle_connections(
    tmp_path: Path,
) -> None:
    store = agentrewind.connect(f"sqlite:///{tmp_path / 'ui.db'}")
    store.begin_run("r")
    server = make_server(store, "127.0.0.1", 0, idle_timeout=0.5)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        for bad in ("99999999999999999999", "-1", "0", "abc", "1e3", "%C2%B2", "%20"):
            for path in ("/api/runs", "/api/metrics", "/api/runs/r/metrics"):
                status, body = _get(server, f"{path}?limit={bad}")
                assert status == 400 and "limit must be" in body["error"], (path, bad, body)
        assert _get(server, "/api/runs?limit=2")[0] == 200
        host, port = server.server_address[:2]
        with socket.create_connection((str(host), port), timeout=10) as idle:
            assert idle.recv(1) == b""  # the viewer closed it (before: held open forever)
    finally:
        server.shutdown()
        server.server_close()
        store.close()


def test_import_of_a_seq_no_store_can_hold_is_one_named_error(store_url: str) -> None:
    store = agentrewind.connect(store_url)
    try:
        doc = _timeline_doc(store, "src")
        doc["steps"][-1]["seq"] = 2**70
        with pytest.raises(agentrewind.DocumentError, match=r"seq: must be <= 9223372036854775807"):
            agentrewind.import_run(store, doc, run_id="huge")
        assert store.get_run("huge") is None and store.load_steps("huge") == []
    finally:
        store.close()


# -- smaller items: Redis errors say what happened --------------------------------------------
@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test alone (it is frozen, flushed or filled up)."""
    server = RedisServer(tmp_path / "redis")
    try:
        yield server
    finally:
        if server.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(server.proc.pid, signal.SIGCONT)
        server.kill()


def test_redis_out_of_memory_is_a_named_error_without_the_scripts_sha(
    own_redis: RedisServer,
) -> None:
    import redis

    store = agentrewind.connect(own_redis.url, persistence_warning=False)
    try:
        store.begin_run("kept")
        admin = redis.Redis.from_url(own_redis.url)
        admin.config_set("maxmemory-policy", "noeviction")
        admin.config_set("maxmemory", 1)
        try:
            for call in (
                lambda: store.begin_run("r"),
                lambda: asyncio.run(_on_a_loop(store, store.abegin_run("r"))),
            ):
                with pytest.raises(agentrewind.StoreError, match="out of memory") as caught:
                    call()
                assert not re.search(r"[0-9a-f]{40}", str(caught.value)), caught.value
        finally:
            admin.config_set("maxmemory", 0)
            admin.close()
        assert store.get_run("r") is None and store.get_run("kept") is not None
    finally:
        store.close()


def test_data_lost_on_redis_names_the_run(own_redis: RedisServer) -> None:
    import redis

    store = agentrewind.connect(own_redis.url, persistence_warning=False)
    try:
        assert store.acquire_lease("r1", "me", 30).acquired
        redis.Redis.from_url(own_redis.url).flushall()  # a restart without persistence
        with pytest.raises(agentrewind.DataLostError, match="run 'r1'"):
            store.begin_run("r1", owner="me")
    finally:
        store.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_frozen_redis_fails_a_run_after_one_socket_timeout(
    own_redis: RedisServer, mode: str
) -> None:
    """The run's `with` block ends with `StoreUnavailableError` within 1 x socket_timeout (plus
    a second): its status and lease writes, which would wait again, are not attempted."""
    assert own_redis.proc is not None
    store = agentrewind.connect(f"{own_redis.url}?socket_timeout=1", persistence_warning=False)
    mw = agentrewind.Middleware(store)

    def sync() -> None:
        with mw.run("r") as run:
            run.step("a", lambda: 1)
            os.kill(own_redis.proc.pid, signal.SIGSTOP)  # type: ignore[union-attr]
            run.step("b", lambda: 2)

    async def one() -> int:
        return 1

    async def asy() -> None:
        async with mw.run("r") as run:
            await run.step("a", one)
            os.kill(own_redis.proc.pid, signal.SIGSTOP)  # type: ignore[union-attr]
            await run.step("b", one)

    try:
        started = time.monotonic()
        with pytest.raises(agentrewind.StoreUnavailableError, match="did not answer in time"):
            sync() if mode == "sync" else asyncio.run(asy())
        waited = time.monotonic() - started
        assert waited < 1.0 + 1.0, f"blocked {waited:.1f}s for a 1s socket_timeout (3x before)"
    finally:
        os.kill(own_redis.proc.pid, signal.SIGCONT)
        store.close()


# -- item 6: a closed store refuses by name; closing a timeline after its store is harmless -----
def test_a_timeline_after_its_store_closed(store_url: str) -> None:
    store = agentrewind.connect(store_url)
    tl = Timeline("agent", store=store)
    tl.checkpoint({"n": 1})
    store.close()
    with pytest.raises(agentrewind.StoreClosedError):
        tl.checkpoint({"n": 2})
    tl.close()  # its lease lapses: nothing to release in a closed store
    again = agentrewind.connect(store_url)
    try:
        if not store_url.startswith("memory"):
            assert [c.state["n"] for c in Timeline("agent", store=again).history()] == [1]
    finally:
        again.close()
