"""`@record`: what `@dataclass` gives, for the types the console's start loads, without generated code.

`@dataclass` compiles an `__init__`, `__repr__` and `__eq__` (a frozen one also `__setattr__`,
`__delattr__` and `__hash__`) for every class: ~1 ms a class on this Python, ~7 ms of the console's
first frame for the eight types loaded before it (benchmarks/bench_startup.py). A record gets the
same constructor, comparison, repr, hash and freezing from the shared functions below, and
type checkers read `@record` as `@dataclass` (PEP 681), so it is typed like one. Fields are declared
as a dataclass's are, with `dataclasses.field(default_factory=..., init=, repr=, compare=)` where a
default is mutable. `fields()` and `replace()` stand in for the dataclasses functions of those names.
msgspec's Struct is as quick to make, but its import costs more (~11 ms) than the classes do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, Field, FrozenInstanceError, field
from typing import Any, TypeVar, dataclass_transform, overload

T = TypeVar("T", bound=type)
R = TypeVar("R")


class Spec:
    """One field: its name, default (or factory), and whether `__init__`, `__repr__`, `__eq__` see it."""

    __slots__ = ("compare", "default", "factory", "init", "name", "repr")

    def __init__(self, name: str, default: Any = MISSING, factory: Any = MISSING, init: bool = True,
                 repr: bool = True, compare: bool = True) -> None:
        self.name, self.default, self.factory = name, default, factory
        self.init, self.repr, self.compare = init, repr, compare

    def initial(self, cls: type) -> Any:
        if self.default is not MISSING:
            return self.default
        if self.factory is not MISSING:
            return self.factory()
        raise TypeError(f"{cls.__qualname__}.__init__() missing required argument: {self.name!r}")


def _is_classvar(hint: Any) -> bool:
    text = hint if isinstance(hint, str) else repr(hint)  # annotations are strings here (PEP 563)
    return text.startswith(("ClassVar", "typing.ClassVar"))


def _specs(cls: type) -> tuple[Spec, ...]:
    specs: dict[str, Spec] = {}
    for base in reversed(cls.__mro__[1:]):
        specs.update((s.name, s) for s in getattr(base, "__record_fields__", ()))
    for name, hint in cls.__dict__.get("__annotations__", {}).items():
        if _is_classvar(hint):
            continue
        value = cls.__dict__.get(name, MISSING)
        if isinstance(value, Field):
            spec = Spec(name, value.default, value.default_factory, value.init, bool(value.repr), bool(value.compare))
            if value.default is MISSING:
                delattr(cls, name)  # no class attribute to fall back on, as a dataclass leaves none
            else:
                setattr(cls, name, value.default)
        else:
            spec = Spec(name, value)
        if isinstance(spec.default, (list, dict, set)):
            raise ValueError(f"{cls.__qualname__}.{name}: a mutable default; use field(default_factory=...)")
        specs[name] = spec
    after_default = False
    for spec in specs.values():
        if spec.init and spec.default is MISSING and spec.factory is MISSING and after_default:
            raise TypeError(f"{cls.__qualname__}: non-default argument {spec.name!r} follows default argument")
        after_default = after_default or (spec.init and (spec.default is not MISSING or spec.factory is not MISSING))
    return tuple(specs.values())


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    cls = type(self)
    specs: tuple[Spec, ...] = cls.__record_init__
    if len(args) > len(specs):
        raise TypeError(f"{cls.__qualname__}.__init__() takes {len(specs)} positional arguments "
                        f"but {len(args)} were given")
    put = object.__setattr__  # a frozen record too
    for i, spec in enumerate(specs):
        if i < len(args):
            if spec.name in kwargs:
                raise TypeError(f"{cls.__qualname__}.__init__() got multiple values for argument {spec.name!r}")
            put(self, spec.name, args[i])
        elif spec.name in kwargs:
            put(self, spec.name, kwargs.pop(spec.name))
        else:
            put(self, spec.name, spec.initial(cls))
    if kwargs:
        raise TypeError(f"{cls.__qualname__}.__init__() got an unexpected keyword argument {next(iter(kwargs))!r}")
    for spec in cls.__record_rest__:
        put(self, spec.name, spec.initial(cls))
    post = getattr(self, "__post_init__", None)
    if post is not None:
        post()


def _repr(self: Any) -> str:
    body = ", ".join(f"{s.name}={getattr(self, s.name)!r}" for s in self.__record_fields__ if s.repr)
    return f"{type(self).__qualname__}({body})"


def _key(self: Any) -> tuple[Any, ...]:
    return tuple(getattr(self, s.name) for s in self.__record_fields__ if s.compare)


def _eq(self: Any, other: object) -> bool:
    if other.__class__ is not self.__class__:
        return NotImplemented  # type: ignore[no-any-return]  # the other side may know
    return bool(_key(self) == _key(other))


def _hash(self: Any) -> int:
    return hash(_key(self))


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


def _make(cls: T, frozen: bool) -> T:
    specs = _specs(cls)
    cls.__record_fields__ = specs  # type: ignore[attr-defined]
    cls.__record_init__ = tuple(s for s in specs if s.init)  # type: ignore[attr-defined]
    cls.__record_rest__ = tuple(s for s in specs if not s.init)  # type: ignore[attr-defined]
    own = cls.__dict__
    if "__init__" not in own:
        cls.__init__ = _init  # type: ignore[misc]
    if "__repr__" not in own:
        cls.__repr__ = _repr  # type: ignore[assignment]
    if "__eq__" not in own:
        cls.__eq__ = _eq  # type: ignore[assignment]
        # as a dataclass: a frozen record hashes by its fields, a mutable one is unhashable
        cls.__hash__ = _hash if frozen else None  # type: ignore[assignment]
    if frozen:
        cls.__setattr__ = _frozen_setattr  # type: ignore[assignment]
        cls.__delattr__ = _frozen_delattr  # type: ignore[assignment]
    return cls


@overload
def record(cls: T, /) -> T: ...


@overload
def record(*, frozen: bool = False) -> Callable[[T], T]: ...


@dataclass_transform(field_specifiers=(field, Field))
def record(cls: T | None = None, /, *, frozen: bool = False) -> T | Callable[[T], T]:
    """The class as a record: `@record` or `@record(frozen=True)`, as `@dataclass` is written."""
    if cls is None:
        return lambda c: _make(c, frozen)
    return _make(cls, frozen)


def fields(obj: Any) -> tuple[Spec, ...]:
    """A record's (or record class's) fields, in declaration order."""
    try:
        return obj.__record_fields__  # type: ignore[no-any-return]
    except AttributeError:
        raise TypeError(f"{obj!r} is not a record") from None


def replace(obj: R, /, **changes: Any) -> R:
    """A copy of the record with `changes` (only fields its `__init__` takes), as dataclasses.replace."""
    for spec in fields(obj):
        if not spec.init:
            if spec.name in changes:
                raise ValueError(f"field {spec.name!r} is not set in __init__ and cannot be replaced")
        else:
            changes.setdefault(spec.name, getattr(obj, spec.name))
    return type(obj)(**changes)
