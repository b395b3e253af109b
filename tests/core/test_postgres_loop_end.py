"""An event loop that ends while one of our async pools connects in the background closes.

psycopg_pool swallows the cancellation `asyncio.run` sends its maintenance worker at the end
(the connect in flight is logged as "error connecting" and retried), and the loop then waits
for that worker for ever: the hang seen at the end of async PostgreSQL tests under load. The
server here accepts the connection and never answers, so the connect is in flight when the
loop ends.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("psycopg_pool", reason='needs the "postgres" extra')

SCRIPT = textwrap.dedent(
    """
    import asyncio, socket, time
    from agentrewind.stores.postgres._apool import OwnAsyncPool

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts, never answers: a connect stays in flight
    url = f"postgresql://u@127.0.0.1:{silent.getsockname()[1]}/db"

    async def main():
        pool = OwnAsyncPool(url, min_size=1, open=False, kwargs={"connect_timeout": 60})
        await pool.open(wait=False)
        await asyncio.sleep(0.5)  # its worker is connecting when the loop ends

    t0 = time.monotonic()
    asyncio.run(main())
    print(f"ended after {time.monotonic() - t0:.1f}s")
    """
)


def test_a_loop_that_ends_while_the_pool_connects_closes() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    seconds = float(done.stdout.split()[2].rstrip("s"))
    assert seconds < 5, done.stdout  # not the connect's 60 s, not for ever
