"""Over-budget kernels: upstream Triton's trap-only output is reproduced, and through bwtriton the same kernels
compile to real tcgen05 code with a recorded fallback, or fail with a message naming allocations and fixes."""
from __future__ import annotations

import re

import pytest

import bwtriton
from bwtriton.errors import CompileError
from bwtriton import mlir
from bwtriton.mlir import ops as irt
from bwtriton.passes.plan_tmem import fallback as fb
from fixtures import tmem_kernels as ex

THREE_ACC = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, NUM_ACC=3)


def _entry_body(ptx: str) -> str:
    start = ptx.index("{", ptx.index(".entry"))
    return ptx[start:ptx.index("$L__func_end0", start)] if "$L__func_end0" in ptx else ptx[start:]


@pytest.fixture(scope="module")
def three_acc_upstream():
    return bwtriton.compile(ex.multi_acc_kernel, signature=ex.MULTI_ACC_SIGNATURE, constexprs=THREE_ACC,
                            num_warps=8, num_stages=2, passes="none", check_limits=False)


@pytest.fixture(scope="module")
def three_acc_planned():
    return bwtriton.compile(ex.multi_acc_kernel, signature=ex.MULTI_ACC_SIGNATURE, constexprs=THREE_ACC,
                            num_warps=8, num_stages=2)


def test_upstream_turns_768_columns_into_a_trap_kernel(three_acc_upstream):
    body = _entry_body(three_acc_upstream.asm["ptx"])
    assert three_acc_upstream.metadata["tmem_size"] == 768
    assert "trap;" in body and "tcgen05" not in body


def test_planned_768_kernel_is_real_tcgen05_code(three_acc_planned):
    ptx = three_acc_planned.asm["ptx"]
    body = _entry_body(ptx)
    assert "trap;" not in body
    assert three_acc_planned.metadata["tmem_size"] == 512
    assert re.search(r"tcgen05\.alloc\.cta_group::1\.sync\.aligned\.shared::cta\.b32 \[[^\]]+\], 512;", ptx)
    # K=64 per loop iteration is 4 MMAs of K=16; three loops, each with a peeled prologue and a loop body
    assert len(re.findall(r"tcgen05\.mma\.cta_group::1\.kind::f16", ptx)) == 3 * 2 * 4
    assert len(re.findall(r"tcgen05\.ld\.sync", ptx)) >= 3
    assert "ld.local" not in ptx  # the accumulators did not spill out of registers after fission


def test_planned_768_report_records_the_fallback(three_acc_planned):
    rep = three_acc_planned.reports["plan-tmem"]
    assert [f["rewrite"] for f in rep["fallbacks"]] == ["serialize-accumulators"]
    assert rep["upstream"]["used_columns"] == 768
    assert rep["totals"]["used_columns"] == 512 and rep["totals"]["fits"]
    assert len(rep["allocations"]) == 3 and all(a["columns"] == 256 for a in rep["allocations"])
    assert any("768" in w for w in rep["warnings"])
    assert "_bwtriton_tmem_ttir" not in three_acc_planned.metadata  # the TTIR snapshot is not cached


def test_fission_rewrite_structure(three_acc_upstream):
    text, what = fb.serialize_accumulators(three_acc_upstream.asm["ttir"])
    loops = [op for op in irt.all_ops(irt.parse_ops(text)) if op.name == "scf.for"]
    assert len(loops) == 3 and "3 loops" in what
    for loop in loops:
        dots = [o for o in loop.walk() if o.name == "tt.dot"]
        assert len(dots) == 1
    # each accumulator's epilogue conversion sits right after its own loop
    assert len(re.findall(r"\} loc\(#loc\d+\)\n\s*%\d+ = arith\.truncf", text)) == 3
    mod = fb.lower_ttir_to_ttgir(text, mlir.new_context(), {"num_warps": 8, "num_stages": 2},
                                 100)
    assert str(mod).count("ttng.tc_gen5_mma") >= 3


def test_fission_refuses_loops_with_side_effects(three_acc_upstream):
    ttir = three_acc_upstream.asm["ttir"]
    load = re.search(r"\n(\s*)(%a) = tt\.load (%[\w]+) : (tensor<[^>]*>>) (loc\([^)]*\))\n", ttir)
    indent, value, ptrs, ptr_type, loc = load.groups()
    # A store inside the loop would run once per fissioned loop: the rewrite must not apply.
    store = f"{indent}tt.store {ptrs}, {value} : {ptr_type} {loc}\n"
    patched = ttir.replace(load.group(0), load.group(0) + store, 1)
    mlir.reparse(patched, mlir.new_context())  # still valid IR
    assert fb.serialize_accumulators(ttir) is not None
    assert fb.serialize_accumulators(patched) is None


