"""triton-lang/triton#9871, "tl.dot non-determinism with num_warps=4, BV=32 and dynamic loop bounds on Blackwell
(sm_100)"; closed as fixed by triton-lang/triton#9615 ("[MultiCTA][Membar] Add fence + cluster relaxed
automatically", in 3.7), with the regression test of triton-lang/triton#10075.

Symptom: a chunked recurrence whose trip count is read from memory (the variable-length path: sequence offsets
in a tensor) returns different bits between identical calls on B200 with 4 warps, BV = 32 and 2-3 stages (mean
abs error ~1e5 on 3.6.0); fixed configs are deterministic, Hopper is fine. The bisect in the report counts 28
`bar.sync` in the PTX before the fix and 32 after.

Reproducer, written from the description: one 64 x 32 fp32 state carried across a loop whose bounds come from a
`cu_seqlens` tensor; each step stores the state, corrects the values with it, and updates it with a dot whose B
operand is the corrected bf16 tile.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def varlen_recurrence_kernel(cu_ptr, k_ptr, w_ptr, v_ptr, h_ptr, K: tl.constexpr, V: tl.constexpr,
                             BT: tl.constexpr, BV: tl.constexpr):
    """Per sequence n and value block: h_{t+1} = h_t + k_t^T @ (v_t - w_t @ h_t); h_t stored per chunk."""
    i_v = tl.program_id(0)
    i_n = tl.program_id(1)
    bos = tl.load(cu_ptr + i_n)
    eos = tl.load(cu_ptr + i_n + 1)
    first_chunk = bos // BT
    cols = i_v * BV + tl.arange(0, BV)
    rk = tl.arange(0, K)
    rt = tl.arange(0, BT)
    h = tl.zeros([K, BV], dtype=tl.float32)
    for t in range(tl.cdiv(eos - bos, BT)):
        tl.store(h_ptr + (first_chunk + t) * K * V + rk[:, None] * V + cols[None, :], h.to(tl.bfloat16))
        rows = bos + t * BT + rt
        mask = rows < eos
        w = tl.load(w_ptr + rows[:, None] * K + rk[None, :], mask=mask[:, None], other=0.)
        v = tl.load(v_ptr + rows[:, None] * V + cols[None, :], mask=mask[:, None], other=0.)
        v_new = v.to(tl.float32) - tl.dot(w, h.to(tl.bfloat16))
        kt = tl.load(k_ptr + rows[None, :] * K + rk[:, None], mask=mask[None, :], other=0.)
        h += tl.dot(kt, v_new.to(tl.bfloat16))


BWTRITON_SPECS = {"varlen_recurrence_kernel": {
    "signature": {"cu_ptr": "*i32", "k_ptr": "*bf16", "w_ptr": "*bf16", "v_ptr": "*bf16", "h_ptr": "*bf16"},
    "constexprs": {"K": 64, "V": 64, "BT": 64, "BV": 32},
    "num_warps": 4, "num_stages": 2}}
CASE = {"report": "triton-lang/triton#9871", "also": ["triton-lang/triton#9615", "triton-lang/triton#10075"],
        "kernel": "varlen_recurrence_kernel", "reach": "ptx"}


def emulate_launch():
    """(grid, args, check): two sequences of 64 and 128 tokens (chunk-aligned), two value blocks."""
    K, V, lens = 64, 64, (64, 128)
    T = sum(lens)
    g = torch.Generator().manual_seed(1)
    cu = torch.tensor([0, lens[0], T], dtype=torch.int32)
    k = (torch.randn(T, K, generator=g) / 8).bfloat16()
    w = (torch.randn(T, K, generator=g) / 8).bfloat16()
    v = torch.randn(T, V, generator=g).bfloat16()
    h = torch.zeros(T // 64, K, V).bfloat16()

    def check() -> bool:
        ref = []
        for n in range(len(lens)):
            state = torch.zeros(K, V)
            for t0 in range(int(cu[n]), int(cu[n + 1]), 64):
                hb = state.bfloat16().float()
                ref.append(hb)
                vn = v[t0:t0 + 64].float() - w[t0:t0 + 64].float() @ hb
                state = state + k[t0:t0 + 64].float().T @ vn.bfloat16().float()
        # bf16 outputs of fp32 sums over 64-128 terms: 2e-2 relative covers the roundings
        return torch.allclose(h.float(), torch.stack(ref), atol=5e-2, rtol=2e-2)
    return (2, 2), [cu, k, w, v, h], check
