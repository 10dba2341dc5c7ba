"""CLC kernels in the emulator under several grid schedules: numerics against torch, every tile processed
exactly once, and the kernel's own record of who processed what agrees with the emulated scheduler's."""
from __future__ import annotations

import functools

import pytest
import torch

import bwtriton
import bwtriton.emu as emu
from bwtriton.emu import GridSchedule
from bwtriton.kernels import clc_matmul as cm
from bwtriton.kernels import grouped_matmul as gm
from bwtriton.kernels.clc_schedule import SIGNATURE, clc_schedule_kernel

pytestmark = pytest.mark.emulated
# (workers, seed): one SM (everything is stolen by the first program), 3 SMs in launch order and shuffled,
# a full B200 (148 SMs: every cluster starts, every cancel fails)
SCHEDULES = [(1, None), (3, None), (3, 11), (148, None)]


@functools.lru_cache(maxsize=None)
def _probe(num_ctas: int):
    return bwtriton.compile(clc_schedule_kernel, signature=SIGNATURE, target="sm_100a", num_ctas=num_ctas,
                            constexprs={"USE_CLC": True, "NUM_CTAS": num_ctas})


@pytest.mark.parametrize("num_ctas", [1, 2])
@pytest.mark.parametrize("workers,seed", SCHEDULES)
def test_every_tile_once_and_owner_matches_scheduler(num_ctas, workers, seed):
    tiles = 12
    owner = torch.zeros(tiles, dtype=torch.int32)
    visits = torch.zeros(tiles, dtype=torch.int32)
    sched = GridSchedule(workers=workers, seed=seed)
    emu.run(_probe(num_ctas), tiles, owner, visits, tiles, grid_schedule=sched)
    # Triton predicates scalar atomics on CTA rank 0's thread 0 (`(tid & 127 | %cluster_ctarank) == 0` in the
    # PTX), so a cluster counts one visit per tile; a tile processed twice would count 2
    assert visits.tolist() == [1] * tiles
    started_by_worker = {sched.ran_by[c]: c[0] for c in sched.started}
    for t in range(tiles):
        assert owner[t].item() - 1 == started_by_worker[sched.ran_by[(t, 0, 0)]]
    stolen = len(sched.stolen)
    assert len(sched.started) + stolen == tiles
    assert stolen == (0 if workers >= tiles else tiles - len(sched.started))
    assert sched.failed_requests == len(sched.started)  # each program ends on exactly one failed cancel


def test_one_worker_steals_everything_in_launch_order():
    tiles = 5
    owner, visits = torch.zeros(tiles, dtype=torch.int32), torch.zeros(tiles, dtype=torch.int32)
    sched = GridSchedule(workers=1)
    emu.run(_probe(1), tiles, owner, visits, tiles, grid_schedule=sched)
    assert sched.started == [(0, 0, 0)]
    assert [v for _, _, v in sched.stolen] == [(t, 0, 0) for t in range(1, tiles)]
    assert owner.tolist() == [1] * tiles


def test_seed_changes_the_schedule_not_the_result():
    tiles = 9
    runs = []
    for seed in (1, 2):
        owner, visits = torch.zeros(tiles, dtype=torch.int32), torch.zeros(tiles, dtype=torch.int32)
        sched = GridSchedule(workers=2, seed=seed)
        emu.run(_probe(1), tiles, owner, visits, tiles, grid_schedule=sched)
        assert visits.tolist() == [1] * tiles
        runs.append(sched.started)
    assert runs[0] != runs[1]


def test_schedule_object_is_reset_per_run():
    tiles = 4
    sched = GridSchedule(workers=2)
    for _ in range(2):
        owner, visits = torch.zeros(tiles, dtype=torch.int32), torch.zeros(tiles, dtype=torch.int32)
        emu.run(_probe(1), tiles, owner, visits, tiles, grid_schedule=sched)
    assert len(sched.started) == 2 and len(sched.stolen) == 2 and sched.failed_requests == 2


def test_bad_worker_count_is_a_clear_error():
    with pytest.raises(bwtriton.errors.InputError, match="positive int"):
        GridSchedule(workers=0)


