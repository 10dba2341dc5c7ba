"""fla-org/flash-linear-attention#1228, "`chunk_fwd_kernel_o` is non-deterministic at `num_warps=8` on GB300
(sm_103): production-reproducible at BK=BV=128, standalone only at BK=BV=32"; worked around by
fla-org/flash-linear-attention#1229 (no 8-warp config on Blackwell).

Symptom: the chunked output kernel of gated delta rule returns different bits for identical inputs with 8 warps,
3 stages; in GRPO training 13-23% of tokens changed MoE routes between two forwards of the same batch.

Reproducer, written from the description: per 64-token chunk, o = q @ h and A = q @ k^T are accumulated over K
blocks (two 64-row accumulators), A is gated, masked causally and cast to bf16 in registers, and o += A @ v
reads that register-computed tile through shared memory.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def chunk_o_kernel(q_ptr, k_ptr, v_ptr, h_ptr, g_ptr, o_ptr, scale, K: tl.constexpr, V: tl.constexpr,
                   BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    """o[chunk] = scale * (q @ h * exp(g) + causal(q @ k^T * exp(g_i - g_j)) @ v) for one chunk, value block."""
    i_v = tl.program_id(0)
    i_t = tl.program_id(1)
    rows = i_t * BT + tl.arange(0, BT)
    cols = i_v * BV + tl.arange(0, BV)
    rk = tl.arange(0, BK)
    b_o = tl.zeros([BT, BV], dtype=tl.float32)
    b_a = tl.zeros([BT, BT], dtype=tl.float32)
    for i_k in range(K // BK):
        kk = i_k * BK + rk
        q = tl.load(q_ptr + rows[:, None] * K + kk[None, :])
        kt = tl.load(k_ptr + rows[None, :] * K + kk[:, None])
        h = tl.load(h_ptr + i_t * K * V + kk[:, None] * V + cols[None, :])
        b_o += tl.dot(q, h)
        b_a += tl.dot(q, kt)
    g = tl.load(g_ptr + rows)
    b_o = b_o * tl.exp(g)[:, None]
    b_a = b_a * tl.exp(g[:, None] - g[None, :])
    causal = tl.arange(0, BT)[:, None] >= tl.arange(0, BT)[None, :]
    b_a = tl.where(causal, b_a, 0.)
    v = tl.load(v_ptr + rows[:, None] * V + cols[None, :])
    b_o = b_o * scale + tl.dot(b_a.to(v.dtype), v) * scale
    tl.store(o_ptr + rows[:, None] * V + cols[None, :], b_o.to(o_ptr.dtype.element_ty))


BWTRITON_SPECS = {"chunk_o_kernel": {
    "signature": {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "h_ptr": "*bf16", "g_ptr": "*fp32",
                  "o_ptr": "*bf16", "scale": "fp32"},
    "constexprs": {"K": 64, "V": 64, "BT": 64, "BK": 32, "BV": 32},
    "num_warps": 8, "num_stages": 3}}
CASE = {"report": "fla-org/flash-linear-attention#1228", "also": ["fla-org/flash-linear-attention#1229"],
        "kernel": "chunk_o_kernel", "reach": "ptx"}


def emulate_launch():
    """(grid, args, check): one chunk of 64 tokens, two value blocks."""
    T, K, V = 64, 64, 64
    g = torch.Generator().manual_seed(5)
    q, k = ((torch.randn(T, K, generator=g) / 4).bfloat16() for _ in range(2))
    v = torch.randn(T, V, generator=g).bfloat16()
    h = (torch.randn(1, K, V, generator=g) / 4).bfloat16()
    gate = -torch.rand(T, generator=g).cumsum(0) / 32
    o = torch.zeros(T, V).bfloat16()

    def check() -> bool:
        a = (q.float() @ k.float().T) * torch.exp(gate[:, None] - gate[None, :])
        a = torch.tril(a).bfloat16().float()
        ref = 0.5 * ((q.float() @ h[0].float()) * torch.exp(gate)[:, None] + a @ v.float())
        # bf16 A tile and output over 64-term sums: 2e-2 relative covers the two roundings
        return torch.allclose(o.float(), ref, atol=5e-2, rtol=2e-2)
    return (2, 1), [q, k, v, h, gate, o, 0.5], check
