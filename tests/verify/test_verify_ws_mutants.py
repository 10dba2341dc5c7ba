"""Faults planted into the PTX of our warp-specialized kernels (`fixtures.ws_mutants`) must be verifier errors,
and the unmutated kernels must stay clean.

Kernels: the tutorial-09-style warp-specialized K loop (`t09_ws_tile`: one tile per CTA, loader / MMA / epilogue
partitions under Triton 3.6's brx dispatch), the persistent warp-specialized GEMM (`t09_persistent_desc_ws`,
double-buffered accumulator), a Gluon tutorial-06/08-style kernel with explicit partitions (`gluon_ws`) and the
corpus's Gluon 2-CTA (cta_group::2) MMA kernel (`gluon_two_ctas`), and a Gluon tutorial-11-style persistent kernel
written after the rules (`gluon_persistent_ws`: 3-stage ring with one counter across tiles, two TMEM accumulator
buffers with ready/empty barriers; `_big`: BN = 256 and scalar masked stores, ~4.2k lines), the measurement on a
kernel the rules were not tuned on; likewise a Triton `warp_specialize` persistent GEMM with a bias + ReLU epilogue
split into two TMA-stored column halves (`ws_epilogue`, bf16, three configurations), written after the rules of the
round that closed the emulator-agreement gaps. Every applicable (kernel, fault) pair must be
an error, except those in `NOT_YET` (with why), so a change that catches one must move it. The caught rate is
printed (pytest -s) and asserted.
"""
from __future__ import annotations

import functools

import pytest

import bwtriton
from bwtriton.verify import verify_ptx
from fixtures import gluon_persistent_ws, gluon_ws, ws_epilogue
from fixtures import kernels as corpus_kernels
from fixtures import upstream_style as us
from fixtures import ws_mutants as wm

#: kernel -> its PTX (compiled through bwtriton's pipeline, or Triton's JIT for the Gluon one)
_SOURCES = {
    "t09_ws_tile": lambda: bwtriton.compile(us.CASES["t09_ws_tile"][0],
                                            **us.options("t09_ws_tile", True, 3, 4, 1)).asm["ptx"],
    "t09_persistent_desc_ws": lambda: bwtriton.compile(
        us.CASES["t09_persistent_desc_ws"][0], **us.options("t09_persistent_desc_ws", True, 3, 4, 1)).asm["ptx"],
    "gluon_ws": lambda: gluon_ws.compile_ptx(),
    "gluon_two_ctas": lambda: corpus_kernels._compile_gluon_two_ctas(),
    "gluon_persistent_ws": lambda: gluon_persistent_ws.compile_ptx(),
    "gluon_persistent_ws_big": lambda: gluon_persistent_ws.compile_ptx(bn=256, masked=True),
    "ws_bias_relu": lambda: ws_epilogue.compile_ptx(),
    "ws_bias_relu_bn256_w8": lambda: ws_epilogue.compile_ptx(bn=256, warps=8, stages=3),
    "ws_bias_relu_bn64_s4": lambda: ws_epilogue.compile_ptx(bn=64, warps=4, stages=4),
}
KERNELS = tuple(_SOURCES)

#: (kernel, fault) -> why the verifier does not decide it yet
NOT_YET: dict = {}


@functools.lru_cache(maxsize=None)
def _ptx(kernel: str) -> str:
    return _SOURCES[kernel]()


def _pairs():
    return [(k, f) for k in KERNELS for f in wm.FAULTS]


@functools.lru_cache(maxsize=None)
def _mutant_errors(kernel: str, fault: str) -> "tuple | None":
    """The verifier's errors on `fault` planted into `kernel` (None where it has no place): one verification per
    pair, shared by the pair's test and the rate report (both run in one worker: xdist distributes by file)."""
    mutated = wm.FAULTS[fault](_ptx(kernel))
    if mutated is None:
        return None
    assert mutated != _ptx(kernel)
    return tuple(verify_ptx(mutated).errors)


@pytest.mark.parametrize("kernel", KERNELS)
def test_unmutated_kernel_is_clean(kernel):
    report = verify_ptx(_ptx(kernel))
    assert [f.format() for f in report.findings if f.severity in ("error", "warning")] == []