@functools.lru_cache(maxsize=None)
def _gemm():
    return bwtriton.compile(cm.clc_matmul_kernel, signature=cm.signature("bf16"), target="sm_100a",
                            constexprs=cm.constexprs("sm_100a"))


def _assert_bf16_close(got: torch.Tensor, ref: torch.Tensor) -> None:
    # fp32 accumulation, one rounding to bf16 at the store: within one bf16 ulp (2^-7 relative) of the float64
    # product; atol covers results that round near zero
    torch.testing.assert_close(got.double(), ref, rtol=2 ** -7, atol=1e-2)


@pytest.mark.parametrize("workers,seed", SCHEDULES)
def test_clc_matmul_matches_torch(workers, seed):
    M, N, K = 256, 192, 64  # 2 x 3 = 6 tiles of 128 x 64
    g = torch.Generator().manual_seed(workers)
    a = torch.randn(M, K, generator=g).bfloat16()
    b = torch.randn(K, N, generator=g).bfloat16()
    c = torch.zeros(M, N, dtype=torch.bfloat16)
    sched = GridSchedule(workers=workers, seed=seed)
    emu.run(_gemm(), cm.num_tiles(M, N), a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0), grid_schedule=sched)
    _assert_bf16_close(c, a.double() @ b.double())
    assert len(sched.stolen) == max(0, cm.num_tiles(M, N) - workers)


@functools.lru_cache(maxsize=None)
def _grouped():
    return bwtriton.compile(gm.grouped_matmul_kernel, signature=gm.signature("bf16"), target="sm_100a",
                            constexprs=gm.constexprs("sm_100a"))


@pytest.mark.parametrize("workers,seed", SCHEDULES)
def test_ragged_grouped_matmul_matches_torch(workers, seed):
    group_rows = [200, 40, 0, 130]  # ragged, with an empty expert and partial M tiles
    N, K = 128, 64
    g = torch.Generator().manual_seed(7)
    a = torch.randn(sum(group_rows), K, generator=g).bfloat16()
    b = torch.randn(len(group_rows), K, N, generator=g).bfloat16()
    c = torch.zeros(sum(group_rows), N, dtype=torch.bfloat16)
    rows, tiles = gm.group_offsets(group_rows, N)
    emu.run(_grouped(), int(tiles[-1]), a, b, c, rows, tiles, len(group_rows), N, K, a.stride(0), b.stride(0),
            b.stride(1), c.stride(0), grid_schedule=GridSchedule(workers=workers, seed=seed))
    _assert_bf16_close(c, gm.reference(a, b, group_rows))


def test_group_offsets_count_tiles_per_group():
    rows, tiles = gm.group_offsets([200, 40, 0, 130], 128)
    assert rows.tolist() == [0, 200, 240, 240, 370]
    assert tiles.tolist() == [0, 4, 6, 6, 10]  # cdiv(M_g, 128) * cdiv(128, 64)


def test_group_offsets_reject_negative_rows():
    with pytest.raises(bwtriton.errors.InputError, match="row counts >= 0"):
        gm.group_offsets([3, -1], 64)


def _hand_written(replace: tuple[str, str] | None = None) -> str:
    from pathlib import Path
    text = (Path(__file__).resolve().parents[2] / "test_lit" / "clc" / "verify_clean.ptx").read_text()
    return text.replace(*replace) if replace else text


def test_hand_written_round_trip_runs():
    out = torch.zeros(1, dtype=torch.int64)
    sched = GridSchedule(workers=1)
    emu.run(_hand_written(), 4, out, 4, num_warps=4, shared=0, grid_schedule=sched)
    assert [v for _, _, v in sched.stolen] == [(1, 0, 0), (2, 0, 0), (3, 0, 0)]


