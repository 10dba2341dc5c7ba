"""The machine's state classes are built from what the instruction families declare: each declared field is a
slot with its initial value, nothing else can be attached, and a field two families claim is refused."""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from bwtriton.emu.isa import MACHINE
from bwtriton.emu.isa import clc, memops, sync, tma
from bwtriton.emu.machine.launch import CTA, Cluster
from bwtriton.emu.machine.state import FamilyState, machine_classes
from bwtriton.emu.machine.warp import Warp


@dataclass
class _Queue:
    pending: list = field(default_factory=list)
    depth: int = 3


@dataclass
class _Flag:
    flag: bool = False


def test_the_families_fields_are_slots_of_the_machine_classes():
    assert MACHINE.owner[("warp", "observed")] == "sync"
    assert MACHINE.owner[("warp", "cp_groups")] == "memops"
    assert MACHINE.owner[("warp", "bulk_open")] == "tma"
    assert MACHINE.owner[("cta", "clc_saw_failure")] == "clc"
    assert MACHINE.owner[("cluster", "bar_gen")] == "sync"
    assert {"observed", "cp_open", "bulk_groups"} <= set(MACHINE.Warp.__slots__)
    assert issubclass(MACHINE.Warp, Warp) and issubclass(MACHINE.CTA, CTA) and issubclass(MACHINE.Cluster, Cluster)
    assert MACHINE.CTA.warp_class is MACHINE.Warp
    # the machine's own classes carry none of them: the families own their state
    assert not {"observed", "cp_open", "bulk_open"} & set(Warp.__slots__)
    assert not {"mbarriers", "barriers", "clc_saw_failure"} & set(CTA.__slots__)
    assert all(f.STATE.family == f.__name__.rpartition(".")[2] for f in (sync, memops, tma, clc))


def test_declared_fields_start_from_their_initial_values_and_nothing_else_attaches():
    classes = machine_classes([FamilyState("queue", cluster=_Queue)])
    a = classes.Cluster(launch=None, cluster_id=(0, 0, 0), nctas=2)
    b = classes.Cluster(launch=None, cluster_id=(1, 0, 0), nctas=2)
    assert a.pending == [] and a.depth == 3 and a.nctas == 2
    a.pending.append(1)
    assert b.pending == []  # a fresh list per cluster, not one shared default
    with pytest.raises(AttributeError):
        a.undeclared = 1


def test_a_field_claimed_twice_is_refused_naming_both_families():
    with pytest.raises(RuntimeError, match="flag is declared by second and by first"):
        machine_classes([FamilyState("first", warp=_Flag), FamilyState("second", warp=_Flag)])
    with pytest.raises(RuntimeError, match="nctas is declared by clash and by the machine"):
        machine_classes([FamilyState("clash", cluster=dataclass(type("C", (), {"__annotations__": {"nctas": int},
                                                                                  "nctas": 0})))])