def test_single_buffer_fallback_for_double_buffered_accumulator():
    r = bwtriton.compile(ex.ws_matmul_kernel, signature=ex.WS_MATMUL_SIGNATURE,
                         constexprs=dict(BLOCK_M=256, BLOCK_N=256, BLOCK_K=64, NUM_SMS=148), num_warps=4,
                         num_stages=3)
    rep = r.reports["plan-tmem"]
    assert rep["upstream"]["used_columns"] == 1024
    assert [f["rewrite"] for f in rep["fallbacks"]] == ["single-buffer-accumulators"]
    assert [a["buffers"] for a in rep["allocations"]] == [1] and r.metadata["tmem_size"] == 512
    assert "trap;" not in _entry_body(r.asm["ptx"]) and "tcgen05.mma" in r.asm["ptx"]


def test_unfixable_plan_fails_with_allocations_and_advice():
    with pytest.raises(CompileError) as info:
        bwtriton.compile(ex.chained_dot_kernel, signature=ex.CHAINED_DOT_SIGNATURE,
                         constexprs=dict(BLOCK_M=128, BLOCK_N=256, HEAD_DIM=256), num_warps=8, num_stages=2)
    msg = str(info.value)
    assert "[plan-tmem] kernel needs 640 TMEM columns" in msg
    assert "%s (tmem_kernels.py:" in msg and "acc 128x256xf32, 256 columns" in msg
    assert "operand 128x256xf16, 128 columns" in msg
    assert "reduce BLOCK_N" in msg and "PassManager" not in msg


def test_single_accumulator_over_512_fails_before_triton_crashes():
    with pytest.raises(CompileError) as info:
        bwtriton.compile(ex.matmul_kernel, signature=ex.MATMUL_SIGNATURE,
                         constexprs=dict(BLOCK_M=256, BLOCK_N=512, BLOCK_K=32), num_warps=8, num_stages=2)
    msg = str(info.value)
    assert "[tmem-ttir-snapshot]" in msg and "256x512xf32 accumulator = 1024 columns" in msg
    assert "reduce BLOCK_N" in msg and "PassManager" not in msg


def test_fallback_can_be_disabled():
    with pytest.raises(CompileError, match=r"fallback disabled"):
        bwtriton.compile(ex.multi_acc_kernel, signature=ex.MULTI_ACC_SIGNATURE, constexprs=THREE_ACC,
                         num_warps=8, num_stages=2, passes="plan-tmem{fallback=false}")


@pytest.mark.gpu
def test_fissioned_ttir_numerics_on_gpu(tmp_path):
    """The loop-fission rewrite is target-independent TTIR: run original and rewritten kernels on the local GPU
    (H200: wgmma) and require bitwise-equal outputs (same MMA sequence per accumulator) and torch agreement."""
    torch = pytest.importorskip("torch")
    import triton
    cx = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, NUM_ACC=3)
    M, K, N = 256, 512, 3 * 128
    torch.manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    args = lambda c: (a, b, c, K, a.stride(0), b.stride(0), c.stride(0))  # noqa: E731
    c_orig = torch.empty(M, N, device="cuda", dtype=torch.float16)
    original = ex.multi_acc_kernel[(M // 128,)](*args(c_orig), **cx, num_warps=4, num_stages=3)
    text, _ = fb.serialize_accumulators(original.asm["ttir"])
    path = tmp_path / "multi_acc_kernel.ttir"
    path.write_text(text)
    fissioned = triton.compile(str(path), options={"num_warps": 4, "num_stages": 3})
    c_fis = torch.empty(M, N, device="cuda", dtype=torch.float16)
    fissioned[(M // 128, 1, 1)](*args(c_fis))
    torch.cuda.synchronize()
    assert torch.equal(c_orig, c_fis)
    ref = (a.float() @ b.float()).half()
    # fp16 output of a K=512 fp32-accumulated product (|c| up to ~80): fp16 spacing there is 0.0625, plus
    # accumulation-order differences against torch's fp32 GEMM
    torch.testing.assert_close(c_fis, ref, atol=0.125, rtol=1e-2)
