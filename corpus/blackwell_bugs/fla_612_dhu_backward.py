"""fla-org/flash-linear-attention#612, "[Bug] GatedDeltaNet backward error on B200" (labelled triton-bug).

Symptom: compiling the chunked gated-delta-rule backward state kernel (`..._bwd_kernel_dhu_blockdim64`) for B200
aborts the process in Triton's TMEM-allocation hoisting: "Failed to hoist tmem_store", UNREACHABLE executed at
HoistTMEMAlloc.cpp (Triton 3.4/3.5 era); the same family of abort was reported from PyTorch's flex attention
backward (pytorch/pytorch#160227). A compiler crash, not wrong code: the question for each Triton we support is
whether it still aborts, and whether what it emits when it does not is sound.

Reproducer, written from the description: the state gradient dh[128, BV] walks the chunks backwards as two
64-row accumulators; each step stores dh, forms dv = k @ dh + dv_in in registers, and updates
dh = exp(g_last) dh + q^T @ do - w^T @ dv, so the register tile dv feeds two dots of the same step.
"""
import torch
import triton
import triton.language as tl


@triton.jit(do_not_specialize=["T"])
def dhu_backward_kernel(q_ptr, k_ptr, w_ptr, do_ptr, dv_ptr, g_ptr, dh_ptr, dv2_ptr, T, K: tl.constexpr,
                        V: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr):
    """Backward over chunks: store dh_t; dv2 = k @ dh_t + dv; dh_{t-1} = e^{g_last} dh_t + q^T do - w^T dv2."""
    i_v = tl.program_id(0)
    cols = i_v * BV + tl.arange(0, BV)
    r64 = tl.arange(0, 64)
    rt = tl.arange(0, BT)
    dh_top = tl.zeros([64, BV], dtype=tl.float32)
    dh_bot = tl.zeros([64, BV], dtype=tl.float32)
    for i in range(tl.cdiv(T, BT)):
        t = tl.cdiv(T, BT) - 1 - i
        base = dh_ptr + t * K * V
        tl.store(base + r64[:, None] * V + cols[None, :], dh_top.to(tl.bfloat16))
        tl.store(base + (64 + r64)[:, None] * V + cols[None, :], dh_bot.to(tl.bfloat16))
        rows = t * BT + rt
        k_top = tl.load(k_ptr + rows[:, None] * K + r64[None, :])
        k_bot = tl.load(k_ptr + rows[:, None] * K + 64 + r64[None, :])
        dv = tl.dot(k_top, dh_top.to(tl.bfloat16)) + tl.dot(k_bot, dh_bot.to(tl.bfloat16))
        dv += tl.load(dv_ptr + rows[:, None] * V + cols[None, :]).to(tl.float32)
        tl.store(dv2_ptr + rows[:, None] * V + cols[None, :], dv.to(tl.bfloat16))
        g_last = tl.load(g_ptr + t * BT + BT - 1)
        do = tl.load(do_ptr + rows[:, None] * V + cols[None, :])
        dv_b = dv.to(tl.bfloat16)
        qt_top = tl.load(q_ptr + rows[None, :] * K + r64[:, None])
        qt_bot = tl.load(q_ptr + rows[None, :] * K + 64 + r64[:, None])
        wt_top = tl.load(w_ptr + rows[None, :] * K + r64[:, None])
        wt_bot = tl.load(w_ptr + rows[None, :] * K + 64 + r64[:, None])
        dh_top = dh_top * tl.exp(g_last) + tl.dot(qt_top, do) - tl.dot(wt_top, dv_b)
        dh_bot = dh_bot * tl.exp(g_last) + tl.dot(qt_bot, do) - tl.dot(wt_bot, dv_b)


BWTRITON_SPECS = {"dhu_backward_kernel": {
    "signature": {"q_ptr": "*bf16", "k_ptr": "*bf16", "w_ptr": "*bf16", "do_ptr": "*bf16", "dv_ptr": "*bf16",
                  "g_ptr": "*fp32", "dh_ptr": "*bf16", "dv2_ptr": "*bf16", "T": "i32"},
    "constexprs": {"K": 128, "V": 64, "BT": 64, "BV": 64},
    "num_warps": 4, "num_stages": 2}}
CASE = {"report": "fla-org/flash-linear-attention#612", "also": ["pytorch/pytorch#160227"],
        "kernel": "dhu_backward_kernel", "reach": "ptx"}


def emulate_launch():
    """(grid, args, check): two chunks of 64 steps, one value block of 64."""
    T, K, V = 128, 128, 64
    g = torch.Generator().manual_seed(7)
    q, k, w = ((torch.randn(T, K, generator=g) / 8).bfloat16() for _ in range(3))
    do, dv = (torch.randn(T, V, generator=g).bfloat16() for _ in range(2))
    gate = -torch.rand(T, generator=g).cumsum(0) / 64
    dh = torch.zeros(T // 64, K, V).bfloat16()
    dv2 = torch.zeros(T, V).bfloat16()

    def check() -> bool:
        state = torch.zeros(K, V)
        ref_dh, ref_dv = [None, None], [None, None]
        for t in (1, 0):
            s = slice(64 * t, 64 * t + 64)
            hb = state.bfloat16().float()
            ref_dh[t] = hb
            d = k[s].float() @ hb + dv[s].float()
            ref_dv[t] = d
            state = (state * torch.exp(gate[64 * t + 63]) + q[s].float().T @ do[s].float()
                     - w[s].float().T @ d.bfloat16().float())
        # bf16 outputs of fp32 sums over 64-128 terms: 2e-2 relative covers the roundings
        return (torch.allclose(dh.float(), torch.stack(ref_dh), atol=5e-2, rtol=2e-2)
                and torch.allclose(dv2.float(), torch.cat(ref_dv), atol=5e-2, rtol=2e-2))
    return (1,), [q, k, w, do, dv, gate, dh, dv2, T], check