def test_request_after_observed_failure_is_flagged():
    # the loop restarts at tile 0 instead of ending when the cancel failed: PTX leaves the next request undefined
    ptx = _hand_written(("selp.b32 %r2, %t, %r1, %ok;", "selp.b32 %r2, %t, 0, %ok;"))
    with pytest.raises(emu.EmulationError, match="after this CTA observed a failed one"):
        emu.run(ptx, 2, torch.zeros(1, dtype=torch.int64), 2, num_warps=4, shared=0, grid_schedule=GridSchedule())


def _gluon_probe():
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl

    from bwtriton.language.clc import gluon_next_tile

    @gluon.jit
    def gluon_probe(owner_ptr, num_tiles, USE_CLC: gl.constexpr):
        tile = gl.program_id(0)
        while tile < num_tiles:
            gl.store(owner_ptr + tile, gl.program_id(0) + 1)
            tile = gluon_next_tile(tile, num_tiles, USE_CLC)
    return gluon_probe


@pytest.mark.parametrize("workers", [1, 3])
def test_gluon_kernel_steals(workers):
    res = bwtriton.compile(_gluon_probe(), signature={"owner_ptr": "*i32", "num_tiles": "i32"},
                           constexprs={"USE_CLC": True}, target="sm_100a")
    assert "clusterlaunchcontrol.try_cancel" in res.asm["ptx"]
    tiles = 7
    owner = torch.zeros(tiles, dtype=torch.int32)
    sched = GridSchedule(workers=workers)
    emu.run(res, tiles, owner, tiles, grid_schedule=sched)
    started = {sched.ran_by[c]: c[0] for c in sched.started}
    assert [o - 1 for o in owner.tolist()] == [started[sched.ran_by[(t, 0, 0)]] for t in range(tiles)]
    assert len(sched.stolen) == tiles - workers


def test_static_shared_layout_aligns_dedupes_and_reserves_1k():
    from bwtriton.emu.machine.image import static_shared_layout
    from bwtriton.ptx import parse_ptx
    fn = parse_ptx(""".version 8.7
.target sm_100a
.address_size 64
.visible .entry k()
{
  { .shared .align 8 .b64 bar; .shared .align 16 .b8 resp[16]; }
  { .shared .align 8 .b64 bar; }
  ret;
}""").entries[0]
    offsets, reserved = static_shared_layout(fn)
    assert offsets == {"bar": 0, "resp": 16}  # resp aligned up to 16; the second `bar` shares the first's slot
    assert reserved == 1024                   # dynamic shared memory (global_smem) stays 1 KiB aligned


def test_unsupported_shared_declaration_is_named():
    from bwtriton.emu.machine.image import static_shared_layout
    from bwtriton.emu.errors import UnsupportedInstructionError
    from bwtriton.ptx import parse_ptx
    fn = parse_ptx(".version 8.7\n.target sm_100a\n.address_size 64\n.visible .entry k()\n{\n"
                   "  { .shared .align 8 .v2 .b32 pair; }\n  ret;\n}").entries[0]
    with pytest.raises(UnsupportedInstructionError, match="function-scope .shared declaration"):
        static_shared_layout(fn)


def test_slow_worker_gets_fewer_tiles_and_static_waits_for_it():
    tiles = 12
    owner, visits = torch.zeros(tiles, dtype=torch.int32), torch.zeros(tiles, dtype=torch.int32)
    sched = GridSchedule(workers=3, speeds=(1.0, 1.0, 0.2), quantum=50)
    emu.run(_probe(1), tiles, owner, visits, tiles, grid_schedule=sched)
    per_worker = {w: len(c) for w, c in sched.tiles_of_worker().items()}
    assert visits.tolist() == [1] * tiles
    assert per_worker[2] < per_worker[0] and per_worker[2] < per_worker[1]


@pytest.mark.parametrize("kw,match", [({"speeds": (1.0, 0.5)}, "one speed in \\(0, 1\\] per worker"),
                                      ({"speeds": (1.0, 0.0, 1.0)}, "one speed in"),
                                      ({"quantum": 0}, "quantum=...\\) must be a positive int")])
def test_bad_schedule_options_are_clear_errors(kw, match):
    with pytest.raises(bwtriton.errors.InputError, match=match):
        GridSchedule(workers=3, **kw)
