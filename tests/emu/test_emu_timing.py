"""The B200 timing model (bwtriton.emu.timing): every cost has a source or says `assumption`; predictions move the
right way when the kernel changes (K doubled, no pipelining, 2-CTA handoff vs cluster barrier); timing leaves the
kernel's results and the untimed path alone; everything printed says it is a model.

Kernels: the TMA matmul with B stored [N, K] (bwtriton.examples.tma_matmul), one tile, a few K steps."""
from __future__ import annotations

import pytest
import torch
from triton.tools.tensor_descriptor import TensorDescriptor

import bwtriton
import bwtriton.emu as emu
from bwtriton.emu.integration.run import kernel_image
from bwtriton.emu.machine.async_engine import AsyncEngine
from bwtriton.emu.timing import B200, LABEL
from bwtriton.emu.timing.recorder import TimingRecorder
from bwtriton.errors import InputError
from bwtriton.examples.tma_matmul import matmul_tma_bt_kernel, tma_bt_spec

BK = 64


def _compile(block_m=128, block_n=64, stages=3, two_cta=False, passes=()):
    spec = tma_bt_spec("fp16", block_m=block_m, block_n=block_n, block_k=BK)
    spec["num_stages"] = stages
    return bwtriton.compile(matmul_tma_bt_kernel, two_cta=two_cta, passes=list(passes), **spec)


@pytest.fixture(scope="module")
def one_cta():
    return _compile()


def _run(res, steps: int, timing=True, block_m=128, block_n=64, nctas=1):
    k = steps * BK
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(block_m, k, generator=gen).half()
    b = torch.randn(block_n, k, generator=gen).half()
    c = torch.zeros(block_m, block_n, dtype=torch.float16)
    md = res.metadata
    if timing is True:  # a full wave: each SM gets its share of L2, as in benchmarks/timing_model.py
        timing = TimingRecorder(B200, active_sms=148)
    st = emu.run(res.asm["ptx"], (1, 1), TensorDescriptor.from_tensor(a, [block_m, BK]),
                 TensorDescriptor.from_tensor(b, [block_n, BK]), TensorDescriptor.from_tensor(c, [block_m, block_n]),
                 k, num_warps=md["num_warps"], num_ctas=nctas, shared=md["shared"],
                 tensordesc_meta=md["tensordesc_meta"], timing=timing)
    return st, c


def test_every_cost_has_a_source_or_says_assumption():
    entries = B200.entries()
    assert len(entries) >= 20
    for name, cost in entries.items():
        src = cost.source
        assert cost.value > 0, name
        assert src.startswith(("assumption", "derived")) or any(s in src for s in ("NVIDIA", "arXiv", "PR #")), \
            f"{name}: {src!r} names no source and is not marked assumption"
        if src.startswith("derived"):  # a derivation names what it is derived from
            assert "datasheet" in src, name
    assert B200.v("sm_count") == 148 and B200.v("hbm_bytes_per_s") == 8e12


@pytest.mark.emulated
def test_doubling_k_doubles_the_mainloop_time(one_cta):
    t = {s: _run(one_cta, s)[0].timing.cycles for s in (2, 4, 8)}
    step_short, step_long = (t[4] - t[2]) / 2, (t[8] - t[4]) / 4
    # the steady state per K step is the same whether measured over 2 or 4 more steps (pipelined, one tile)
    assert step_short > 0 and abs(step_long - step_short) / step_short < 0.15, t
    # and 4 more K steps cost about twice what 2 more do
    assert 1.7 < (t[8] - t[4]) / (t[4] - t[2]) < 2.3, t


@pytest.mark.emulated
def test_a_kernel_without_overlap_is_slower(one_cta):
    """num_stages=1: each K step waits for its TMA before the MMA, and the MMA before the next load."""
    serial = _compile(stages=1)
    piped, serial_t = _run(one_cta, 6)[0].timing, _run(serial, 6)[0].timing
    assert serial_t.cycles > 1.3 * piped.cycles, (serial_t.cycles, piped.cycles)
    waits = lambda p: sum(st.get("waiting on TMA", 0) for _, st in p.stall_table())
    assert waits(serial_t) > waits(piped)


@pytest.mark.emulated
def test_two_cta_handoff_is_not_slower_than_the_cluster_barrier():
    handoff = _compile(block_m=256, block_n=128, two_cta=True)
    barrier = _compile(block_m=256, block_n=128, two_cta=True, passes=("-pair-ctas-handoff",))
    th = _run(handoff, 4, block_m=256, block_n=128, nctas=2)[0].timing
    tb = _run(barrier, 4, block_m=256, block_n=128, nctas=2)[0].timing
    assert th.cycles <= tb.cycles, (th.cycles, tb.cycles)
    cluster_wait = lambda p: sum(st.get("waiting on the cluster barrier", 0) for _, st in p.stall_table())
    assert cluster_wait(tb) > cluster_wait(th)
    # a pair MMA counts both CTAs' halves: 2 * 256 * 128 * (4 * 64) FLOP
    assert th.flops == 2 * 256 * 128 * 4 * BK


@pytest.mark.emulated
def test_timing_leaves_results_and_the_untimed_path_unchanged(one_cta):
    plain, c_plain = _run(one_cta, 3, timing=False)
    timed, c_timed = _run(one_cta, 3)
    assert plain.timing is None and timed.timing is not None
    assert torch.equal(c_plain.view(torch.int16), c_timed.view(torch.int16))
    assert plain.instructions == timed.instructions
    # the cached kernel image keeps the untimed handlers and the engine's class default stays off
    image = kernel_image(one_cta.asm["ptx"])
    assert all(getattr(h, "__name__", "") != "timed" for h in image.prog.code)
    assert AsyncEngine.recorder is None
    again, c_again = _run(one_cta, 3, timing=False)
    assert torch.equal(c_plain.view(torch.int16), c_again.view(torch.int16)) and again.timing is None


@pytest.mark.emulated
def test_printed_prediction_and_plot_carry_the_model_label(one_cta, tmp_path):
    p = _run(one_cta, 2)[0].timing
    text = p.summary()
    assert text.startswith("timing: " + LABEL) and "waiting on" in text and "warp 0" in text
    assert p.seconds > 0 and p.flops == 2 * 128 * 64 * 2 * BK
    pytest.importorskip("matplotlib")
    out = p.plot(str(tmp_path / "timeline.png"))
    assert (tmp_path / "timeline.png").read_bytes()[:4] == b"\x89PNG" and out.endswith(".png")


@pytest.mark.emulated
def test_cli_timing_prints_the_model_label(capsys):
    from pathlib import Path
    from bwtriton.cli import main
    kernel = Path(bwtriton.__file__).parent / "examples" / "matmul.py"
    rc = main(["emulate", f"{kernel}:matmul_kernel", "--grid", "1,1",
               "--arg", "randn:fp16:128x64", "--arg", "randn:fp16:64x128", "--arg", "zeros:fp16:128x128",
               "--arg", "128", "--arg", "128", "--arg", "64", "--arg", "64", "--arg", "128", "--arg", "128",
               "--check", "2=0@1", "--timing"])
    out = capsys.readouterr().out
    assert rc == 0 and LABEL in out and "kernel time" in out


def test_bad_timing_argument_is_an_input_error(one_cta):
    with pytest.raises(InputError, match="timing must be"):
        _run(one_cta, 2, timing="yes")
