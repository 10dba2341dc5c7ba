"""MoE expert GEMMs (`bwtriton.kernels.moe`) against a float64 reference on ragged routings.

Routing and permutation are checked on the CPU; the grouped GEMMs run on the emulated B200 (sm_100a,
'block_scaled' path: tcgen05 block-scaled MMAs) and, marked gpu, on a CUDA GPU (the 'dequant' path on Hopper).

The reference is computed here, per (token, expert) pair in float64, from `QuantizedTensor.dequantize` of the
weights and, on the block-scaled path, of the activations quantized with `bwtriton.formats` (the bit-exact twins
of the in-kernel quantizers). Bounds: the products are exact, so what remains is fp32 accumulation
(K 2^-23 sum|a||w|), the bf16 rounding of h (2^-8 relative), tl.exp's ~2^-21 relative error in the activation,
and for the down projection, fp32 output rounding. Stage 2 is checked from the kernel's own h, so that a one-ulp
difference in bf16 h cannot move an NVFP4 code of the re-quantized h."""
from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

import bwtriton  # noqa: E402
from bwtriton.errors import InputError  # noqa: E402
from bwtriton.formats import (QuantizedTensor, nvfp4_global_encode_scale, quantize_mxfp8,  # noqa: E402
                              quantize_nvfp4_with_encode_scale)
from bwtriton.kernels import moe, moe_routing  # noqa: E402
from bwtriton.models import quantize_moe_weights  # noqa: E402

E, HIDDEN, INTER = 4, 128, 128
ROUTINGS = {
    # expert 2 gets one token, every other expert several: ragged groups, tiles with 1..4 valid rows
    "ragged": [[0, 1], [1, 3], [0, 3], [3, 1], [1, 0], [2, 0]],
    # k = 1, every token on expert 2: experts 0, 1, 3 are empty
    "one_expert": [[2]] * 6,
}


def _setup(fmt: str, routing: str, seed: int = 0, bias: bool = False, activation: str = "silu",
           hidden: int = HIDDEN, inter: int = INTER):
    gen = torch.Generator().manual_seed(seed)
    gu = torch.randn(E, 2 * inter, hidden, generator=gen) * 0.1
    dn = torch.randn(E, hidden, inter, generator=gen) * 0.1
    biases = {}
    if bias:
        biases = dict(gate_up_bias=torch.randn(E, 2 * inter, generator=gen) * 0.1,
                      down_bias=torch.randn(E, hidden, generator=gen) * 0.1)
    w = quantize_moe_weights(gu, dn, fmt, activation=activation, **biases)
    idx = torch.tensor(ROUTINGS[routing])
    x = torch.randn(idx.shape[0], hidden, generator=gen).bfloat16()
    wts = torch.rand(idx.shape, generator=gen) + 0.1
    return x, idx, wts, w


def _on(w: moe.MoEWeights, device: str) -> moe.MoEWeights:
    fields = {f.name: getattr(w, f.name) for f in dataclasses.fields(w)}
    return moe.MoEWeights(**{k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in fields.items()})


