"""The machine's classes with the instruction families' state in them (pydgin style: the machine lays out state
that the ISA declares, and imports no family).

A family that keeps state in a warp, a CTA or a cluster declares it as a dataclass per level (field names,
types, initial values) in a `FamilyState`; the ISA table hands every declaration to `machine_classes`, which
builds Warp, CTA and Cluster as subclasses of the machine's own classes with the declared fields as slots, so
nothing else can be attached and a field two families claim is an error when the table loads.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from .launch import CTA, Cluster
from .warp import Warp


@dataclass(frozen=True)
class FamilyState:
    """The state one instruction family keeps: a dataclass per level whose fields (with their defaults) become
    slots of every warp / CTA / cluster; None where the family keeps nothing at that level."""

    family: str
    warp: Optional[type] = None
    cta: Optional[type] = None
    cluster: Optional[type] = None


@dataclass(frozen=True)
class MachineClasses:
    """The machine's state classes for one set of families; `owner` names the family of each declared field."""

    Warp: type
    CTA: type
    Cluster: type
    owner: dict


def _initial(f: dataclasses.Field) -> Callable[[], object]:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory
    if f.default is dataclasses.MISSING:
        raise TypeError(f"state field {f.name} needs an initial value (a default or a default_factory)")
    value = f.default
    return lambda: value


def _with_state(base: type, level: str, states: Sequence[FamilyState], owner: dict, **attrs) -> type:
    """`base` with the fields the families declare for `level` as slots, set to their initial values."""
    inits: list[tuple[str, Callable[[], object]]] = []
    taken = {name for klass in base.__mro__ for name in getattr(klass, "__slots__", ())}
    for st in states:
        decl = getattr(st, level)
        if decl is None:
            continue
        for f in dataclasses.fields(decl):
            key = (level, f.name)
            if f.name in taken or key in owner:
                other = owner.get(key, "the machine")
                raise RuntimeError(f"{level} field {f.name} is declared by {st.family} and by {other}")
            owner[key] = st.family
            inits.append((f.name, _initial(f)))
    base_init = base.__init__

    def __init__(self, *args, **kwargs) -> None:
        base_init(self, *args, **kwargs)
        for name, make in inits:
            setattr(self, name, make())

    return type(base.__name__, (base,), {"__slots__": tuple(n for n, _ in inits), "__init__": __init__,
                                         "__module__": base.__module__, "__qualname__": base.__qualname__,
                                         "__doc__": base.__doc__, **attrs})


def machine_classes(states: Sequence[FamilyState]) -> MachineClasses:
    """Warp, CTA and Cluster carrying the state `states` declare (a CTA builds warps of the returned Warp)."""
    owner: dict = {}
    warp = _with_state(Warp, "warp", states, owner)
    cta = _with_state(CTA, "cta", states, owner, warp_class=warp)
    cluster = _with_state(Cluster, "cluster", states, owner)
    return MachineClasses(warp, cta, cluster, owner)
