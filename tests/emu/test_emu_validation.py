"""Trustworthiness: the numerics tests must be able to fail. A deliberately wrong TMEM data-path layout, scale
layout, or a flipped instruction-descriptor bit in the PTX makes the emulated result disagree with torch."""
from __future__ import annotations

import numpy as np
import pytest

import bwtriton.emu as emu
import emu_cases as ec
from bwtriton.emu.isa import operands, tcgen05
from bwtriton.ptx import parse_ptx

pytestmark = pytest.mark.emulated


def _error(case, text=None) -> tuple[float, float]:
    args, out, ref, tol = case.make()
    if text is None:
        emu.run(case.kernel, case.grid, *args)
    else:
        md = case.kernel.metadata._asdict()
        emu.run(text, case.grid, *args, num_warps=md["num_warps"], shared=md["shared"],
                num_ctas=md["num_ctas"])
    return float((out.double() - ref).abs().max()), tol


def _flip_idesc_bit(text: str, bit: int) -> str:
    """Flip one bit of every tcgen05.mma's instruction descriptor (a `mov.b32 %r, IMM` feeding operand 3)."""
    fn = parse_ptx(text).entries[0]
    lines = text.split("\n")
    done = set()
    for ins in fn.find("tcgen05.mma"):
        for d in fn.definitions(ins.operands[3].name):
            if d.opcode == "mov" and d.operands[1].kind == "imm" and d.line not in done:
                old = int(d.operands[1].value)
                lines[d.line - 1] = lines[d.line - 1].replace(str(old), str(old ^ (1 << bit)))
                done.add(d.line)
    assert done, "no immediate idesc found"
    return "\n".join(lines)


def _mirror_rows_layout(real):
    def wrong(m, n, cta_group, lane_base):
        out = []
        for rows, lanes, cols in real(m, n, cta_group, lane_base):
            out.append((rows, lanes[::-1].copy(), cols))  # row m lands in row (last - m)'s lane
        return tuple(out)
    return wrong


@pytest.mark.parametrize("make", [lambda: ec.case_example_matmul("bf16"), lambda: ec.case_gluon_two_ctas(128),
                                  lambda: ec.case_gluon_two_ctas(256)],
                         ids=["matmul_layoutD", "two_ctas_layoutB", "two_ctas_layoutA"])
def test_wrong_accumulator_layout_is_detected(monkeypatch, make):
    case = make()
    err, tol = _error(case)
    assert err <= tol
    real = operands.d_tmem_layout.__wrapped__
    monkeypatch.setattr(operands, "d_tmem_layout", _mirror_rows_layout(real))
    err, tol = _error(case)
    assert err > 10 * tol, "a mirrored TMEM accumulator layout went unnoticed"


def test_wrong_layout_b_halves_is_detected(monkeypatch):
    """Layout B (cta_group::2, M=128): putting the second N half in lanes 0-63 instead of 64-127 must fail."""
    case = ec.case_gluon_two_ctas(128)
    real = operands.d_tmem_layout.__wrapped__

    def wrong(m, n, cta_group, lane_base):
        res = real(m, n, cta_group, lane_base)
        if cta_group == 2 and m == 128:
            return tuple((rows, lanes % 64 + 64 * (np.arange(n)[None, :] < n // 2), cols) for rows, lanes, cols in res)
        return res
    monkeypatch.setattr(operands, "d_tmem_layout", wrong)
    err, tol = _error(case)
    assert err > 10 * tol


def test_wrong_scale_factor_layout_is_detected(monkeypatch):
    case = ec.case_dot_scaled("e2m1", "e2m1", "fp8e4nv", 16, 256)
    err, tol = _error(case)
    assert err <= tol
    real = tcgen05._scales

    def wrong(cta, taddr, rows, nsf, sf_id, scale_type):  # scale j taken from byte (3 - j)
        return real(cta, taddr, rows, nsf, sf_id, scale_type)[:, ::-1].copy()
    monkeypatch.setattr(tcgen05, "_scales", wrong)
    err, tol = _error(case)
    assert err > 10 * tol


@pytest.mark.parametrize("bit,what", [(16, "transpose B"), (15, "transpose A"), (7, "A type f16->bf16"),
                                      (13, "negate A"), (20, "N=128 -> 192")])
def test_flipped_idesc_bit_is_detected(bit, what):
    case = ec.case_gluon_one_mma()
    bad = _flip_idesc_bit(case.kernel.asm["ptx"], bit)
    try:
        err, tol = _error(case, bad)
    except emu.EmulationError:
        return  # an illegal descriptor (e.g. undecodable) is also a detection
    assert err > 10 * tol, f"flipping idesc bit {bit} ({what}) went unnoticed"


def test_flipped_scaled_idesc_bit_is_detected():
    """kind::mxf4 (MXFP4): SFA_ID 0 -> 2 (bit 30) reads the wrong scale bytes."""
    case = ec.case_dot_scaled("e2m1", "e2m1", "u8", 32, 256)
    err, tol = _error(case, _flip_idesc_bit(case.kernel.asm["ptx"], 30))
    assert err > 10 * tol


def test_wrong_mn_major_fp4_nibble_order_is_detected(monkeypatch):
    """The MN-major padded-fp4 decoding (value x of a cell = nibble x % 2 of byte x // 2) is what makes the
    rhs_k_pack=False case match: swapping the two nibbles of every byte breaks it."""
    case = ec.case_dot_scaled_mn_packed()
    err, tol = _error(case)
    assert err <= tol
    orig = tcgen05._mn_major_padded_fp4

    def swapped(cta, desc, mn, k, reads):
        return orig(cta, desc, mn, k, reads).reshape(mn // 2, 2, k)[:, ::-1].reshape(mn, k)
    monkeypatch.setattr(tcgen05, "_mn_major_padded_fp4", swapped)
    err, tol = _error(case)
    assert err > 100 * tol
