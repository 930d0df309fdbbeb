"""kvcalc.ground.record.record against the standard library's dataclass it stands in for."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from dataclasses import dataclass, field

import pytest

from kvcalc.ground.record import record


def _fields(cls):
    cls.__annotations__ = {"a": "int", "b": "str", "c": "tuple", "d": "dict"}
    cls.b = "x"
    cls.c = field(default_factory=tuple)
    cls.d = field(default_factory=dict, compare=False, hash=False, repr=False)
    return cls


# The same class made by @dataclass and by @record, frozen and not (module level: pickled).
StdFrozen = dataclass(frozen=True)(_fields(type("StdFrozen", (), {"__doc__": "a record"})))
OurFrozen = record(_fields(type("OurFrozen", (), {"__doc__": "a record"})))
StdMutable = dataclass(_fields(type("StdMutable", (), {"__doc__": "a record"})))
OurMutable = record(frozen=False)(_fields(type("OurMutable", (), {"__doc__": "a record"})))
PAIRS = {True: (StdFrozen, OurFrozen), False: (StdMutable, OurMutable)}


CALLS = [((1,), {}), ((1, "y"), {}), ((), {"a": 2, "c": (3,)}), ((1,), {"d": {"k": 1}}),
         ((1, "y", (2,), {}), {})]
BAD_CALLS = [((), {}), ((1, "y", (), {}, 5), {}), ((1,), {"a": 2}), ((1,), {"zz": 3})]


@pytest.mark.parametrize("frozen", [True, False])
def test_record_behaves_as_the_dataclass(frozen):
    std, ours = PAIRS[frozen]
    assert [f.name for f in dataclasses.fields(ours)] == [f.name for f in dataclasses.fields(std)]
    assert dataclasses.is_dataclass(ours)
    for args, kwargs in CALLS:
        s, o = std(*args, **kwargs), ours(*args, **kwargs)
        assert repr(o) == repr(s).replace(std.__name__, ours.__name__)
        assert dataclasses.asdict(o) == dataclasses.asdict(s)
        assert o == ours(*args, **kwargs) and o != ours(99)
        assert (o == s) is False  # another class: NotImplemented both ways, as dataclass
        assert pickle.loads(pickle.dumps(o)) == o and copy.deepcopy(o) == o
        assert dataclasses.replace(o, a=7) == ours(**{**dataclasses.asdict(o), "a": 7})
        if frozen:
            assert hash(o) == hash(s)  # both hash the tuple of hashed fields
            for attempt in (lambda: setattr(o, "a", 5), lambda: delattr(o, "a")):
                with pytest.raises(dataclasses.FrozenInstanceError):
                    attempt()
                with pytest.raises(dataclasses.FrozenInstanceError):
                    (lambda: setattr(s, "a", 5))()
        else:
            assert ours.__hash__ is None and std.__hash__ is None
            o.a = 5
            assert o.a == 5
    # compare=False fields do not count, as in dataclass
    assert ours(1, d={"x": 1}) == ours(1, d={"y": 2})
    assert std(1, d={"x": 1}) == std(1, d={"y": 2})
    for args, kwargs in BAD_CALLS:
        with pytest.raises(TypeError):
            std(*args, **kwargs)
        with pytest.raises(TypeError):
            ours(*args, **kwargs)


def test_default_factory_is_called_per_instance_and_post_init_runs():
    seen = []

    @record
    class R:
        items: list = field(default_factory=list)

        def __post_init__(self):
            seen.append(self)

    a, b = R(), R()
    assert a.items is not b.items and seen == [a, b]


def test_one_field_records_compare_and_hash_as_the_dataclass():
    @record
    class One:
        x: int

    @dataclass(frozen=True)
    class StdOne:
        x: int

    assert One(1) == One(1) and One(1) != One(2)
    assert hash(One(3)) == hash(StdOne(3))
