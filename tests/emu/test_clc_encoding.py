"""The emulator's try_cancel response encoding is the one ptxas-blackwell's own `query_cancel` decoding reads:
assemble a decode of every field for sm_100a, find in the SASS which bits of the 16-byte LDS.128 each field
comes from, and compare with `bwtriton.emu.isa.clc._response` (plus the emulator's decoder on that response)."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from bwtriton.emu.isa.clc import _response

_BIN = Path(__import__("triton").__file__).parent / "backends" / "nvidia" / "bin"
_PTX = """.version 8.7
.target sm_100a
.address_size 64
.visible .entry decode(.param .u64 out)
.reqntid 32, 1, 1
{
  .reg .b32 %r<6>;
  .reg .b64 %rd<2>;
  .reg .pred %p;
  .reg .b128 %q;
  .shared .align 16 .b8 resp[16];
  ld.param.u64 %rd1, [out];
  ld.shared.b128 %q, [resp];
  clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 %p, %q;
  clusterlaunchcontrol.query_cancel.get_first_ctaid::x.b32.b128 %r1, %q;
  clusterlaunchcontrol.query_cancel.get_first_ctaid::y.b32.b128 %r2, %q;
  clusterlaunchcontrol.query_cancel.get_first_ctaid::z.b32.b128 %r3, %q;
  selp.b32 %r4, 1, 0, %p;
  st.global.v4.b32 [%rd1], {%r1, %r2, %r3, %r4};
  ret;
}
"""


def _sass(tmp_path: Path) -> str:
    ptx, cubin = tmp_path / "decode.ptx", tmp_path / "decode.cubin"
    ptx.write_text(_PTX)
    subprocess.run([str(_BIN / "ptxas-blackwell"), "-arch=sm_100a", str(ptx), "-o", str(cubin)], check=True)
    return subprocess.run([str(_BIN / "cuobjdump"), "-sass", str(cubin)], check=True, capture_output=True,
                          text=True).stdout


@pytest.mark.skipif(not (_BIN / "ptxas-blackwell").exists(), reason="Triton's ptxas-blackwell is not bundled")
def test_emulator_encoding_matches_ptxas_decode(tmp_path):
    sass = _sass(tmp_path)
    base = int(re.search(r"LDS\.128 R(\d+)", sass).group(1))       # words 0..3 land in R(base)..R(base+3)
    word = {f"R{base + i}": i for i in range(4)}
    out = int(re.search(r"STG\.E\.128 desc\[UR\d+\]\[R\d+\.64\], R(\d+)", sass).group(1))  # x, y, z, canceled
    x_src = re.search(rf"MOV R{out}, (R\d+)", sass).group(1)
    y_src = re.search(rf"LOP3\.LUT R{out + 1}, (R\d+), 0xffff, RZ, 0xc0", sass).group(1)
    z_src = re.search(rf"SHF\.R\.U32\.HI R{out + 2}, RZ, 0x10, (R\d+)", sass).group(1)
    canceled = re.search(r"LOP3\.LUT P\d, RZ, (R\d+), 0x1, RZ, 0xc0", sass).group(1)
    # x = word 0, y = low half of word 1, z = its high half, canceled = bit 0 of word 2
    assert (word[x_src], word[y_src], word[z_src], word[canceled]) == (0, 1, 1, 2)

    words = _response((5, 3, 2), nctas=2).view(np.uint32)
    assert (words[0], words[1] & 0xFFFF, words[1] >> 16, words[2] & 1) == (10, 3, 2, 1)  # x in CTAs: 5 * 2
    assert _response(None, nctas=1).view(np.uint32)[2] & 1 == 0
