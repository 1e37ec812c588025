"""backend/record.py: a record behaves as the dataclass it stands in for (constructor, defaults,
comparison, hash, repr, freezing, replace), checked side by side with @dataclass."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from dataclasses import FrozenInstanceError, field
from functools import cached_property
from typing import Any, ClassVar

import pytest

from backend import record
from backend.server.statefile import ServerRecord
from backend.server.status import ServerState, ServerStatus


@record.record
class Point:
    x: int
    y: int = 0
    tags: list[str] = field(default_factory=list)
    cache: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    KIND: ClassVar[str] = "point"


@dataclasses.dataclass
class DPoint:
    x: int
    y: int = 0
    tags: list[str] = field(default_factory=list)
    cache: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    KIND: ClassVar[str] = "point"


@record.record(frozen=True)
class Frozen:
    a: str
    b: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.a == "bad":
            raise ValueError("a may not be bad")

    @cached_property
    def upper(self) -> str:
        return self.a.upper()


def test_the_constructor_takes_what_a_dataclass_takes():
    for cls in (Point, DPoint):
        p = cls(1, tags=["t"])
        assert (p.x, p.y, p.tags, p.cache) == (1, 0, ["t"], {})
        assert cls(x=2, y=3).y == 3
        assert cls(1).tags is not cls(1).tags  # a fresh list each time
    assert [s.name for s in record.fields(Point)] == [f.name for f in dataclasses.fields(DPoint)]
    assert Point.KIND == "point" and "KIND" not in [s.name for s in record.fields(Point)]


@pytest.mark.parametrize("args, kwargs, words", [
    ((), {}, "missing required argument: 'x'"),
    ((1, 2, [], 4), {}, "takes 3 positional arguments but 4 were given"),
    ((1,), {"x": 2}, "multiple values for argument 'x'"),
    ((1,), {"z": 2}, "unexpected keyword argument 'z'"),
    ((1,), {"cache": {}}, "unexpected keyword argument 'cache'"),  # init=False
])
def test_a_wrong_call_is_a_type_error_as_a_dataclass_gives(args, kwargs, words):
    with pytest.raises(TypeError, match=words):
        Point(*args, **kwargs)
    with pytest.raises(TypeError):
        DPoint(*args, **kwargs)


def test_comparison_hash_and_repr_are_a_dataclass_s():
    assert Point(1, 2) == Point(1, 2) and Point(1, 2) != Point(1, 3)
    p = Point(1)
    p.cache["k"] = 1
    assert p == Point(1)  # compare=False
    assert Point(1) != DPoint(1) and Point(1) != (1, 0, [])
    assert repr(Point(1, 2, ["a"])) == "Point(x=1, y=2, tags=['a'])" == repr(DPoint(1, 2, ["a"])).replace("DPoint",
                                                                                                          "Point")
    assert Point.__hash__ is None  # mutable and compared: unhashable, as a dataclass
    assert hash(Frozen("a", (1,))) == hash(Frozen("a", (1,))) and len({Frozen("a"), Frozen("a"), Frozen("b")}) == 2


def test_a_frozen_record_refuses_assignment_and_runs_its_post_init():
    f = Frozen("x")
    with pytest.raises(FrozenInstanceError):
        f.a = "y"  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        del f.a  # type: ignore[misc]
    assert f.upper == "X"  # a cached_property still caches
    with pytest.raises(ValueError, match="may not be bad"):
        Frozen("bad")


def test_replace_copies_with_changes_as_dataclasses_replace():
    p = Point(1, 2, ["t"])
    q = record.replace(p, y=5)
    assert (q.x, q.y, q.tags) == (1, 5, ["t"]) and p.y == 2
    assert record.replace(Frozen("a"), b=(1,)) == Frozen("a", (1,))
    with pytest.raises(ValueError, match="not set in __init__"):
        record.replace(p, cache={})
    with pytest.raises(TypeError, match="not a record"):
        record.replace(DPoint(1), y=2)


def test_copies_and_pickles_keep_every_field():
    f = Frozen("a", (1, 2))
    assert copy.copy(f) == f and copy.deepcopy(f) == f and pickle.loads(pickle.dumps(f)) == f
    p = Point(1, 2, ["x"])
    assert copy.deepcopy(p) == p and copy.deepcopy(p).tags is not p.tags


def test_a_declaration_a_dataclass_refuses_is_refused():
    with pytest.raises(ValueError, match="mutable default"):
        @record.record
        class Bad:
            items: list[int] = []  # noqa: RUF012

    with pytest.raises(TypeError, match="non-default argument 'b' follows default argument"):
        @record.record
        class Order:
            a: int = 0
            b: int  # type: ignore[misc]


def test_the_house_records_keep_their_contracts():
    # the state file's record: every field None unless set, to_dict in declaration order
    r = ServerRecord(state="ready", port=8000)
    assert r.to_dict()["state"] == "ready" and r.to_dict()["pid"] is None
    assert list(r.to_dict())[:3] == ["state", "detail", "supervisor_pid"]
    # the status: a frozen mapping of the JSON contract's keys, with its own lists per instance
    s = ServerStatus(ServerState.READY, supervised=True, pid=3)
    assert s["state"] == "ready" and s.get("pid") == 3 and ServerStatus(ServerState.READY).workers == []
    assert ServerStatus(ServerState.READY).workers is not ServerStatus(ServerState.READY).workers
    assert s.with_extra(metrics={"a": 1})["metrics"] == {"a": 1}
    assert ServerStatus.from_dict(dict(s)).to_dict() == s.to_dict()
    with pytest.raises(FrozenInstanceError):
        s.pid = 4  # type: ignore[misc]
