"""`agentrewind ui`: a local, read-only, offline web viewer over any store.

Pages (each with its own URL, so a link can be shared and the back button works): the runs
list, a run's calls as a waterfall (executed, replayed, failed, diverged; live while running),
one step's input and output, a timeline's branch graph and the diff of two checkpoints,
LangGraph threads (checkpoints, channel values, pending writes) and metrics.

Why the standard library: the server is `http.server.ThreadingHTTPServer` and the page a small
vanilla-JavaScript app in `static/` (no framework, no CDN, no build step), so the viewer needs no
`ui` extra and the core keeps its promise of no required dependencies; a viewer for one user
on loopback needs neither an ASGI stack nor a bundler. The files ship inside the wheel.
"""

from __future__ import annotations

from .server import ViewerServer, cmd_ui, make_server

__all__ = ["ViewerServer", "cmd_ui", "make_server"]
