"""Host overhead rows: wall time per call of each bwtriton entry point and of its torch peer, on problems small
enough that the GPU never holds the loop back, so the number is what Python, validation and the launch cost.
Goal (issue 16): <= 20 us per call for matmul, nvfp4_decode_matmul and nvfp4_linear.
"""
from __future__ import annotations

import os
import sys
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _timing import host_us  # noqa: E402

#: Per-call goal for the bwtriton rows (us).
HOST_TARGET_US = 20.0


def _cases() -> list[tuple[str, Callable, str, Callable]]:
    """(our name, our call, peer name, peer call) on GPU-cheap problems."""
    import torch

    from bwtriton.formats import quantize_nvfp4
    from bwtriton.kernels import matmul, nvfp4_decode_matmul, nvfp4_linear, nvfp4_matmul
    torch.manual_seed(0)
    a = torch.randn(128, 128, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(128, 128, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(256, 256, device="cuda")
    w_q, w_bf16 = quantize_nvfp4(w), w.to(torch.bfloat16)
    x1 = torch.randn(1, 256, device="cuda", dtype=torch.bfloat16)
    x16 = torch.randn(16, 256, device="cuda", dtype=torch.bfloat16)
    a_q = quantize_nvfp4(torch.randn(128, 256, device="cuda"))
    gs = float(x16.float().abs().max()) / 2688
    return [
        ("matmul bf16 128^3", lambda: matmul(a, b), "torch.matmul", lambda: torch.matmul(a, b)),
        ("nvfp4_decode_matmul M=1 N=K=256", lambda: nvfp4_decode_matmul(x1, w_q), "torch.matmul bf16",
         lambda: torch.matmul(x1, w_bf16.T)),
        ("nvfp4_linear M=16 N=K=256 (calibrated x scale)", lambda: nvfp4_linear(x16, w_q, x_global_scale=gs),
         "torch.nn.functional.linear bf16", lambda: torch.nn.functional.linear(x16, w_bf16)),
        ("nvfp4_linear M=16 N=K=256 (x scale from amax)", lambda: nvfp4_linear(x16, w_q),
         "torch.nn.functional.linear bf16", lambda: torch.nn.functional.linear(x16, w_bf16)),
        ("nvfp4_matmul 128x256x256", lambda: nvfp4_matmul(a_q, w_q), "torch.matmul bf16",
         lambda: torch.matmul(a_q.dequantize(torch.bfloat16), w_bf16.T)),
    ]


def host_rows(calls: int = 2000) -> list[dict]:
    """Measure every case; one dict per case with 'us_ours', 'us_peer' and whether ours meets the goal."""
    rows = []
    for name, ours, peer_name, peer in _cases():
        try:
            us_ours, us_peer = host_us(ours, calls=calls), host_us(peer, calls=calls)
            rows.append({"case": name, "us_ours": us_ours, "peer_name": peer_name, "us_peer": us_peer,
                         "target_us": HOST_TARGET_US if "nvfp4_matmul" not in name else None})
        except Exception as exc:  # noqa: BLE001 - one broken entry point must not hide the others
            rows.append({"case": name, "error": f"{type(exc).__name__}: {exc}"[:160]})
        print(f"host overhead {name}: {rows[-1].get('us_ours', float('nan')):.1f} us/call "
              f"(peer {rows[-1].get('us_peer', float('nan')):.1f})", flush=True)
    return rows


def host_markdown(rows: list[dict]) -> str:
    """The host rows as a markdown table."""
    out = ["| entry point | us/call ours | peer | us/call peer | goal |", "|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['case']} | ERROR | | | {r['error']} |")
            continue
        goal = "-" if r["target_us"] is None else \
            f"<={r['target_us']:g} {'ok' if r['us_ours'] <= r['target_us'] else 'MISS'}"
        out.append(f"| {r['case']} | {r['us_ours']:.1f} | {r['peer_name']} | {r['us_peer']:.1f} | {goal} |")
    return "\n".join(out) + "\n"
