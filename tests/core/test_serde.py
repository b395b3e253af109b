from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import math
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrewind import Codec, SerializationError, Serializer, register_codec


class Color(enum.Enum):
    RED = "red"
    BLUE = 2


@dataclasses.dataclass
class Point:
    x: int
    y: float
    tags: tuple[str, ...] = ()


scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.text()
    | st.floats(allow_nan=False)
    | st.binary(max_size=50)
    | st.datetimes(timezones=st.none() | st.timezones())
    | st.dates()
    | st.uuids()
    | st.decimals(allow_nan=False, allow_infinity=False).map(decimal.Decimal)
    | st.sampled_from(Color)
    | st.builds(Point, st.integers(), st.floats(allow_nan=False), st.tuples(st.text()))
)
hashable = st.none() | st.booleans() | st.integers() | st.text() | st.uuids()
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(), inner, max_size=4)
        | st.dictionaries(hashable, inner, max_size=4)
        | st.frozensets(hashable, max_size=4)
        | st.sets(hashable, max_size=4)
    ),
    max_leaves=20,
)


# Correctness, not speed: a loaded CI machine must not fail this on generation time.
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values)
def test_round_trip_is_lossless(value: Any) -> None:
    s = Serializer()
    back = s.loads(s.dumps(value))
    assert back == value
    assert type(back) is type(value)


def test_dict_with_reserved_key_is_escaped() -> None:
    s = Serializer()
    value = {"__ar__": "pickle", "v": "AAAA"}
    assert s.loads(s.dumps(value)) == value


def test_floats_special_values() -> None:
    s = Serializer()
    back = s.loads(s.dumps([math.inf, -math.inf]))
    assert back == [math.inf, -math.inf]
    assert math.isnan(s.loads(s.dumps(math.nan)))


def test_time_and_timedelta() -> None:
    s = Serializer()
    value = [dt.time(1, 2, 3), dt.timedelta(days=2, seconds=5)]
    assert s.loads(s.dumps(value)) == value


def test_unserializable_names_the_path() -> None:
    s = Serializer()
    with pytest.raises(SerializationError) as info:
        s.dumps({"rows": [1, {"conn": object()}]})
    assert info.value.path == "$.rows[1].conn"
    assert "$.rows[1].conn" in str(info.value)
    assert "allow_pickle" in str(info.value)


def test_pickle_only_when_opted_in() -> None:
    class Custom:
        def __eq__(self, other: object) -> bool:
            return isinstance(other, Custom)

    globals()["Custom"] = Custom
    Custom.__qualname__ = "Custom"
    data = Serializer(allow_pickle=True).dumps(Custom())
    assert Serializer(allow_pickle=True).loads(data) == Custom()
    with pytest.raises(SerializationError, match="pickle is disabled"):
        Serializer().loads(data)


def test_types_not_loaded_are_refused_without_import() -> None:
    s = Serializer()
    tree = {"__ar__": "dataclass", "t": "some_module_never_imported:Thing", "v": {}}
    with pytest.raises(SerializationError, match="not in allowed_types"):
        s.from_tree(tree)
    import sys

    assert "some_module_never_imported" not in sys.modules


def test_resolved_type_must_be_the_right_kind() -> None:
    s = Serializer()
    with pytest.raises(SerializationError):
        s.from_tree({"__ar__": "dataclass", "t": "os:system", "v": {}})
    with pytest.raises(SerializationError):
        s.from_tree({"__ar__": "enum", "t": "builtins:int", "v": 1})


def test_allowed_types() -> None:
    s = Serializer(allowed_types=[Point])
    assert s.loads(s.dumps(Point(1, 2.0))) == Point(1, 2.0)


def test_unknown_tag() -> None:
    with pytest.raises(SerializationError, match="unknown type tag"):
        Serializer().from_tree({"__ar__": "mystery", "v": 1})


def test_invalid_json() -> None:
    with pytest.raises(SerializationError, match="not valid JSON"):
        Serializer().loads(b"{nope")


def test_registered_codec() -> None:
    class Money:
        def __init__(self, cents: int) -> None:
            self.cents = cents

    register_codec(
        Codec(
            "test-money",
            lambda v: isinstance(v, Money),
            lambda v: {"c": v.cents},
            lambda d: Money(d["c"]),
        )
    )
    s = Serializer()
    back = s.loads(s.dumps({"price": Money(250)}))
    assert isinstance(back["price"], Money) and back["price"].cents == 250


def test_pydantic_models_round_trip() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Item(pydantic.BaseModel):
        name: str
        when: dt.datetime

    globals()["Item"] = Item
    Item.__qualname__ = "Item"
    s = Serializer()
    item = Item(name="a", when=dt.datetime(2026, 1, 1))
    assert s.loads(s.dumps(item)) == item
    assert s.loads(s.dumps(uuid.UUID(int=5))) == uuid.UUID(int=5)


def test_a_pydantic_model_pydantic_cannot_dump_is_a_named_error() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Holder(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)
        fn: Any

    globals()["Holder"] = Holder
    Holder.__qualname__ = "Holder"
    with pytest.raises(SerializationError) as info:
        Serializer().dumps({"h": Holder(fn=len)})
    message = str(info.value)
    assert "Holder at $.h" in message and "register_codec" in message and "allow_pickle" in message
    assert info.value.path == "$.h"
    pickled = Serializer(allow_pickle=True)
    assert pickled.loads(pickled.dumps(Holder(fn=len))).fn is len
