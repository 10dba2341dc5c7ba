"""bwtriton.language.clc host helpers and the emitted round trip (compile-only, no emulator)."""
from __future__ import annotations

import re

import pytest

import bwtriton
from bwtriton.errors import InputError
from bwtriton.kernels.clc_schedule import SIGNATURE, clc_schedule_kernel
from bwtriton.language import clc


@pytest.mark.parametrize("target,expected", [("sm_100a", True), ("sm_103a", True), ("sm_120a", False),
                                             ("sm_90a", False), ("sm_80", False)])
def test_supported_targets(target, expected):
    assert clc.supported(target) is expected


def test_launch_grid_clc_launches_every_tile():
    assert clc.launch_grid(1000, "sm_100a") == (1000, True)


def test_launch_grid_static_caps_at_sms():
    assert clc.launch_grid(1000, "sm_90a", num_sms=132) == (132, False)
    assert clc.launch_grid(7, "sm_90a", num_sms=132) == (7, False)


def test_launch_grid_static_without_sm_count_is_a_clear_error():
    with pytest.raises(InputError, match="needs num_sms="):
        clc.launch_grid(10, "sm_90a")


def test_launch_grid_rejects_empty_problem():
    with pytest.raises(InputError, match="num_tiles must be >= 1"):
        clc.launch_grid(0, "sm_100a")


def test_asm_multicast_only_for_clusters():
    one, two = clc.try_cancel_asm(1), clc.try_cancel_asm(2)
    assert "multicast::cluster::all" not in one and "barrier.cluster" not in one
    assert "multicast::cluster::all" in two and "barrier.cluster.wait.acquire.aligned" in two
    # the elected thread arms exactly the response size before it requests
    for asm in (one, two):
        arm = asm.index(f"expect_tx.shared::cta.b64 _, [bwclc_bar], {clc.RESPONSE_BYTES};")
        assert arm < asm.index("clusterlaunchcontrol.try_cancel") < asm.index("mbarrier.try_wait.parity")


def test_asm_rejects_bad_cluster_size():
    with pytest.raises(InputError, match="NUM_CTAS must be >= 1"):
        clc.try_cancel_asm(0)


def _compile(target, use_clc, num_ctas=1):
    return bwtriton.compile(clc_schedule_kernel, signature=SIGNATURE, target=target, num_ctas=num_ctas,
                            constexprs={"USE_CLC": use_clc, "NUM_CTAS": num_ctas})


def test_one_round_trip_per_loop_iteration_on_sm100():
    ptx = _compile("sm_100a", True).asm["ptx"]
    assert len(re.findall(r"clusterlaunchcontrol\.try_cancel", ptx)) == 1
    assert len(re.findall(r"clusterlaunchcontrol\.query_cancel\.is_canceled", ptx)) == 1


def test_same_source_is_static_on_hopper():
    ptx = _compile("sm_90a", False).asm["ptx"]
    assert "clusterlaunchcontrol" not in ptx and "%nctaid.x" in ptx
