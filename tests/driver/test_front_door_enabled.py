"""`bwtriton.is_enabled()` and `bwtriton.active_selection()`: the public way to ask whether `bwtriton.enable()`
routes `@triton.jit` launches through bwtriton's passes, and through which, nested enables included."""
from __future__ import annotations

import bwtriton


def test_is_enabled_follows_enable_disable_and_nesting():
    assert not bwtriton.is_enabled() and bwtriton.active_selection() is None
    with bwtriton.enable(target="sm_100a"):
        assert bwtriton.is_enabled()
        outer = bwtriton.active_selection().names
        assert "plan-tmem" in outer and "verify-tcgen05" in outer
        with bwtriton.enable("-verify-tcgen05", target="sm_100a"):
            inner = bwtriton.active_selection().names
            assert "verify-tcgen05" not in inner and "plan-tmem" in inner
        assert bwtriton.is_enabled() and bwtriton.active_selection().names == outer
    assert not bwtriton.is_enabled() and bwtriton.active_selection() is None


def test_enable_none_is_enabled_with_no_passes():
    bwtriton.enable("none", target="sm_100a")
    try:
        assert bwtriton.is_enabled() and bwtriton.active_selection().names == []
    finally:
        bwtriton.disable()
    assert not bwtriton.is_enabled()


def test_is_enabled_is_exported():
    assert {"is_enabled", "active_selection"} <= set(bwtriton.__all__)
