"""triton-lang/triton#10590, "sm_103 (B300): `tl.dot` chunked-recurrence kernel is non-deterministic with
num_warps in {4, 8}, num_stages in {2, 3} -- reproduces on Triton 3.7.0" (also fla-org/flash-linear-attention#945,
the same kernel reported against FLA's chunk_gated_delta_rule forward).

Symptom: the gated-delta-rule forward state kernel returns different bits on each call with identical inputs on
Blackwell with 4 warps and 2-3 stages; 2 warps is deterministic and Hopper is fine.

Reproducer, written from the description: the state h[128, BV] is carried across a sequential loop over chunks
as two 64-row fp32 accumulators; each iteration computes a bf16 tile (the corrected values) in registers and
feeds it to the two state-update dots of the same iteration (rows past T masked, as FLA's boundary checks do).
Triton stores that tile to shared memory with generic-proxy `st.shared`; the `tcgen05.mma` reads it through the
async proxy, so every iteration needs a `fence.proxy.async` between the two.
"""
import torch
import triton
import triton.language as tl


@triton.jit(do_not_specialize=["T"])
def fwd_h_kernel(k_ptr, w_ptr, v_ptr, g_ptr, h_ptr, vnew_ptr, T,
                 K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr):
    """Per chunk: store h, v_new = v - w @ h, then h = exp(g_last) h + k^T @ (decayed v_new), h as 2 x 64 rows."""
    i_v = tl.program_id(0)
    cols = i_v * BV + tl.arange(0, BV)
    r64 = tl.arange(0, 64)
    h_top = tl.zeros([64, BV], dtype=tl.float32)
    h_bot = tl.zeros([64, BV], dtype=tl.float32)
    for t in range(tl.cdiv(T, BT)):
        base = h_ptr + t * K * V
        tl.store(base + r64[:, None] * V + cols[None, :], h_top.to(tl.bfloat16))
        tl.store(base + (64 + r64)[:, None] * V + cols[None, :], h_bot.to(tl.bfloat16))
        rows = t * BT + tl.arange(0, BT)
        live = rows < T
        w_top = tl.load(w_ptr + rows[:, None] * K + r64[None, :], mask=live[:, None], other=0.)
        w_bot = tl.load(w_ptr + rows[:, None] * K + 64 + r64[None, :], mask=live[:, None], other=0.)
        acc = tl.dot(w_top, h_top.to(tl.bfloat16))
        acc += tl.dot(w_bot, h_bot.to(tl.bfloat16))
        v = tl.load(v_ptr + rows[:, None] * V + cols[None, :], mask=live[:, None], other=0.)
        v_new = v.to(tl.float32) - acc
        tl.store(vnew_ptr + rows[:, None] * V + cols[None, :], v_new.to(tl.bfloat16), mask=live[:, None])
        g_last = tl.load(g_ptr + min((t + 1) * BT, T) - 1)
        g = tl.load(g_ptr + rows, mask=live, other=0.)
        v_new = v_new * tl.exp(g_last - g)[:, None]
        h_top *= tl.exp(g_last)
        h_bot *= tl.exp(g_last)
        v_b = v_new.to(tl.bfloat16)
        kt_top = tl.load(k_ptr + rows[None, :] * K + r64[:, None], mask=live[None, :], other=0.)
        kt_bot = tl.load(k_ptr + rows[None, :] * K + 64 + r64[:, None], mask=live[None, :], other=0.)
        h_top += tl.dot(kt_top, v_b)
        h_bot += tl.dot(kt_bot, v_b)

BWTRITON_SPECS = {"fwd_h_kernel": {
    "signature": {"k_ptr": "*bf16", "w_ptr": "*bf16", "v_ptr": "*bf16", "g_ptr": "*fp32", "h_ptr": "*bf16",
                  "vnew_ptr": "*bf16", "T": "i32"},
    "constexprs": {"K": 128, "V": 128, "BT": 64, "BV": 64},
    "num_warps": 4, "num_stages": 2}}
CASE = {"report": "triton-lang/triton#10590", "also": ["fla-org/flash-linear-attention#945"],
        "kernel": "fwd_h_kernel", "reach": "ptx"}


def emulate_launch():
    """(grid, args, check): two chunks of 64 steps, two value blocks; check compares h and v_new with torch."""
    T, K, V = 128, 128, 128
    g = torch.Generator().manual_seed(0)
    k = (torch.randn(T, K, generator=g) / 8).bfloat16()
    w = (torch.randn(T, K, generator=g) / 8).bfloat16()
    v = torch.randn(T, V, generator=g).bfloat16()
    gate = -torch.rand(T, generator=g).cumsum(0) / 64
    h = torch.zeros(T // 64, K, V).bfloat16()
    v_new = torch.zeros(T, V).bfloat16()

    def check() -> bool:
        ref_h, ref_v = _reference(k.float(), w.float(), v.float(), gate)
        # bf16 outputs of fp32 sums over 128 terms: 2e-2 relative is the output rounding and the bf16 re-rounding
        return (torch.allclose(h.float(), ref_h, atol=5e-2, rtol=2e-2)
                and torch.allclose(v_new.float(), ref_v, atol=5e-2, rtol=2e-2))
    return (2,), [k, w, v, gate, h, v_new, T], check


def _reference(k, w, v, gate, bt: int = 64):
    """The recurrence in float32 with the kernel's bf16 roundings of h and of the corrected values."""
    T, K = k.shape
    h = torch.zeros(K, v.shape[1])
    hs, vs = [], []
    for t0 in range(0, T, bt):
        hb = h.bfloat16().float()
        hs.append(hb)
        vn = v[t0:t0 + bt] - w[t0:t0 + bt] @ hb
        vs.append(vn)
        g = gate[t0:t0 + bt]
        vn = vn * torch.exp(g[-1] - g)[:, None]
        h = h * torch.exp(g[-1]) + k[t0:t0 + bt].T @ vn.bfloat16().float()
    return torch.stack(hs), torch.cat(vs)
