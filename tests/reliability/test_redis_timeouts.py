"""Redis timeouts tell the truth and last as long as configured; a bad db path is refused.

On old main a timed-out command was retried three times (the wait was 3x+ the configured
timeout, and a write could be applied twice), the message said "the operation was not
applied" even when the write landed after the reply was lost, and `redis://host/notadb`
silently used database 0.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import redis

import agentrewind
from agentrewind.errors import StoreUnavailableError
from redis_support import RedisServer

# Timeouts and lease expiries measured to the second: alone, not beside an xdist worker.
pytestmark = pytest.mark.solo

# Keeps the server busy for `ARGV[1]` ms: every other client waits (a script is atomic).
_BUSY = """
local t = redis.call('TIME')
local start = t[1] * 1000000 + t[2]
while true do
  local n = redis.call('TIME')
  if n[1] * 1000000 + n[2] - start > tonumber(ARGV[1]) * 1000 then break end
end
return 1
"""


@pytest.fixture
def server(tmp_path: Path, redis_server_bin: str) -> RedisServer:
    srv = RedisServer(tmp_path / "redis")
    yield srv
    srv.kill()


def test_timeout_lasts_as_configured_and_says_the_write_may_have_landed(
    server: RedisServer,
) -> None:
    store = agentrewind.connect(server.url, socket_timeout=0.4)
    store.begin_run("warm")  # the pool holds a live connection
    busy_client = redis.Redis.from_url(server.url)
    busy = threading.Thread(target=lambda: busy_client.eval(_BUSY, 0, 1500))
    busy.start()
    time.sleep(0.2)  # the script is running now
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as info:
        store.begin_run("late")
    elapsed = time.monotonic() - started
    busy.join()
    assert "may have been applied" in str(info.value)
    assert "was not applied" not in str(info.value)
    assert 0.35 < elapsed < 0.4 * 1.8, elapsed  # one attempt, not 3x
    # The command was queued behind the script and ran once it ended: it did land.
    assert store.get_run("late") is not None
    busy_client.close()
    store.close()


def test_a_database_path_that_is_not_a_number_is_refused(server: RedisServer) -> None:
    with pytest.raises((ValueError, agentrewind.AgentRewindError), match="database number"):
        agentrewind.connect(f"redis://127.0.0.1:{server.port}/notadb")
    with agentrewind.connect(f"redis://127.0.0.1:{server.port}/3") as store:
        store.begin_run("r")
    assert redis.Redis(port=server.port, db=3).dbsize() > 0
