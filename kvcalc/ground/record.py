"""`record`: a dataclass whose methods are written once here, not compiled per class.

CPython 3.11's `@dataclass(frozen=True)` compiles six functions per class with `exec`
(__init__, __repr__, __eq__, __hash__, __setattr__, __delattr__). The ~30 records on
`kvcalc estimate`'s path spent 30-45 ms doing so: a third of a bare typer + rich start
(benchmarks/bench_startup.py). A `record` is still a real dataclass (`dataclasses.fields`,
`replace`, `asdict` and `is_dataclass` work on it, `field(...)` options are honoured),
but its methods are the shared functions below, reading a plan made once per class.
"""

from __future__ import annotations

from dataclasses import MISSING, FrozenInstanceError, dataclass, field, fields
from operator import attrgetter

try:
    from typing import dataclass_transform
except ImportError:  # Python 3.10: the decorator only tells type checkers what @record does

    def dataclass_transform(**_hints):
        return lambda decorator: decorator


def _init(self, *args, **kwargs) -> None:
    cls = self.__class__
    if args:
        names = cls._record_names
        if len(args) > len(names):
            raise TypeError(f"{cls.__qualname__}() takes {len(names)} positional arguments "
                            f"but {len(args)} were given")
        for name, value in zip(names, args):
            if name in kwargs:
                raise TypeError(f"{cls.__qualname__}() got multiple values for argument {name!r}")
            kwargs[name] = value
    values = cls._record_defaults.copy()
    values.update(kwargs)
    for name, factory in cls._record_factories:
        if name not in kwargs:
            values[name] = factory()
    if len(values) != len(cls._record_names) or not cls._record_name_set.issuperset(kwargs):
        unknown = [name for name in kwargs if name not in cls._record_name_set]
        if unknown:
            raise TypeError(f"{cls.__qualname__}() got an unexpected keyword argument "
                            f"{unknown[0]!r}")
        missing = [name for name in cls._record_names if name not in values]
        raise TypeError(f"{cls.__qualname__}() missing required argument: {missing[0]!r}")
    # Straight into the instance dict: one call, and past a frozen record's __setattr__.
    self.__dict__.update(values)
    if cls._record_post_init:
        self.__post_init__()


def _repr(self) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._record_repr)
    return f"{self.__class__.__qualname__}({shown})"


def _eq(self, other):
    if other.__class__ is not self.__class__:
        return NotImplemented
    key = self.__class__._record_compare  # from the class: a plain function, never bound
    return key(self) == key(other)


def _hash(self) -> int:
    return hash(self.__class__._record_hash(self))


def _key(names: tuple[str, ...]):
    """The tuple of these fields' values, as dataclass compares and hashes it."""
    if len(names) >= 2:
        return attrgetter(*names)  # C: a tuple of the values
    return lambda obj: tuple(getattr(obj, n) for n in names)


def _frozen_setattr(self, name, value):
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self, name):
    raise FrozenInstanceError(f"cannot delete field {name!r}")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def record(cls=None, /, *, frozen: bool = True):
    """`@record` (frozen, hashable) or `@record(frozen=False)` (mutable, unhashable)."""

    def wrap(cls):
        # dataclass with every generated method off only collects the fields.
        if cls.__doc__ is None:
            # Else dataclass writes one from inspect.signature(cls), and reading
            # object.__init__'s text signature compiles tokenize's regexes: 13 ms.
            cls.__doc__ = f"{cls.__qualname__}: a kvcalc record."
        cls = dataclass(cls, init=False, repr=False, eq=False)
        every = fields(cls)
        for f in every:
            if not f.init:
                raise TypeError(f"{cls.__qualname__}.{f.name}: record fields are all init fields")
        cls._record_names = tuple(f.name for f in every)
        cls._record_name_set = frozenset(cls._record_names)
        cls._record_defaults = {f.name: f.default for f in every if f.default is not MISSING}
        cls._record_factories = tuple((f.name, f.default_factory) for f in every
                                      if f.default_factory is not MISSING)
        cls._record_post_init = hasattr(cls, "__post_init__")
        cls._record_repr = tuple(f.name for f in every if f.repr)
        cls._record_compare = _key(tuple(f.name for f in every if f.compare))
        cls._record_hash = _key(tuple(f.name for f in every
                                      if (f.compare if f.hash is None else f.hash)))
        methods = {"__init__": _init, "__repr__": _repr, "__eq__": _eq,
                   "__hash__": _hash if frozen else None}
        if frozen:
            methods.update(__setattr__=_frozen_setattr, __delattr__=_frozen_delattr)
        for name, method in methods.items():
            if name not in cls.__dict__ or (name == "__hash__" and cls.__dict__[name] is None):
                setattr(cls, name, method)
        return cls

    return wrap if cls is None else wrap(cls)
