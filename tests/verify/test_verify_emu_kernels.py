"""The verifier on Triton 3.6 output of the emulator's corpus (tests/emu_cases.py, compiled for sm_100a): the
correct kernels have no error, and the planted faults the rules of this round decide are errors.

* upstream's mxfp8 x mxfp4 pattern (fp4 B in the padded layout, kind::mxf8f6f4): its expect_tx counts B's packed
  bytes, which is what the padded copy completes (tma-bytes-short must not fire);
* the TMA attention kernel: the prefetched K stage's wait and the Q @ K^T MMAs are skipped by two comparisons of
  one loop counter (mma-data-unwaited must not fire on the infeasible "wait skipped, MMAs issued" path);
* a flipped accumulator parity after a single-partition pipelined loop (mbarrier-parity-stale);
* the 8-warp epilogue's unwaited tcgen05.ld (acc-read-unsynced, decided through the warp-index window);
* a cp.async refill one iteration after the MMA it overwrites, with the MMA-barrier wait dropped (stage-reuse);
* an MMA reading a stage whose TMA of an earlier iteration nothing waited for (async-copy-unwaited);
* the persistent epilogue's tcgen05.ld lane moved by 32, its address base + loop-carried buffer * 128 (lane-quarter:
  the buffer's range [0, 1] comes from Triton's `setp.gt` wrap through a register reused after the loop);
* the block-scaled pipeline's accumulator wait after the loop dropped (acc-read-unsynced: the loop waits on each
  commit one iteration later, on the other barrier of its two-slot ring);
* the TMA attention kernel's ready wait under its skip branch with the parity frozen at 0 (mbarrier-parity-stuck);
* the LHS-in-TMEM cp.async pipeline with the MMA-barrier wait dropped: the first iteration refills the stage the
  peeled first k-step's MMA reads (stage-reuse);
* the fp4 example, whose loop re-initialises its MMA barrier every K step, waiting with parity 1 on the fresh
  barrier, which returns at once (stage-reuse).
"""
from __future__ import annotations

import functools

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

import emu_cases as ec  # noqa: E402 - tests/ is on sys.path (conftest)
from fixtures import ws_mutants as wm  # noqa: E402
from bwtriton.verify import verify_ptx  # noqa: E402


@functools.cache
def _ptx(which: str) -> str:
    kernels = {"mixed_padded_fp4": ec.compile_mixed_scaled_tma, "attention": ec.compile_attn_fwd,
               "tma_pipelined": ec.compile_tma_matmul,
               "matmul_8warps": lambda: ec.compile_matmul("fp16", "fp16", 128, 128, 64, "ieee", 8, 3),
               "persistent_tma": ec.compile_persistent_tma,
               "block_scaled_nvfp4": lambda: ec.case_block_scaled_tma(16, M=1024, N=1024, K=1024).kernel,
               "lhs_in_tmem_tf32": lambda: ec.case_lhs_in_tmem("fp32", 64).kernel,
               "fp4_example_reinit": lambda: ec.case_fp4_example("u8").kernel,
               "persistent_device_desc": lambda: ec.compile_persistent_tma(device_desc=True)}
    return kernels[which]().asm["ptx"]


def _errors(ptx: str) -> set[str]:
    return {f.check for f in verify_ptx(ptx).errors}


@pytest.mark.parametrize("which", ["mixed_padded_fp4", "attention", "tma_pipelined", "matmul_8warps",
                                   "persistent_tma", "persistent_device_desc", "block_scaled_nvfp4",
                                   "lhs_in_tmem_tf32", "fp4_example_reinit"])
def test_correct_kernel_has_no_error(which):
    assert _errors(_ptx(which)) == set()


def test_padded_fp4_expect_counts_packed_bytes():
    """The kernel's expect_tx is A's 128 x 128 e4m3 + B's 128 x 64 packed bytes + 2 x 512 scale bytes."""
    assert "expect_tx.shared.b64 _, [%r10], 25600;" in _ptx("mixed_padded_fp4")
    assert "tma-bytes-short" not in {f.check for f in verify_ptx(_ptx("mixed_padded_fp4")).findings}


@pytest.mark.parametrize("which", ["tma_pipelined", "mixed_padded_fp4", "matmul_8warps"])
def test_flipped_accumulator_parity_is_stale(which):
    assert "mbarrier-parity-stale" in _errors(wm.FAULTS["flip_acc_parity"](_ptx(which)))


def test_eight_warp_epilogue_without_wait():
    assert "acc-read-unsynced" in _errors(wm.FAULTS["drop_acc_wait"](_ptx("matmul_8warps")))


def test_cp_async_refill_without_mma_wait():
    """The 8-warp cp.async pipeline with the MMA-barrier wait before the refill dropped: the refill writes, one
    iteration later, the stage the previous MMAs read."""
    assert "stage-reuse" in _errors(wm.FAULTS["drop_last_mma_wait"](_ptx("matmul_8warps")))


def test_tma_pipeline_without_ready_wait():
    """The TMA pipeline with the ready wait before the last MMA group dropped: the MMA reads the stage the TMA of
    two iterations earlier fills."""
    assert "async-copy-unwaited" in _errors(wm.FAULTS["drop_last_mma_wait"](_ptx("tma_pipelined")))


def test_attention_faults_still_errors():
    for fault in ("drop_last_mma_wait", "mma_after_commit", "drop_acc_wait"):
        assert _errors(wm.FAULTS[fault](_ptx("attention"))), fault


@pytest.mark.parametrize("which", ["persistent_tma", "persistent_device_desc"])
def test_persistent_epilogue_lane_plus32(which):
    """Every warp of the persistent epilogue reads the next warp's lane quarter, for either accumulator buffer."""
    assert "lane-quarter" in _errors(wm.FAULTS["ld_lane_plus32"](_ptx(which)))


def test_block_scaled_exit_read_without_wait():
    assert "acc-read-unsynced" in _errors(wm.FAULTS["drop_acc_wait"](_ptx("block_scaled_nvfp4")))


def test_attention_frozen_ready_parity():
    assert "mbarrier-parity-stuck" in _errors(wm.FAULTS["freeze_ready_phase"](_ptx("attention")))


def test_entry_refill_without_mma_wait():
    assert "stage-reuse" in _errors(wm.FAULTS["drop_last_mma_wait"](_ptx("lhs_in_tmem_tf32")))


def test_reinitialised_barrier_flipped_parity():
    assert "stage-reuse" in _errors(wm.FAULTS["flip_acc_parity"](_ptx("fp4_example_reinit")))