def _dequant(data, scales, glob, fmt, k=None):
    """float64 expert weights [E, rows, K] including the per-tensor scale (per row half for gate/up); the
    kernel's K padding cut at k."""
    e, rows, kh = data.shape
    s = scales if fmt == "nvfp4" else scales.view(torch.float8_e8m0fnu)
    q = QuantizedTensor(data=data, scales=s, scale_layout="plain", global_scale=None, format=fmt,
                        shape=(e, rows, 2 * kh)).dequantize(torch.float64)
    per_row = glob.double().repeat_interleave(rows // glob.shape[1], 1) if glob.dim() == 2 else glob.double()[:, None]
    return (q * per_row.unsqueeze(-1))[..., :k]


def _activations(a: torch.Tensor, fmt: str, path: str) -> torch.Tensor:
    """A as the path's MMA sees it, float64: bf16 (dequant) or quantized with the in-kernel recipe."""
    if path == "dequant":
        return a.double()
    if fmt == "nvfp4":
        return quantize_nvfp4_with_encode_scale(a.float(), nvfp4_global_encode_scale(a)).dequantize(torch.float64)
    return quantize_mxfp8(a.float()).dequantize(torch.float64)


def _act(g, u, w):
    if w.activation == "silu":
        return g * torch.sigmoid(g) * u
    g, u = g.clamp(max=w.swiglu_limit), u.clamp(-w.swiglu_limit, w.swiglu_limit)
    return g * torch.sigmoid(w.swiglu_alpha * g) * (u + 1)


def _check(got, ref, bound, what):
    err = (got.double() - ref).abs()
    worst = (err / bound).max().item()
    assert worst <= 1.0, f"{what}: error {err.max().item():.3e} exceeds the bound by {worst:.2f}x"


def _assert_moe_matches(x, idx, wts, w, path):
    """Run the three stages and check each against the float64 reference; return the final output."""
    plan = moe_routing.plan_routing(idx, wts, w.num_experts, moe.pick_block_m(idx.numel(), w.num_experts, path))
    h = moe.moe_gate_up(x, plan, w, path)
    y = moe.moe_down(h, plan, w, path).cpu()
    out = moe_routing.unpermute(y.to(h.device), plan).cpu()
    x, idx, wts, w, h, inverse = x.cpu(), idx.cpu(), wts.cpu(), _on(w, "cpu"), h.cpu(), plan.inverse.cpu()
    gu = _dequant(w.gate_up_data, w.gate_up_scales, w.gate_up_global, w.fmt, w.hidden)
    dn = _dequant(w.down_data, w.down_scales, w.down_global, w.fmt, w.intermediate)
    xa = _activations(x, w.fmt, path)
    ha = _activations(h, w.fmt, path)
    tokens, k = idx.shape
    ref_out = torch.zeros(tokens, w.hidden, dtype=torch.float64)
    for t in range(tokens):
        for j in range(k):
            e, r = int(idx[t, j]), int(inverse[t * k + j])
            pre = gu[e] @ xa[t]
            pre_abs = gu[e].abs() @ xa[t].abs()
            if w.gate_up_bias is not None:
                pre = pre + w.gate_up_bias[e].double()
            g, u = pre[:w.intermediate], pre[w.intermediate:]
            h_ref = _act(g, u, w)
            acc = w.hidden * 2.0 ** -23 * pre_abs
            eg, eu = acc[:w.intermediate], acc[w.intermediate:]
            bound = (2.0 ** -8 + 2.0 ** -20) * h_ref.abs() + 1.2 * eg * (u.abs() + eu) + (g.abs() + eg) * eu + 1e-30
            _check(h[r], h_ref, bound, f"gate_up row {r} (token {t}, expert {e})")
            y_ref = dn[e] @ ha[r]
            if w.down_bias is not None:
                y_ref = y_ref + w.down_bias[e].double()
            y_ref = y_ref * float(wts[t, j])
            y_bound = 2.0 ** -22 * y_ref.abs() + w.intermediate * 2.0 ** -23 * (dn[e].abs() @ ha[r].abs()) \
                * float(wts[t, j]) + 1e-30
            _check(y[r], y_ref, y_bound, f"down row {r} (token {t}, expert {e})")
            ref_out[t] += y[r].double()
    assert torch.equal(out, ref_out.float().bfloat16()) or \
        (out.double() - ref_out).abs().max() <= 2.0 ** -8 * ref_out.abs().max()
    return out


# ------------------------------------------------------------------------------------------ routing (CPU)

@pytest.mark.parametrize("routing,block_m", [("ragged", 2), ("ragged", 16), ("one_expert", 4)])
def test_plan_routing_covers_every_row_once(routing, block_m):
    idx = torch.tensor(ROUTINGS[routing])
    wts = torch.rand(idx.shape)
    plan = moe_routing.plan_routing(idx, wts, E, block_m)
    flat = idx.reshape(-1)
    counts = torch.bincount(flat, minlength=E)
    assert plan.expert_end.tolist() == torch.cumsum(counts, 0).tolist()
    # row r holds pair inverse^-1(r): its token and weight, grouped by expert in token order
    pairs = torch.argsort(plan.inverse)
    assert torch.equal(plan.sorted_token.long(), pairs // idx.shape[1])
    assert torch.equal(plan.sorted_weight, wts.reshape(-1)[pairs])
    assert torch.equal(flat[pairs], torch.sort(flat, stable=True).values)
    covered = torch.zeros(flat.numel(), dtype=torch.int64)
    for e, r0 in zip(plan.tile_expert.tolist(), plan.tile_row.tolist()):
        end = int(plan.expert_end[e])
        if r0 < end:
            assert r0 >= end - int(counts[e])  # the tile starts inside its expert's rows
            covered[r0:min(r0 + block_m, end)] += 1
    assert covered.tolist() == [1] * flat.numel()
    assert plan.tile_expert.numel() == moe_routing.max_tiles(flat.numel(), E, block_m)


_PLAN_FIELDS = ("sorted_token", "sorted_weight", "inverse", "expert_end", "tile_expert", "tile_row")


@pytest.mark.emulated
@pytest.mark.usefixtures("emulated_b200")
def test_emulated_routing_kernel_equals_torch_plan():
    """The one-launch routing kernel (what decode uses on a GPU) gives the torch ops' plan exactly: ragged routings,
    empty experts (E = 5 leaves expert 4 empty; the skewed 60-expert router leaves most empty), several tile
    sizes."""
    gen = torch.Generator().manual_seed(6)
    logits = torch.randn(8, 60, generator=gen) + torch.where(torch.arange(60) < 6, 4.0, 0.0)
    skewed = moe_routing.route_topk(logits, 4)[::-1]
    cases = [(torch.tensor(ROUTINGS[r]), torch.rand(6, len(ROUTINGS[r][0]), generator=gen), e, bm)
             for r in ROUTINGS for e, bm in ((4, 2), (5, 16))] + [(*skewed, 60, 1)]
    for idx, wts, e, bm in cases:
        a = moe_routing.plan_routing(idx, wts, e, bm, method="kernel")
        b = moe_routing.plan_routing(idx, wts, e, bm, method="torch")
        for f in _PLAN_FIELDS:
            x, y = getattr(a, f), getattr(b, f)
            assert x.dtype == y.dtype and torch.equal(x, y), f"{f} differs for E={e}, block_m={bm}"


def test_routing_kernel_size_limit_is_an_input_error():
    idx = torch.zeros(1024, 8, dtype=torch.int64)
    with pytest.raises(InputError, match="method='torch'"):
        moe_routing.plan_routing(idx, torch.ones(1024, 8), 64, 64, method="kernel")
    assert moe_routing.plan_routing(idx, torch.ones(1024, 8), 64, 64).tile_expert.numel() == 1024 * 8 // 64 + 64


def test_route_topk_renormalizes():
    logits = torch.tensor([[0.0, 1.0, 2.0, -1.0]])
    w, i = moe_routing.route_topk(logits, 2)
    assert i.tolist() == [[2, 1]]
    p = torch.softmax(logits, -1)[0]
    assert torch.allclose(w, torch.stack((p[2], p[1])).unsqueeze(0) / (p[2] + p[1]))


def test_moe_input_errors():
    x, idx, wts, w = _setup("nvfp4", "ragged")
    with pytest.raises(InputError, match="x must be bf16"):
        moe.moe_experts(x.float(), idx, wts, w, path="dequant")
    with pytest.raises(InputError, match="path must be"):
        moe.moe_experts(x, idx, wts, w, path="cutlass")
    with pytest.raises(InputError, match=r"\[tokens, k\]"):
        moe_routing.plan_routing(idx.reshape(-1), wts, E, 16)
    odd = quantize_moe_weights(torch.randn(2, 128, 96), torch.randn(2, 96, 64), "mxfp4")
    with pytest.raises(InputError, match="hidden size 96 must be a multiple of 64"):
        moe.moe_experts(torch.zeros(2, 96, dtype=torch.bfloat16), idx[:2] % 2, wts[:2], odd, path="dequant")
    unpadded = quantize_moe_weights(torch.randn(2, 128, 192), torch.randn(2, 192, 64), "mxfp4")
    unpadded = dataclasses.replace(unpadded, down_data=unpadded.down_data[..., :32])
    with pytest.raises(InputError, match=r"down_data holds K=64 inputs for 64 features|padded"):
        moe.moe_experts(torch.zeros(2, 192, dtype=torch.bfloat16), idx[:2] % 2, wts[:2], unpadded, path="dequant")
    with pytest.raises(InputError, match="fmt must be"):
        quantize_moe_weights(torch.randn(2, 256, 128), torch.randn(2, 128, 128), "int4")


@pytest.mark.parametrize("fmt,bias,activation,hidden,inter", [("nvfp4", False, "silu", HIDDEN, INTER),
                                                               ("mxfp4", True, "swiglu_oai", 192, 64)])
def test_cpu_reference_op_matches_float64(fmt, bias, activation, hidden, inter):
    """The custom op's CPU path (what CPU-compiled models run) against the float64 per-pair reference; 192 / 64
    features exercise the zero padding of K to the 128-wide tile."""
    from bwtriton.models import _ops
    x, idx, wts, w = _setup(fmt, "ragged", bias=bias, activation=activation, hidden=hidden, inter=inter)
    assert w.gate_up_data.shape[-1] * 2 == -(-hidden // 128) * 128
    out = _ops.reference_experts(x, idx, wts, w)
    gu = _dequant(w.gate_up_data, w.gate_up_scales, w.gate_up_global, fmt, w.hidden)
    dn = _dequant(w.down_data, w.down_scales, w.down_global, fmt, w.intermediate)
    ref = torch.zeros(x.shape[0], hidden, dtype=torch.float64)
    for t in range(x.shape[0]):
        for j in range(idx.shape[1]):
            e = int(idx[t, j])
            pre = gu[e] @ x[t].double() + (w.gate_up_bias[e].double() if bias else 0)
            h = _act(pre[:inter], pre[inter:], w).float().bfloat16().double()
            ref[t] += (dn[e] @ h + (w.down_bias[e].double() if bias else 0)) * float(wts[t, j])
    assert (out.double() - ref).abs().max() <= 2.0 ** -7 * ref.abs().max()


# ----------------------------------------------------------------------------- sm_100a: compile + verifier

def _signature(fmt: str, gated: bool) -> dict[str, str]:
    scale = "fp8e4nv" if fmt == "nvfp4" else "u8"
    return {"a_ptr": "*bf16", "stride_a": "i32", "sorted_token": "*i32", "sorted_weight": "*fp32",
            "expert_end": "*i32", "tile_expert": "*i32", "tile_row": "*i32", "w_data": "*u8",
            "w_scales": f"*{scale}", "w_global": "*fp32", "bias_ptr": "*fp32", "s_enc_ptr": "*fp32",
            "out_ptr": "*bf16" if gated else "*fp32", "N": "i32", "K": "i32", "K_A": "i32", "act_alpha": "fp32",
            "act_limit": "fp32", "num_rows": "i32", "split_blocks": "i32"}


@pytest.mark.parametrize("fmt,gated,kind", [("nvfp4", True, "kind::mxf4nvf4.block_scale.scale_vec::4X"),
                                            ("mxfp4", False, "kind::mxf8f6f4.block_scale.scale_vec::1X")])
def test_sm100a_block_scaled_mma_and_verifier_clean(fmt, gated, kind):
    const = dict(FMT=fmt, PATH_SCALED=True, SWAP=False, GATED=gated, HAS_BIAS=True, ACT="silu", BLOCK_M=128,
                 BLOCK_N=64, BLOCK_K=128)
    c = bwtriton.compile(moe.moe_gemm_kernel, signature=_signature(fmt, gated), constexprs=const, target="sm_100a",
                         num_warps=8)
    mmas = [line for line in c.asm["ptx"].splitlines() if "tcgen05.mma" in line]
    assert mmas and all(kind in line for line in mmas)
    verify = c.reports["verify-tcgen05"]
    assert verify["counts"]["error"] == 0 and not [f for f in verify["findings"] if f.get("severity") == "error"]


# ------------------------------------------------------------------------------ shared memory, before launch

#: Expert layers of the models the benchmark runs (E, k, hidden, intermediate): Mixtral 8x7B, gpt-oss-20b,
#: Qwen1.5-MoE-A2.7B; token counts from decode to prefill.
LAYERS = [(8, 2, 4096, 14336), (32, 4, 2880, 2880), (60, 4, 2048, 1408)]
TOKENS = (1, 16, 64, 4096)
TARGET_PATHS = (("sm_90a", "dequant", 132), ("sm_100a", "block_scaled", 148))


def _picked_configs():
    """Every (target, path, fmt, gated, config) the host side launches for the layers and token counts above."""
    from bwtriton.targets import get_target
    seen = {}
    for target, path, sms in TARGET_PATHS:
        limit = get_target(target).max_shared_bytes
        for e, k, hidden, inter in LAYERS:
            for t in TOKENS:
                bm = moe.pick_block_m(t * k, e, path)
                for fmt in ("nvfp4", "mxfp4"):
                    for gated, n, kk in ((True, inter, hidden), (False, hidden, inter)):
                        kk = -(-kk // moe.K_TILE) * moe.K_TILE
                        cfg = moe.gemm_config(moe_routing.max_tiles(t * k, e, bm), bm, n, kk, gated, path, sms)
                        cfg = moe.fit_shared(cfg, fmt, path, gated, limit)
                        key = (target, path, fmt, gated, dataclasses.replace(cfg, split_k=1))
                        seen.setdefault(key, (t, cfg))
    return seen


def _tile_bytes(cfg, fmt: str, path: str, gated: bool) -> int:
    """The pipelined operand bytes alone, from the tile sizes: a floor under any correct bound."""
    w_cols = cfg.block_n * (2 if gated else 1)
    per_stage = w_cols * cfg.block_k // 2 + w_cols * cfg.block_k // (16 if fmt == "nvfp4" else 32)
    return cfg.num_stages * per_stage


def test_every_launched_config_fits_shared_memory_of_sm90a_and_sm100a():
    """Each config the host picks, compiled for its target on the CPU: the shared memory Triton allocates (its
    own count, not ours) is within the target's limit and within `moe.shared_bytes`, the bound the host checks
    before launching; and the bound is at least the pipelined weight tiles (stages x codes and scales)."""
    from bwtriton.targets import get_target
    configs = _picked_configs()
    assert {key[0] for key in configs} == {"sm_90a", "sm_100a"} and len(configs) >= 8
    for (target, path, fmt, gated, _), (t, cfg) in configs.items():
        limit = get_target(target).max_shared_bytes
        const = dict(FMT=fmt, PATH_SCALED=path == "block_scaled", SWAP=cfg.swap, GATED=gated, HAS_BIAS=True,
                     ACT="silu", BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k)
        c = bwtriton.compile(moe.moe_gemm_kernel, signature=_signature(fmt, gated), constexprs=const, target=target,
                             num_warps=cfg.num_warps, num_stages=cfg.num_stages, check_limits=False)
        need, bound = c.metadata["shared"], moe.shared_bytes(cfg, fmt, path, gated)
        what = f"{target} {path} {fmt} {'gate_up' if gated else 'down'} T={t} {cfg}"
        assert need <= limit, f"{what}: Triton allocates {need} B of shared memory, over the {limit} B limit"
        assert _tile_bytes(cfg, fmt, path, gated) <= need <= bound, f"{what}: need {need} B, bound {bound} B"


def test_routing_kernel_shared_memory_bound_and_fallback():
    """The routing kernel's shared memory (Triton's count, sm_90a) is within `routing_kernel_shared_bytes`; a
    prefill routing (4096 tokens, top-2 of 8: a 8192 x 16 table, 256 KiB by Triton's count) does not fit the
    227 KiB of sm_90a, so plan_routing takes the torch ops for it, and decode routings fit."""
    from bwtriton.targets import get_target
    sig = {"idx_ptr": "*i64", "w_ptr": "*fp32", "sorted_token": "*i32", "sorted_weight": "*fp32",
           "inverse": "*i64", "expert_end": "*i32", "tile_expert": "*i32", "tile_row": "*i32", "num_pairs": "i32",
           "num_tiles": "i32"}
    limit = get_target("sm_90a").max_shared_bytes
    for pairs, experts in ((128, 8), (256, 60), (64, 128)):
        block, eb = moe_routing.routing_kernel_blocks(pairs, experts)
        tb = max(16, triton_next_pow2(moe_routing.max_tiles(pairs, experts, 16)))
        c = bwtriton.compile(moe_routing.routing_plan_kernel, signature=sig, target="sm_90a",
                             constexprs=dict(TOP_K=2, E=experts, BLOCK=block, EB=eb, TB=tb, BLOCK_M=16),
                             num_warps=8 if block * eb > 8192 else 4, check_limits=False)
        assert c.metadata["shared"] <= moe_routing.routing_kernel_shared_bytes(pairs, experts) <= limit
    assert not moe_routing.routing_kernel_fits(4096 * 2, 8, limit)
    assert moe_routing.routing_kernel_fits(64 * 2, 8, limit) and moe_routing.routing_kernel_fits(64 * 4, 60, limit)


def triton_next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


# ----------------------------------------------------------------------------------------- emulated sm_100a

@pytest.mark.emulated
@pytest.mark.usefixtures("emulated_b200")
@pytest.mark.parametrize("fmt,routing,bias,hidden,inter", [("nvfp4", "ragged", False, HIDDEN, INTER),
                                                            ("nvfp4", "one_expert", True, HIDDEN, INTER),
                                                            ("mxfp4", "ragged", True, 192, 64)])
def test_emulated_block_scaled_moe_matches_float64(fmt, routing, bias, hidden, inter):
    """192 hidden / 64 intermediate features (mxfp4 case): both K dims padded to the 128-wide tile, activation
    loads masked at the real width (what gpt-oss's 2880 needs)."""
    x, idx, wts, w = _setup(fmt, routing, seed=1, bias=bias, hidden=hidden, inter=inter)
    out = _assert_moe_matches(x, idx, wts, w, "block_scaled")
    assert out.shape == (x.shape[0], hidden) and out.dtype == torch.bfloat16
    kind = "mxf4nvf4.block_scale" if fmt == "nvfp4" else "mxf8f6f4.block_scale"
    ptxs = [entry[0].asm["ptx"] for key, entry in moe._GEMM._entries.items() if key[0][1] == fmt]
    assert len(ptxs) >= 2 and all(kind in ptx for ptx in ptxs)  # both projections on block-scaled tcgen05


@pytest.mark.emulated
@pytest.mark.usefixtures("emulated_b200")
@pytest.mark.parametrize("fmt,activation,inter,block_m,split", [("mxfp4", "swiglu_oai", 384, None, 2),
                                                                 ("nvfp4", "silu", 512, None, 4),
                                                                 ("mxfp4", "silu", 128, 64, 1)])
def test_emulated_dequant_path_matches_float64(monkeypatch, fmt, activation, inter, block_m, split):
    """The Hopper path's kernel run on the emulated B200 (the same Triton source as on the H200, so its indexing,
    K slices and epilogue are checked without a GPU): decode tiles (16 rows, swapped: weight rows as the MMA's M)
    with the down projection split along K (384 = 3 K steps over 2 slices: an uneven split; 512 over 4), and the
    prefill tile (64 rows, unswapped)."""
    if block_m is not None:
        monkeypatch.setattr(moe, "pick_block_m", lambda *args: block_m)
    x, idx, wts, w = _setup(fmt, "ragged", seed=4, bias=True, activation=activation, inter=inter)
    plan = moe_routing.plan_routing(idx, wts, E, moe.pick_block_m(idx.numel(), E, "dequant"))
    down = moe.launch_config(x, plan, w, False, "dequant")
    assert (down.swap, down.split_k) == (block_m is None, split)
    _assert_moe_matches(x, idx, wts, w, "dequant")


@pytest.mark.emulated
@pytest.mark.usefixtures("emulated_b200")
def test_emulated_mxfp4_dequant_is_exact_for_every_code_and_scale():
    """`dequant_mxfp4_bf16` (the UE8M0 scale as bf16 bits) against `QuantizedTensor.dequantize`, bit for bit: every
    byte value (both nibbles, signs, zero codes) and every scale exponent 0 .. 252 (0 is the subnormal 2^-127;
    252 puts e2m1's largest value, 6, at 1.5 * 2^127, the top of bf16's range)."""
    import triton
    import triton.language as tl

    @triton.jit
    def dequant_kernel(p_ptr, s_ptr, o_ptr, R: tl.constexpr, KH: tl.constexpr):
        r = tl.arange(0, R)
        packed = tl.load(p_ptr + r[:, None] * KH + tl.arange(0, KH)[None, :])
        scales = tl.load(s_ptr + r[:, None] * (KH // 16) + tl.arange(0, KH // 16)[None, :])
        out = moe.dequant_mxfp4_bf16(packed, scales)
        tl.store(o_ptr + r[:, None] * (2 * KH) + tl.arange(0, 2 * KH)[None, :], out)

    rows, kh = 256, 32
    packed = ((torch.arange(rows)[:, None] * 7 + torch.arange(kh)[None, :] * 37) % 256).to(torch.uint8)
    scales = torch.stack((torch.arange(rows) % 253, (torch.arange(rows) * 11 + 5) % 253), 1).to(torch.uint8)
    assert set(scales.reshape(-1).tolist()) == set(range(253))
    out = torch.empty(rows, 2 * kh, dtype=torch.bfloat16)
    dequant_kernel[(1,)](packed, scales, out, R=rows, KH=kh)
    ref = QuantizedTensor(data=packed, scales=scales.view(torch.float8_e8m0fnu), scale_layout="plain",
                          global_scale=None, format="mxfp4", shape=(rows, 2 * kh)).dequantize(torch.float32)
    assert torch.equal(out.view(torch.int16), ref.to(torch.bfloat16).view(torch.int16))


# ------------------------------------------------------------------------------------------------------ GPU

def _cuda(x, idx, wts, w):
    return x.cuda(), idx.cuda(), wts.cuda(), _on(w, "cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("fmt,routing,bias,activation", [("nvfp4", "ragged", False, "silu"),
                                                         ("nvfp4", "one_expert", True, "silu"),
                                                         ("mxfp4", "ragged", True, "swiglu_oai"),
                                                         ("mxfp4", "one_expert", False, "silu")])
def test_gpu_dequant_moe_matches_float64(fmt, routing, bias, activation):
    x, idx, wts, w = _cuda(*_setup(fmt, routing, seed=2, bias=bias, activation=activation))
    _assert_moe_matches(x, idx, wts, w, "dequant")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_moe_prefill_ragged_many_tokens():
    """512 tokens, top-2 of 8 experts with a skewed router (one expert empty): the 64-row tiles path."""
    gen = torch.Generator().manual_seed(3)
    w = quantize_moe_weights(torch.randn(8, 512, 256, generator=gen) * 0.05, torch.randn(8, 256, 256,
                                                                                        generator=gen) * 0.05, "nvfp4")
    logits = torch.randn(512, 8, generator=gen) + torch.tensor([3.0, 2.0, 1.0, 0, 0, 0, 0, -1e9])
    wts, idx = moe_routing.route_topk(logits, 2)
    x = torch.randn(512, 256, generator=gen).bfloat16()
    x, idx, wts, w = _cuda(x, idx, wts, w)
    from bwtriton.models._ops import reference_experts
    out = moe.moe_experts(x, idx, wts, w, path="dequant")
    ref = reference_experts(x.cpu(), idx.cpu(), wts.cpu(), _on(w, "cpu"))
    err = (out.cpu().float() - ref.float()).abs().max().item()
    assert err <= 2.0 ** -6 * ref.float().abs().max().item()


@pytest.mark.parametrize("fmt,routing,bias,activation", [("nvfp4", "ragged", True, "silu"),
                                                         ("mxfp4", "one_expert", True, "swiglu_oai")])
def test_grouped_mm_path_matches_float64(fmt, routing, bias, activation):
    """The 'grouped_mm' path (exact bf16 weights + torch._grouped_mm) runs on the CPU too: against the float64
    per-pair reference, bf16 GEMM outputs (2^-8) and bf16 h make the bound 2^-6 of the largest output."""
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip(f"torch {torch.__version__} has no _grouped_mm")
    x, idx, wts, w = _setup(fmt, routing, seed=7, bias=bias, activation=activation, hidden=192, inter=64)
    out = moe.moe_experts(x, idx, wts, w, path="grouped_mm")
    gu = _dequant(w.gate_up_data, w.gate_up_scales, w.gate_up_global, fmt, w.hidden)
    dn = _dequant(w.down_data, w.down_scales, w.down_global, fmt, w.intermediate)
    ref = torch.zeros(x.shape[0], 192, dtype=torch.float64)
    for t in range(x.shape[0]):
        for j in range(idx.shape[1]):
            e = int(idx[t, j])
            pre = gu[e] @ x[t].double() + w.gate_up_bias[e].double()
            h = _act(pre[:64], pre[64:], w)
            ref[t] += (dn[e] @ h + w.down_bias[e].double()) * float(wts[t, j])
    err = (out.double() - ref).abs().max().item()
    assert err <= 2.0 ** -6 * ref.abs().max().item(), err
    wrong = dataclasses.replace(w, gate_up_global=w.gate_up_global.flip(1).contiguous())
    if fmt == "nvfp4":  # the check sees a swapped gate/up scale
        assert (moe.moe_experts(x, idx, wts, wrong, path="grouped_mm").double() - ref).abs().max() > 2 * err
