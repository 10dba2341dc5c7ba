"""fla-org/flash-linear-attention#999, "[Bug] B200/Blackwell gated delta rule backward can hang during
prepare_wy_repr_bwd autotune"; worked around by pinning the kernel to num_warps=2 on Blackwell
(fla-org/flash-linear-attention#1000; unslothai/unsloth-zoo#1180 notes the report was on Triton 3.3.1).

Symptom: long-sequence backward of a Qwen3.5 gated-delta-rule model hangs on B200 inside the autotuner of
`prepare_wy_repr_bwd`, with the 4-warp configurations; 2 warps finish. A hang on a GPU is an mbarrier wait that
never completes, or a named barrier some warps never reach.

Reproducer, written from the description: the WY-representation backward for one 64-token chunk: dA accumulates
dw @ (k * beta)^T over K blocks while dk = A^T @ dw is stored per block, then dA is masked, transformed by the
chunk's A on both sides in registers, and fed back to dots: several register-computed tiles reach the tensor
core through shared memory, with 4 warps.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def wy_repr_backward_kernel(k_ptr, beta_ptr, a_ptr, dw_ptr, dk_ptr, da_ptr, K: tl.constexpr, BT: tl.constexpr,
                            BK: tl.constexpr):
    """dk = (A^T dw) * beta per K block; dA = -A^T (strict-lower(dw (k beta)^T)) A^T, stored."""
    i_t = tl.program_id(0)
    rows = i_t * BT + tl.arange(0, BT)
    rt = tl.arange(0, BT)
    rk = tl.arange(0, BK)
    beta = tl.load(beta_ptr + rows)
    a = tl.load(a_ptr + i_t * BT * BT + rt[:, None] * BT + rt[None, :])
    d_a = tl.zeros([BT, BT], dtype=tl.float32)
    for i_k in range(K // BK):
        kk = i_k * BK + rk
        kb = (tl.load(k_ptr + rows[:, None] * K + kk[None, :]) * beta[:, None]).to(tl.bfloat16)
        dw = tl.load(dw_ptr + rows[:, None] * K + kk[None, :])
        d_a += tl.dot(dw, tl.trans(kb))
        dk = tl.dot(tl.trans(a), dw) * beta[:, None]
        tl.store(dk_ptr + rows[:, None] * K + kk[None, :], dk.to(tl.bfloat16))
    strict = rt[:, None] > rt[None, :]
    d_a = tl.where(strict, d_a, 0.)
    d_a = tl.dot(d_a.to(tl.bfloat16), tl.trans(a))
    d_a = tl.dot(tl.trans(a), d_a.to(tl.bfloat16))
    d_a = tl.where(strict, -d_a, 0.)
    tl.store(da_ptr + i_t * BT * BT + rt[:, None] * BT + rt[None, :], d_a)


BWTRITON_SPECS = {"wy_repr_backward_kernel": {
    "signature": {"k_ptr": "*bf16", "beta_ptr": "*bf16", "a_ptr": "*bf16", "dw_ptr": "*bf16", "dk_ptr": "*bf16",
                  "da_ptr": "*fp32"},
    "constexprs": {"K": 128, "BT": 64, "BK": 64},
    "num_warps": 4, "num_stages": 3}}
CASE = {"report": "fla-org/flash-linear-attention#999", "also": ["fla-org/flash-linear-attention#1000"],
        "kernel": "wy_repr_backward_kernel", "reach": "ptx"}


def emulate_launch():
    """(grid, args, check): one chunk of 64 tokens, K = 128 (two K blocks)."""
    T, K, BT = 64, 128, 64
    g = torch.Generator().manual_seed(8)
    k, dw = ((torch.randn(T, K, generator=g) / 4).bfloat16() for _ in range(2))
    beta = torch.rand(T, generator=g).bfloat16()
    a = torch.tril(torch.randn(BT, BT, generator=g) / 8).bfloat16()
    dk = torch.zeros(T, K).bfloat16()
    da = torch.zeros(BT, BT)

    def check() -> bool:
        af = a.float()
        kb = (k.float() * beta.float()[:, None]).bfloat16().float()
        ref_dk = (af.T @ dw.float()) * beta.float()[:, None]
        m = torch.tril(dw.float() @ kb.T, -1).bfloat16().float()
        m = (m @ af.T).bfloat16().float()
        ref_da = torch.tril(-(af.T @ m), -1)
        # bf16 intermediate tiles (two re-roundings) over 64-128-term sums: 3e-2 relative
        return (torch.allclose(dk.float(), ref_dk, atol=5e-2, rtol=3e-2)
                and torch.allclose(da, ref_da, atol=5e-2, rtol=3e-2))
    return (1,), [k, beta, a, dw, dk, da], check
