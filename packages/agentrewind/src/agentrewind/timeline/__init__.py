"""The timeline: git-like checkpoints of an agent's state (branch, rollback, merge, diff).

`Timeline` is the object; its writes are flows (`ops`, `merge`, `safe`) driven synchronously or
asynchronously; `view` answers reads from memory; `events` publishes changes; `decorators`
holds `@checkpointed`, `checkpoint_context` and `get_timeline`.
"""

from .checkpoint import HEAD, Branch, Checkpoint, TimelineError
from .decorators import CheckpointContext, checkpoint_context, checkpointed, get_timeline
from .events import Subscription, TimelineEvent
from .merge import MergeStrategy
from .recovery import (
    AlternativePathStrategy,
    CompositeStrategy,
    DegradeGracefully,
    RecoveryStrategy,
    Retry,
    RetryWithBackoff,
)
from .safe import RecoveryError
from .timeline import Timeline

__all__ = [
    "HEAD",
    "AlternativePathStrategy",
    "Branch",
    "Checkpoint",
    "CheckpointContext",
    "CompositeStrategy",
    "DegradeGracefully",
    "MergeStrategy",
    "RecoveryError",
    "RecoveryStrategy",
    "Retry",
    "RetryWithBackoff",
    "Subscription",
    "Timeline",
    "TimelineError",
    "TimelineEvent",
    "checkpoint_context",
    "checkpointed",
    "get_timeline",
]