@pytest.mark.parametrize("kernel,fault", _pairs(), ids=[f"{k}-{f}" for k, f in _pairs()])
def test_planted_fault_is_an_error(kernel, fault):
    errors = _mutant_errors(kernel, fault)
    if errors is None:
        pytest.skip(f"{kernel} has no place for {fault}")
    if (kernel, fault) in NOT_YET:
        assert not errors, f"now caught ({errors[0].check}): move it out of NOT_YET"
        pytest.xfail(NOT_YET[(kernel, fault)])
    assert errors, f"{fault} planted into {kernel} is not reported"


def test_caught_rate_report(capsys):
    """The rate over all applicable (kernel, fault) pairs, printed for the record; at least the EXPECTED share."""
    applicable = caught = 0
    for kernel, fault in _pairs():
        errors = _mutant_errors(kernel, fault)
        if errors is None:
            continue
        applicable += 1
        caught += bool(errors)
    with capsys.disabled():
        print(f"\nwarp-specialized planted faults caught: {caught}/{applicable}")
    assert caught == applicable - sum(1 for p in NOT_YET if wm.FAULTS[p[1]](_ptx(p[0])) is not None)


@pytest.mark.emulated
def test_gluon_ws_kernel_emulates_correctly():
    """The Gluon fixture is a real GEMM: its PTX runs on the emulated B200 to A @ B^T (fp16 in, fp32 out)."""
    import bwtriton.emu as emu  # noqa: PLC0415 - only this test emulates
    from bwtriton.emu.driver import emulated_gpu  # noqa: PLC0415 - same reason
    args, (a, b, c) = gluon_ws.host_args()
    with emulated_gpu("sm_100a"):
        kernel = gluon_ws.gluon_ws_matmul.warmup(*args, STAGES=3, num_warps=4, grid=(1, 1))
    emu.run(kernel, (1, 1), *args)
    ref = a.double() @ b.double().T
    # fp16 products are exact in fp32; 256 fp32 additions round by at most 256 * 2^-24 of the running sum
    bound = 256 * 2.0 ** -24 * (a.double().abs() @ b.double().abs().T) + 1e-6
    assert bool(((c.double() - ref).abs() <= bound).all())


@pytest.mark.emulated
def test_gluon_persistent_ws_kernel_emulates_correctly():
    """The persistent fixture: one program walks 3 tiles, reusing accumulator buffer 0 for the third."""
    import bwtriton.emu as emu  # noqa: PLC0415 - only this test emulates
    from bwtriton.emu.driver import emulated_gpu  # noqa: PLC0415 - same reason
    args, (a, b, c) = gluon_persistent_ws.host_args()
    with emulated_gpu("sm_100a"):
        kernel = gluon_persistent_ws.gluon_persistent_ws_matmul.warmup(*args, STAGES=3, NUM_PROGS=1, num_warps=4,
                                                                     grid=(1, 1))
    emu.run(kernel, (1, 1), *args)
    ref = a.double() @ b.double().T
    # as for gluon_ws: exact fp16 products, 256 fp32 additions
    bound = 256 * 2.0 ** -24 * (a.double().abs() @ b.double().abs().T) + 1e-6
    assert bool(((c.double() - ref).abs() <= bound).all())


@pytest.mark.emulated
def test_ws_epilogue_kernel_emulates_correctly():
    """The bias + ReLU fixture is a real GEMM: one CTA (NUM_SMS = 1) walks 3 tiles on the emulated B200, so both
    accumulator buffers are reused; against relu(A @ B^T + bias) in float64."""
    import torch  # noqa: PLC0415 - only this test needs tensors
    from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: PLC0415 - host descriptors
    import bwtriton.emu as emu  # noqa: PLC0415 - only this test emulates
    M, N, K = 384, 128, 128
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(M, K, generator=g).bfloat16(), torch.randn(N, K, generator=g).bfloat16()
    bias, c = torch.randn(N, generator=g), torch.zeros(M, N).bfloat16()
    kernel = ws_epilogue.compile_kernel(num_sms=1)
    emu.run(kernel, (1,), TensorDescriptor.from_tensor(a, [128, 64]), TensorDescriptor.from_tensor(b, [128, 64]),
            TensorDescriptor.from_tensor(c, [128, 64]), bias, M, N, K)
    ref = torch.relu(a.double() @ b.double().T + bias.double())
    # bf16 products are exact in fp32; 128 fp32 additions, then one bf16 rounding (2^-8 relative) of the output
    bound = 2.0 ** -8 * ref.abs() + 128 * 2.0 ** -24 * (a.double().abs() @ b.double().abs().T) + 1e-6
    assert bool(((c.double() - ref).abs() <= bound).all())
