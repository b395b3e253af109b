"""What a call was given: its inputs, recorded beside its output.

Inputs go through the serializer, the redaction hook (field `inputs`) and the encryption of
outputs, sealed to their own place (`step_place(..., key, "inputs")`), and are kept in the
record's meta: `meta["inputs"]`, or `meta["prompt"]` for a chat call (`Chat`). Records
without either (written before inputs were recorded, or with `record_inputs=False`) read as
they always did.

A chat prompt repeats the run's history on every call, so a chat call stores each message
once per run: its prompt as a delta against the last prompt the run wrote that began with the
same message (`base` key, `keep` messages), then each further message inline (`{"m": tree}`)
or as a reference to where the run already stored it: `{"in": [key, i]}` (message `i` of an
earlier prompt) or `{"out": [key, path]}` (a part of an earlier call's output, e.g. the
answer the agent appended to its history). A 200-turn chat then stores O(turns) messages, and
a call serializes only its new messages. A resumed execution starts with no memory: its first
chat call stores its prompt whole.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import SerializationError
from ..records import INPUT_FIELDS, StepRecord, base_key
from ..serde.encryption import Place, step_place

if TYPE_CHECKING:
    from ..serde import Serializer

__all__ = [
    "INPUT_FIELDS",
    "KEY",
    "NO_INPUTS",
    "Chat",
    "InputMemory",
    "Prepared",
    "inputs_of",
    "resolve_inputs",
    "seal_inputs",
]

KEY: Any = object()
"""`Run.begin(inputs=KEY)` (the default): the call's key input is what it was given."""

_DIGEST = 16
_MEMORY_LIMIT = 100_000  # message digests remembered per run (then forgotten, stored again)
_PROMPTS_KEPT = 32


@dataclasses.dataclass(frozen=True, slots=True)
class Chat:
    """The inputs of a chat call (`Run.begin(inputs=Chat(...))`): each message stored once.

    Attributes:
        messages: The prompt's messages, as the model gets them.
        digests: 16 bytes per message that identify its content (an adapter's cached
            message digests): equal digests are stored once per run.
        rest: The rest of the request (model settings, call parameters, tools), stored whole.
    """

    messages: Sequence[Any]
    digests: bytes
    rest: Any = None


def _common(a: bytes, b: bytes) -> int:
    """How many leading 16-byte digests `a` and `b` share (slices compared in C)."""
    n = min(len(a), len(b)) // _DIGEST
    if a[: n * _DIGEST] == b[: n * _DIGEST]:
        return n
    if n > 1 and a[: (n - 1) * _DIGEST] == b[: (n - 1) * _DIGEST]:
        return n - 1  # the usual chat: the history, then a new message
    lo, hi = 0, n  # a[:lo] matches, a[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[: mid * _DIGEST] == b[: mid * _DIGEST]:
            lo = mid
        else:
            hi = mid
    return lo


