"""`TimelineBase`: a timeline's in-memory view plus the store it writes to.

The write flows (`ops`, `merge`, `safe`) operate on this class, and `Timeline` adds the public
methods that drive them, so the flows never import the class that calls them.
"""

from __future__ import annotations

import weakref

from ..serde import Serializer
from ..stores import Store, connect
from ..stores.leases import make_lease_owner, retire_lease_owner
from .flow import FlowRunner
from .view import TimelineView

__all__ = ["TimelineBase"]


class TimelineBase(TimelineView):
    """The state every timeline write needs: the view, the store, and how writes are run.

    Args:
        name: The timeline (its run id in the store).
        store: A `Store`, a store URL, or None for the default store.
        serializer: How states are encoded (default: JSON with type tags, no pickle).
        events: Publish changes for `subscribe`.
        lease_ttl: Seconds the timeline's lease lasts (see `Timeline`).
    """

    def __init__(
        self,
        name: str,
        store: Store | str | None = None,
        *,
        serializer: Serializer | None = None,
        events: bool = True,
        lease_ttl: float = 30.0,
    ) -> None:
        super().__init__(name, serializer or Serializer())
        self.lease_ttl = lease_ttl
        self._owner = make_lease_owner()
        self._lease_at = float("-inf")  # monotonic time the lease was last taken or renewed
        weakref.finalize(self, retire_lease_owner, self._owner)
        self._owns_store = not isinstance(store, Store)
        self.store: Store = store if isinstance(store, Store) else connect(store)
        self.namespace = self.store.namespace
        self._events = events
        self._runner = FlowRunner(self.store, self._lock)
