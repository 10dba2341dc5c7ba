"""The emulator decodes every instruction of our upstream-style kernels (tutorials 03/06/08/09/10 shapes: plain,
grouped, persistent, descriptor-persistent, warp-specialized, grouped GEMM, attention, block-scaled) under the
same compile-option matrix the verifier corpus uses: building the emulator's program dispatches each PTX
instruction to its family, so an instruction it cannot run fails here (UnsupportedInstructionError, with the
line), not in some later user's launch."""
from __future__ import annotations

import collections

import pytest

import bwtriton
from bwtriton.emu.integration.run import kernel_image as load_image
from fixtures import upstream_style as us
from test_verify_upstream_corpus import POINTS, TRITON_FAILS, _id

pytestmark = pytest.mark.emulated


@pytest.mark.parametrize("point", POINTS, ids=[_id(p) for p in POINTS])
def test_emulator_decodes_every_instruction(point):
    case, div16, stages, warps, ctas = point
    if (case, ctas) in TRITON_FAILS:
        pytest.skip("Triton 3.6 cannot compile this point (see TRITON_FAILS)")
    result = bwtriton.compile(us.CASES[case][0], **us.options(case, div16, stages, warps, ctas))
    image = load_image(result.asm["ptx"])  # raises UnsupportedInstructionError naming the line
    opcodes = collections.Counter(ins.opcode for ins in image.fn.instructions)
    assert opcodes["tcgen05.mma"] >= 1 and len(image.prog.code) == len(image.fn.instructions) + 1