class InputMemory:
    """One execution's memory of where its messages are stored (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._prompts: dict[bytes, tuple[bytes, str]] = {}  # first digest -> (digests, key)
        self._where: dict[bytes, list[Any]] = {}  # digest -> {"in"/"out": ...} reference

    def delta(self, chat: Chat, key: str, serializer: Serializer) -> tuple[dict[str, Any], Any]:
        """The delta tree of `chat` (not yet sealed), and what `commit` learns once written."""
        digests, messages = chat.digests, chat.messages
        with self._lock:
            base = self._prompts.get(digests[:_DIGEST]) if digests else None
            where = self._where
            keep = 0
            if base is not None and base[1] != key:
                keep = _common(base[0], digests)
            add: list[Any] = []
            for i in range(keep, len(messages)):
                ref = where.get(digests[i * _DIGEST : (i + 1) * _DIGEST])
                if ref is not None and ref[1][0] != key:
                    add.append({ref[0]: ref[1]})
                else:
                    add.append({"m": serializer.prepare(messages[i], "inputs")})
        rest = None if chat.rest is None else serializer.prepare(chat.rest, "inputs")
        tree = {"base": base[1] if base and keep else None, "keep": keep, "add": add, "rest": rest}
        return tree, (digests, key, keep)

    def commit(self, learned: Any) -> None:
        """Remember a written prompt: its messages can be referenced from now on."""
        digests, key, keep = learned
        with self._lock:
            if len(self._prompts) >= _PROMPTS_KEPT and digests[:_DIGEST] not in self._prompts:
                self._prompts.pop(next(iter(self._prompts)))
            if digests:
                self._prompts[digests[:_DIGEST]] = (digests, key)
            self._forget_if_full()
            for i in range(keep, len(digests) // _DIGEST):
                self._where.setdefault(digests[i * _DIGEST : (i + 1) * _DIGEST], ["in", [key, i]])

    def produced(self, key: str, parts: Iterable[tuple[bytes, list[Any]]]) -> None:
        """Remember parts of a written output (`(digest, path)`) a later prompt may repeat."""
        with self._lock:
            self._forget_if_full()
            for digest, path in parts:
                self._where[digest] = ["out", [key, list(path)]]

    def _forget_if_full(self) -> None:
        if len(self._where) >= _MEMORY_LIMIT:
            self._where.clear()


# -- reading ----------------------------------------------------------------------------------
class _Resolver:
    """Rebuilds the inputs of a run's records (deltas followed), each record opened once."""

    def __init__(self, records: Sequence[StepRecord], serializer: Serializer | None, ns: str):
        self.serializer, self.ns = serializer, ns
        self.by_key: dict[str, StepRecord] = {}
        for r in records:  # a key's latest attempt wins; attempts share their inputs
            base = base_key(r.key)
            if base not in self.by_key or base == r.key:
                self.by_key[base] = r
        self.prompts: dict[str, list[Any] | None] = {}
        self.outputs: dict[str, Any] = {}

    def _open(self, tree: Any, record: StepRecord, field: str) -> Any:
        if self.serializer is None:
            return tree
        place = step_place(self.ns, record.run_id, base_key(record.key), field)
        return self.serializer.unseal(tree, place)

    def inputs(self, record: StepRecord) -> Any:
        meta = record.meta
        if "inputs" in meta:
            return self._open(meta["inputs"], record, "inputs")
        if "prompt" not in meta:
            return None
        delta = self._open(meta["prompt"], record, "inputs")
        messages = self.messages(base_key(record.key), set())
        out: dict[str, Any] = {"messages": messages}
        if isinstance(delta, dict) and isinstance(delta.get("rest"), dict):
            out.update(delta["rest"])
        elif isinstance(delta, dict) and delta.get("rest") is not None:
            out["rest"] = delta["rest"]
        return out

    def messages(self, key: str, seen: set[str]) -> list[Any] | None:
        """The full prompt stored under `key` (None when it cannot be rebuilt)."""
        if key in self.prompts:
            return self.prompts[key]
        record = self.by_key.get(key)
        if record is None or key in seen or "prompt" not in record.meta:
            return None
        seen.add(key)
        delta = self._open(record.meta["prompt"], record, "inputs")
        if not isinstance(delta, dict):  # still sealed (no key) or malformed
            return None
        head: list[Any] = []
        keep = delta.get("keep") or 0
        if delta.get("base") is not None and keep:
            head = (self.messages(delta["base"], seen) or [])[:keep]
            head += [None] * (keep - len(head))  # what cannot be rebuilt shows as null
        result = head + [self._item(item, seen) for item in delta.get("add") or []]
        self.prompts[key] = result
        return result

    def _item(self, item: Any, seen: set[str]) -> Any:
        if not isinstance(item, dict):
            return None
        if "m" in item:
            return item["m"]
        if "in" in item:
            key, i = item["in"]
            prompt = self.messages(key, seen)
            return prompt[i] if prompt is not None and 0 <= i < len(prompt) else None
        if "out" in item:
            key, path = item["out"]
            node = self.output(key)
            for part in path:
                try:
                    node = node[part]
                except (KeyError, IndexError, TypeError):
                    return None
            return node
        return None

    def output(self, key: str) -> Any:
        if key not in self.outputs:
            record = self.by_key.get(key)
            out = None if record is None else self._open(record.output, record, "output")
            self.outputs[key] = out
        return self.outputs[key]


def resolve_inputs(
    records: Sequence[StepRecord],
    serializer: Serializer | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    """The inputs of each record of one run, by step id (trees; None where none were kept).

    With `serializer` (the store's key) sealed inputs are opened; without, an encrypted
    value is returned sealed. Chat prompts are rebuilt from their deltas.

    Raises:
        DecryptionError: A sealed value does not open with the serializer's key.
    """
    resolver = _Resolver(records, serializer, namespace)
    return {r.step_id: resolver.inputs(r) for r in records}


def inputs_of(
    record: StepRecord,
    records: Sequence[StepRecord],
    serializer: Serializer | None = None,
    namespace: str = "default",
) -> Any:
    """The inputs of `record`, one of `records` (its run), as `resolve_inputs` gives them."""
    return _Resolver(records, serializer, namespace).inputs(record)


# -- writing ----------------------------------------------------------------------------------
NO_INPUTS: Any = object()
"""A call's inputs when none are recorded (`record_inputs=False`)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Prepared:
    """Inputs already turned into a tree (the key input's, when nothing redacts)."""

    tree: Any


def seal_inputs(
    inputs: Any, key: str, memory: InputMemory, serializer: Serializer, place: Place | None
) -> tuple[dict[str, Any], Any]:
    """The meta entries holding `inputs` sealed at `place`, and what to `commit` once written.

    Inputs that cannot be serialized, or that the redaction hook refuses (raises on: a hook
    written for outputs only), are not a reason to fail the call, and are never stored
    unredacted: the record says why they are missing (`inputs_error`) instead.
    """
    try:
        if isinstance(inputs, Chat):
            tree, learned = memory.delta(inputs, key, serializer)
            return {"prompt": serializer.seal(tree, place)}, learned
        tree = inputs.tree if isinstance(inputs, Prepared) else serializer.prepare(inputs, "inputs")
        return {"inputs": serializer.seal(tree, place)}, None
    except Exception as exc:
        what = "" if isinstance(exc, SerializationError) else f"{type(exc).__name__}: "
        return {"inputs_error": f"{what}{exc}"[:500]}, None
