#!/usr/bin/env python3
"""Third-party Triton libraries through bwtriton: collect each library's kernels as its public entry points launch
them, compile for sm_100a through the default passes, verify, run on the emulated B200 against a reference, and
(--gpu, on a Hopper GPU) compare plain Triton with `bwtriton.enable()`.

    third_party.py run [--library gemlite,fla,liger] [--case NAME...] [--sample] [--out DIR] [--docs FILE]
    third_party.py run --gpu --out DIR          on a CUDA GPU: plain Triton vs bwtriton.enable(), per case
    third_party.py run --gpu --jobs 16 --out DIR  the same, each case in its own processes, 16 at a time
    third_party.py table --emulated DIR/emulated.json [--gpu-results DIR/gpu.json] --docs docs/third_party.md
    third_party.py list                          the cases, per library

Emulated runs happen under `bwtriton.emu.emulated_gpu("sm_100a")` with the CUDA-device remap, so the libraries run
unmodified (they allocate on "cuda"). A recording launcher notes every kernel launched (name, specialisation, the
final PTX) and any emulator error; `verify_ptx` checks that PTX. Autotuned kernels keep their first config
(`--all-configs` benchmarks every config on the emulator, which is slow). The compile-time verifier pass runs with
`fail_on_error=false`, so a kernel the verifier rejects still runs and the emulator can judge it: a verifier error on
a kernel the emulator (schedule "latest") runs correctly, or an emulator protocol failure the verifier is silent
on, is a *disagreement*. Cases need the `thirdparty` extra (`pip install -e .[thirdparty]`).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

import torch
from triton.runtime.autotuner import Autotuner
from triton.runtime.jit import JITFunction

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "python") not in sys.path:
    sys.path.insert(0, str(ROOT / "python"))

import bwtriton  # noqa: E402 - from this source tree (the path above)
import bwtriton.emu as emu  # noqa: E402
from bwtriton.verify import verify_ptx  # noqa: E402

#: the libraries, their import names and the pip requirement the `thirdparty` extra pins
LIBRARIES = {"gemlite": ("gemlite", "gemlite==0.6.0.post2"), "fla": ("fla", "fla-core==0.6.0"),
             "liger": ("liger_kernel", "liger-kernel==0.8.5")}
#: passes for emulated runs: the defaults, with verifier errors recorded instead of failing the compile
EMULATED_PASSES = "+verify-tcgen05{fail_on_error=false}"
#: emulator errors that are tcgen05 / mbarrier protocol failures (what the verifier is meant to catch statically)
PROTOCOL_ERRORS = ("DeadlockError", "DescriptorError", "LaneQuarterError", "TmemAllocError", "TmemLeakError",
                   "TmemRaceError", "UnwaitedTmemLoadError")


class UsageError(Exception):
    """A bad command line: printed without a traceback, exit status 2."""


# ------------------------------------------------------------------------------------------------------------------
# cases: a library's public entry point on small shapes, with its reference
# ------------------------------------------------------------------------------------------------------------------

@dataclass
class Check:
    """One output against its reference, within a tolerance the format justifies."""

    label: str
    got: Any
    want: Any
    rtol: float
    atol: float


@dataclass
class Case:
    library: str
    name: str
    run: Callable[[], list[Check]]
    sample: bool = False  # part of the fast CI sample


CASES: list[Case] = []


def case(library: str, sample: bool = False) -> Callable[[Callable[[], list[Check]]], Callable[[], list[Check]]]:
    def register(fn: Callable[[], list[Check]]) -> Callable[[], list[Check]]:
        CASES.append(Case(library, fn.__name__.removeprefix(f"{library}_"), fn, sample))
        return fn
    return register


def _randn(*shape: int, dtype: Any = None, scale: float = 1.0) -> Any:
    return (torch.randn(*shape, device="cuda") * scale).to(dtype or torch.float32)


# bf16 keeps 8 significant bits: one rounding of an O(1) result is <= 2^-8 relative; reductions of a few hundred
# terms in fp32 add little, so 2e-2 relative (about 5 bf16 ulps) with a matching absolute floor covers bf16 outputs.
BF16 = (2e-2, 2e-2)
# fp32 outputs of fp32 row reductions (norms, softmax over <= 1024 columns): ~1e-6 relative error per op
FP32 = (1e-4, 1e-5)


@case("liger", sample=True)
def liger_rms_norm() -> list[Check]:
    from liger_kernel.transformers.functional import liger_rms_norm  # optional: the thirdparty extra
    x, w = _randn(8, 256), _randn(256) + 1
    y = liger_rms_norm(x, w, 1e-6, in_place=False)
    xd = x.double()
    ref = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
    return [Check("y", y, ref, *FP32)]


@case("liger", sample=True)
def liger_swiglu() -> list[Check]:
    from liger_kernel.transformers.functional import liger_swiglu  # optional: the thirdparty extra
    a, b = _randn(8, 256), _randn(8, 256)
    y = liger_swiglu(a, b)
    return [Check("y", y, torch.nn.functional.silu(a.double()) * b.double(), *FP32)]


@case("liger")
def liger_geglu() -> list[Check]:
    from liger_kernel.transformers.functional import liger_geglu  # optional: the thirdparty extra
    a, b = _randn(8, 256), _randn(8, 256)
    y = liger_geglu(a, b)
    ref = torch.nn.functional.gelu(a.double(), approximate="tanh") * b.double()
    return [Check("y", y, ref, *FP32)]


@case("liger", sample=True)
def liger_cross_entropy() -> list[Check]:
    from liger_kernel.transformers.functional import liger_cross_entropy  # optional: the thirdparty extra
    logits, target = _randn(8, 512, scale=2.0), torch.randint(0, 512, (8,), device="cuda")
    ref_in = logits.double().requires_grad_(True)  # before the call: liger writes the gradient into its input
    logits.requires_grad_(True)
    loss = liger_cross_entropy(logits, target)
    loss.backward()  # liger computes the gradient in the forward kernel; backward only scales it
    ref = torch.nn.functional.cross_entropy(ref_in, target)
    ref.backward()
    return [Check("loss", loss, ref, *FP32), Check("dlogits", logits.grad, ref_in.grad, *FP32)]


@case("liger")
def liger_layer_norm() -> list[Check]:
    from liger_kernel.transformers.functional import liger_layer_norm  # optional: the thirdparty extra
    x, w, b = _randn(8, 256), _randn(256), _randn(256)
    y = liger_layer_norm(x, w, b, 1e-6)
    ref = torch.nn.functional.layer_norm(x.double(), (256,), w.double(), b.double(), 1e-6)
    return [Check("y", y, ref, *FP32)]


@case("liger")
def liger_softmax() -> list[Check]:
    from liger_kernel.transformers.functional import liger_softmax  # optional: the thirdparty extra
    x = _randn(8, 256)
    return [Check("y", liger_softmax(x), torch.softmax(x.double(), -1), *FP32)]


@case("liger")
def liger_rope() -> list[Check]:
    from liger_kernel.transformers.functional import liger_rope  # optional: the thirdparty extra
    bsz, heads, seq, dim = 1, 2, 16, 64
    q, k = _randn(bsz, heads, seq, dim), _randn(bsz, heads, seq, dim)
    pos = torch.arange(seq, device="cuda").double()[:, None]
    inv = 1.0 / (10000 ** (torch.arange(0, dim, 2, device="cuda").double() / dim))
    ang = torch.cat([pos * inv, pos * inv], -1)
    cos, sin = ang.cos()[None].float(), ang.sin()[None].float()
    qo, ko = liger_rope(q, k, cos, sin)

    def rotate(x: Any) -> Any:  # rotate_half convention of the HF Llama rotary embedding
        x = x.double()
        x1, x2 = x[..., : dim // 2], x[..., dim // 2:]
        return x * ang.cos() + torch.cat([-x2, x1], -1) * ang.sin()
    return [Check("q", qo, rotate(q), *FP32), Check("k", ko, rotate(k), *FP32)]


@case("liger")
def liger_kl_div() -> list[Check]:
    from liger_kernel.transformers.functional import liger_kl_div  # optional: the thirdparty extra
    inp = torch.log_softmax(_randn(8, 256), -1)
    tgt = torch.softmax(_randn(8, 256), -1)
    got = liger_kl_div(inp, tgt, reduction="batchmean")
    ref = torch.nn.functional.kl_div(inp.double(), tgt.double(), reduction="batchmean")
    return [Check("loss", got, ref, *FP32)]


@case("liger")
def liger_rms_norm_backward() -> list[Check]:
    from liger_kernel.transformers.functional import liger_rms_norm  # optional: the thirdparty extra
    x, w = _randn(8, 256).requires_grad_(True), (_randn(256) + 1).requires_grad_(True)
    y = liger_rms_norm(x, w, 1e-6, in_place=False)
    dy = _randn(8, 256)
    y.backward(dy)
    xd, wd = x.detach().double().requires_grad_(True), w.detach().double().requires_grad_(True)
    (xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * wd).backward(dy.double())
    return [Check("dx", x.grad, xd.grad, *FP32), Check("dw", w.grad, wd.grad, 1e-4, 1e-4)]


@case("liger")
def liger_fused_add_rms_norm() -> list[Check]:
    from liger_kernel.transformers.functional import liger_fused_add_rms_norm  # optional: the thirdparty extra
    x, r, w = _randn(8, 256), _randn(8, 256), _randn(256) + 1
    xd = x.double() + r.double()
    y, r_out = liger_fused_add_rms_norm(x, r, w, 1e-6, in_place=False)
    ref = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
    return [Check("y", y, ref, *FP32), Check("residual", r_out, xd, *FP32)]


@case("liger")
def liger_group_norm() -> list[Check]:
    from liger_kernel.transformers.functional import liger_group_norm  # optional: the thirdparty extra
    x, w, b = _randn(2, 8, 64), _randn(8), _randn(8)
    y = liger_group_norm(x, w, b, 8, 4, 1e-6)
    return [Check("y", y, torch.nn.functional.group_norm(x.double(), 4, w.double(), b.double(), 1e-6), *FP32)]


@case("liger")
def liger_dyt() -> list[Check]:
    from liger_kernel.transformers.functional import liger_dyt  # optional: the thirdparty extra
    x, alpha, gamma, beta = _randn(8, 256), torch.full((1,), 0.7, device="cuda"), _randn(256), _randn(256)
    y = liger_dyt(x, alpha, gamma, beta)
    return [Check("y", y, gamma.double() * torch.tanh(0.7 * x.double()) + beta.double(), *FP32)]


@case("liger")
def liger_sparsemax() -> list[Check]:
    from liger_kernel.transformers.functional import liger_sparsemax  # optional: the thirdparty extra
    x = _randn(8, 64)
    z = x.double().sort(-1, descending=True).values  # Martins & Astudillo: threshold from the sorted support
    ks = torch.arange(1, 65, device=x.device, dtype=torch.float64)
    support = 1 + ks * z > z.cumsum(-1)
    kmax = support.sum(-1, keepdim=True)
    tau = (z.cumsum(-1).gather(-1, kmax - 1) - 1) / kmax
    return [Check("y", liger_sparsemax(x), (x.double() - tau).clamp(min=0), *FP32)]


@case("liger")
def liger_relu_squared() -> list[Check]:
    from liger_kernel.transformers.functional import liger_relu_squared  # optional: the thirdparty extra
    x = _randn(8, 256)
    return [Check("y", liger_relu_squared(x), torch.relu(x.double()) ** 2, *FP32)]


@case("liger")
def liger_swiglu_backward() -> list[Check]:
    from liger_kernel.transformers.functional import liger_swiglu  # optional: the thirdparty extra
    a, b = _randn(8, 256).requires_grad_(True), _randn(8, 256).requires_grad_(True)
    dy = _randn(8, 256)
    # before the call: liger's backward writes the gradients into the saved inputs' memory
    ad, bd = a.detach().double().requires_grad_(True), b.detach().double().requires_grad_(True)
    (torch.nn.functional.silu(ad) * bd).backward(dy.double())
    liger_swiglu(a, b).backward(dy)
    return [Check("da", a.grad, ad.grad, *FP32), Check("db", b.grad, bd.grad, *FP32)]


@case("liger")
def liger_layer_norm_backward() -> list[Check]:
    from liger_kernel.transformers.functional import liger_layer_norm  # optional: the thirdparty extra
    x, w, b = (t.requires_grad_(True) for t in (_randn(8, 256), _randn(256), _randn(256)))
    dy = _randn(8, 256)
    liger_layer_norm(x, w, b, 1e-6).backward(dy)
    ref = [t.detach().double().requires_grad_(True) for t in (x, w, b)]
    torch.nn.functional.layer_norm(ref[0], (256,), ref[1], ref[2], 1e-6).backward(dy.double())
    # dw, db sum 8 rows of fp32 products
    return [Check(n, t.grad, r.grad, 1e-4, 1e-4) for n, t, r in zip(("dx", "dw", "db"), (x, w, b), ref)]


@case("liger")
def liger_fused_linear_cross_entropy() -> list[Check]:
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy  # optional: the thirdparty extra
    x, w = _randn(8, 64), _randn(512, 64, scale=0.2)
    target = torch.randint(0, 512, (8,), device="cuda")
    ref = torch.nn.functional.cross_entropy(x.double() @ w.double().T, target)
    loss = liger_fused_linear_cross_entropy(x, w, target)
    # the logits come from torch's fp32 matmul (64-term dots, ~1e-6 relative), then the fp32 CE kernel
    return [Check("loss", loss, ref, 1e-4, 1e-4)]


@case("fla", sample=True)
def fla_l2norm() -> list[Check]:
    from fla.modules.norm.l2norm import l2norm  # optional: the thirdparty extra
    x = _randn(2, 16, 64)
    ref = x.double() / torch.sqrt(x.double().pow(2).sum(-1, keepdim=True) + 1e-6)
    return [Check("y", l2norm(x), ref, *FP32)]


@case("fla")
def fla_rms_norm() -> list[Check]:
    from fla.modules.norm.layernorm import rms_norm  # optional: the thirdparty extra
    x, w = _randn(16, 128), _randn(128) + 1
    y = rms_norm(x, w, None, eps=1e-6)
    xd = x.double()
    return [Check("y", y, xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double(), *FP32)]


@case("fla")
def fla_chunk_local_cumsum() -> list[Check]:
    from fla.ops.utils.cumsum import chunk_local_cumsum  # optional: the thirdparty extra
    g = _randn(1, 128, 2)
    got = chunk_local_cumsum(g, chunk_size=64)
    ref = g.double().view(1, 2, 64, 2).cumsum(2).view(1, 128, 2)
    return [Check("g", got, ref, *FP32)]


def _simple_gla_inputs(T: int = 64, H: int = 1, K: int = 64, V: int = 64) -> tuple:
    q, k, v = (_randn(1, T, H, d, dtype=torch.bfloat16) for d in (K, K, V))
    g = torch.nn.functional.logsigmoid(_randn(1, T, H)).float()
    return q, k, v, g


def _recurrent_simple_gla(q: Any, k: Any, v: Any, g: Any) -> Any:
    """float64 recurrence S_t = exp(g_t) S_{t-1} + k_t v_t^T, o_t = scale q_t S_t ([B, T, H, *] layout)."""
    q, k, v, g = (x.double() for x in (q, k, v, g))
    B, T, H, K = q.shape
    S = torch.zeros(B, H, K, v.shape[-1], dtype=torch.float64, device=q.device)
    out = []
    for t in range(T):
        S = S * g[:, t].exp()[..., None, None] + k[:, t, :, :, None] * v[:, t, :, None, :]
        out.append(torch.einsum("bhk,bhkv->bhv", q[:, t] * K ** -0.5, S))
    return torch.stack(out, 1)


@case("fla")
def fla_fused_recurrent_simple_gla() -> list[Check]:
    from fla.ops.simple_gla import fused_recurrent_simple_gla  # optional: the thirdparty extra
    q, k, v, g = _simple_gla_inputs(T=16)
    o, _ = fused_recurrent_simple_gla(q, k, v, g)
    return [Check("o", o, _recurrent_simple_gla(q, k, v, g), *BF16)]


@case("fla")
def fla_chunk_simple_gla() -> list[Check]:
    from fla.ops.simple_gla import chunk_simple_gla  # optional: the thirdparty extra
    q, k, v, g = _simple_gla_inputs(T=64)
    o, _ = chunk_simple_gla(q, k, v, g)
    return [Check("o", o, _recurrent_simple_gla(q, k, v, g), *BF16)]


def _bf16_state(label: str, got: Any, want: Any) -> Check:
    """A bf16 output of a chunked linear-attention kernel: bf16 inputs and bf16 intra-chunk products (fp32
    accumulation) give errors of a few bf16 ulps of the output's scale, so the floor is relative to max |want|."""
    scale = float(torch.as_tensor(want).detach().abs().max())
    return Check(label, got, want, 2e-2, 2e-2 * max(scale, 1e-3))


def _gla_inputs(T: int = 64, K: int = 64, V: int = 64) -> tuple:
    q, k, v = (_randn(1, T, 1, d, dtype=torch.bfloat16) for d in (K, K, V))
    gk = torch.nn.functional.logsigmoid(_randn(1, T, 1, K)).float() / 8  # per-key log decay, mild
    return q, k, v, gk


@case("fla")
def fla_chunk_gla() -> list[Check]:
    from fla.ops.gla import chunk_gla  # optional: the thirdparty extra
    from fla.ops.gla.naive import naive_recurrent_gla  # optional: the thirdparty extra
    q, k, v, gk = _gla_inputs()
    o, _ = chunk_gla(q, k, v, gk)
    ref = naive_recurrent_gla(q.double(), k.double(), v.double(), gk.double())[0]
    return [_bf16_state("o", o, ref)]


@case("fla")
def fla_fused_recurrent_gla() -> list[Check]:
    from fla.ops.gla import fused_recurrent_gla  # optional: the thirdparty extra
    from fla.ops.gla.naive import naive_recurrent_gla  # optional: the thirdparty extra
    q, k, v, gk = _gla_inputs(T=16)
    o, _ = fused_recurrent_gla(q, k, v, gk)
    ref = naive_recurrent_gla(q.double(), k.double(), v.double(), gk.double())[0]
    return [_bf16_state("o", o, ref)]


def _delta_inputs(T: int) -> tuple:
    q, k, v = (_randn(1, T, 1, 64, dtype=torch.bfloat16) for _ in range(3))
    k = torch.nn.functional.normalize(k.float(), dim=-1).bfloat16()  # the delta rule wants unit keys
    beta = torch.sigmoid(_randn(1, T, 1)).bfloat16()
    g = torch.nn.functional.logsigmoid(_randn(1, T, 1)).float() / 8
    return q, k, v, beta, g


def _delta_reference(q: Any, k: Any, v: Any, beta: Any) -> Any:
    from fla.ops.delta_rule.naive import delta_rule_recurrence  # optional: the thirdparty extra; [B, H, T, K]
    o, _ = delta_rule_recurrence(*(x.double().transpose(1, 2) for x in (q, k, v)), beta.double().transpose(1, 2))
    return o.transpose(1, 2)


@case("fla")
def fla_chunk_delta_rule() -> list[Check]:
    from fla.ops.delta_rule import chunk_delta_rule  # optional: the thirdparty extra
    q, k, v, beta, _ = _delta_inputs(64)
    o, _ = chunk_delta_rule(q, k, v, beta)
    return [_bf16_state("o", o, _delta_reference(q, k, v, beta))]


@case("fla")
def fla_fused_recurrent_delta_rule() -> list[Check]:
    from fla.ops.delta_rule import fused_recurrent_delta_rule  # optional: the thirdparty extra
    q, k, v, beta, _ = _delta_inputs(16)
    o, _ = fused_recurrent_delta_rule(q, k, v, beta)
    return [_bf16_state("o", o, _delta_reference(q, k, v, beta))]


@case("fla")
def fla_chunk_gated_delta_rule() -> list[Check]:
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule  # optional: the thirdparty extra
    from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule  # optional: the thirdparty extra
    q, k, v, beta, g = _delta_inputs(64)
    o, _ = chunk_gated_delta_rule(q, k, v, g, beta)
    ref = naive_recurrent_gated_delta_rule(q.double(), k.double(), v.double(), beta.double(), g.double())[0]
    return [_bf16_state("o", o, ref)]


@case("fla")
def fla_chunk_simple_gla_backward() -> list[Check]:
    from fla.ops.simple_gla import chunk_simple_gla  # optional: the thirdparty extra
    q, k, v, g = (x.requires_grad_(True) for x in _simple_gla_inputs(T=64))
    o, _ = chunk_simple_gla(q, k, v, g)
    do = _randn(*o.shape, dtype=torch.bfloat16)
    o.backward(do)
    ref_in = [x.detach().double().requires_grad_(True) for x in (q, k, v, g)]
    _recurrent_simple_gla(*ref_in).backward(do.double())
    return [_bf16_state(n, x.grad, r.grad) for n, x, r in zip("qkvg", (q, k, v, g), ref_in)]


def _gemlite_int8_layer(out_f: int = 64, in_f: int = 128) -> tuple:
    from gemlite.helper import A16W8_INT8  # optional: the thirdparty extra
    w = _randn(out_f, in_f, dtype=torch.float16, scale=0.1)
    layer = A16W8_INT8(device="cuda:0").from_weights(w)
    scales = (w.float().abs().amax(1, keepdim=True) / 127).clamp(min=1e-6)  # gemlite's channel-wise INT8 scale
    w_deq = (w.float() / scales).round().clamp(-128, 127).double() * scales.double()
    return layer, w_deq


def _gemlite_int8(matmul_type: str, M: int, in_f: int = 128) -> list[Check]:
    layer, w_deq = _gemlite_int8_layer(in_f=in_f)
    x = _randn(M, in_f, dtype=torch.float16)
    y = layer.forward_manual(x, matmul_type=matmul_type)
    # fp16 output of a <= 512-term fp32 dot, split-K partials added in fp16: fp16 keeps 11 bits (~5e-4 relative
    # per rounding), a few roundings of O(1) partial sums stay well inside 1e-2
    return [Check("y", y, x.double() @ w_deq.T, 1e-2, 1e-2)]


@case("gemlite", sample=True)
def gemlite_a16w8_gemv() -> list[Check]:
    return _gemlite_int8("GEMV", 1)


@case("gemlite")
def gemlite_a16w8_gemv_revsplitk() -> list[Check]:
    return _gemlite_int8("GEMV_REVSPLITK", 1)


@case("gemlite")
def gemlite_a16w8_gemv_splitk() -> list[Check]:
    return _gemlite_int8("GEMV_SPLITK", 2)


@case("gemlite")
def gemlite_a16w8_gemm() -> list[Check]:
    return _gemlite_int8("GEMM", 16)


@case("gemlite", sample=True)
def gemlite_a16w8_gemm_m128() -> list[Check]:
    return _gemlite_int8("GEMM", 128)


@case("gemlite")
def gemlite_a16w8_gemm_splitk() -> list[Check]:
    # K = 512: at K = 128 gemlite's first config (BLOCK_K 128, SPLIT_K 4) has K tiles past K that read scale rows
    # past the scale tensor (docs/third_party.md, findings)
    return _gemlite_int8("GEMM_SPLITK", 16, in_f=512)


def _gemlite_int4(matmul_type: str, M: int) -> list[Check]:
    from gemlite.helper import A16W4_HQQ_INT  # optional: the thirdparty extra
    out_f, in_f, group = 64, 128, 64
    w_q = torch.randint(0, 16, (out_f, in_f), dtype=torch.uint8, device="cuda")
    scales = (torch.rand(out_f, in_f // group, device="cuda") * 0.02 + 0.01).half()
    zeros = torch.full((out_f, in_f // group), 7.5, device="cuda").half()
    layer = A16W4_HQQ_INT(device="cuda:0").from_weights(w_q, scales, zeros)
    x = _randn(M, in_f, dtype=torch.float16)
    y = layer.forward_manual(x, matmul_type=matmul_type)
    w_deq = ((w_q.double().view(out_f, -1, group) - zeros.double()[..., None]) * scales.double()[..., None])
    return [Check("y", y, x.double() @ w_deq.view(out_f, in_f).T, 1e-2, 1e-2)]


@case("gemlite")
def gemlite_a16w4_gemv_splitk() -> list[Check]:
    return _gemlite_int4("GEMV_SPLITK", 2)


@case("gemlite")
def gemlite_a16w4_gemv_revsplitk() -> list[Check]:
    return _gemlite_int4("GEMV_REVSPLITK", 1)


@case("gemlite")
def gemlite_a16w8_fp8_gemm() -> list[Check]:
    from gemlite.helper import A16W8_FP8  # optional: the thirdparty extra
    w = _randn(64, 128, dtype=torch.float16, scale=0.1)
    layer = A16W8_FP8(device="cuda:0").from_weights(w)
    scales = (w.float().abs().amax(1, keepdim=True) / 448).clamp(min=1e-6)  # e4m3 max is 448
    w_deq = (w.float() / scales).clamp(-448, 448).to(torch.float8_e4m3fn).double() * scales.double()
    x = _randn(16, 128, dtype=torch.float16)
    y = layer.forward_manual(x, matmul_type="GEMM")
    return [Check("y", y, x.double() @ w_deq.T, 1e-2, 1e-2)]


def _gemlite_a8w8(fp8: bool, M: int = 16) -> list[Check]:
    from gemlite.helper import A8W8_fp8_dynamic, A8W8_int8_dynamic  # optional: the thirdparty extra
    w = _randn(64, 128, dtype=torch.float16, scale=0.1)
    layer = (A8W8_fp8_dynamic if fp8 else A8W8_int8_dynamic)(device="cuda:0").from_weights(w)
    x = _randn(M, 128, dtype=torch.float16)
    y = layer.forward_manual(x, matmul_type="GEMM")
    ref = x.double() @ w.double().T
    # both operands quantised per row/column: int8 steps are 1/127 of the row max (e4m3: 2^-4 relative), so a
    # 128-term dot of O(0.1) products is off by ~1e-2 of the output scale (e4m3: ~4e-2)
    scale = float(ref.abs().max())
    return [Check("y", y, ref, 0.0, (0.08 if fp8 else 0.03) * scale)]


@case("gemlite")
def gemlite_a8w8_int8_dynamic_gemm() -> list[Check]:
    return _gemlite_a8w8(fp8=False)


@case("gemlite")
def gemlite_a8w8_fp8_dynamic_gemm() -> list[Check]:
    return _gemlite_a8w8(fp8=True)


@case("gemlite")
def gemlite_a8w8_fp8_dynamic_gemm_m128() -> list[Check]:
    return _gemlite_a8w8(fp8=True, M=128)


#: e2m1 code -> value (codes 8..15 are the negatives): the OCP MX / NVFP4 element format
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def _gemlite_fp4(kind: str, matmul_type: str, M: int) -> list[Check]:
    """gemlite's MXFP4 / NVFP4 weight-only layers from exact codes and scales; the reference is their exact
    dequantisation in float64. (No NVFP4 GEMV case: gemlite's GEMV multiplies by its doubled e2m1 table and
    halves only e8m0 scales, so NVFP4 layers built with `from_weights` come out twice too large on any GPU.)"""
    from gemlite.helper import A16W4_MXFP, A16W4_NVFP  # optional: the thirdparty extra
    out_f, in_f = 64, 128
    group = 32 if kind == "mxfp4" else 16
    codes = torch.randint(0, 16, (out_f, in_f), dtype=torch.uint8, device="cuda")
    if kind == "mxfp4":  # e8m0 scales 2^-3 .. 2^0
        scale_values = torch.exp2(torch.randint(-3, 1, (out_f, in_f // group), device="cuda").double())
        scales = scale_values.float().to(torch.float8_e8m0fnu)
        layer = A16W4_MXFP(device="cuda:0", dtype=torch.bfloat16).from_weights(codes, scales)
    else:  # e4m3 scales, meta scale 1/2
        scales = (torch.rand(out_f, in_f // group, device="cuda") * 0.5 + 0.25).to(torch.float8_e4m3fn)
        scale_values = scales.double() * 0.5
        layer = A16W4_NVFP(device="cuda:0", dtype=torch.bfloat16).from_weights(
            codes, scales=scales, meta_scale=torch.tensor(2.0, device="cuda"))
    table = torch.tensor(E2M1, dtype=torch.float64, device=codes.device)
    w_deq = (table[codes.long()].view(out_f, -1, group) * scale_values[..., None]).view(out_f, in_f)
    x = _randn(M, in_f, dtype=torch.bfloat16)
    y = layer.forward_manual(x, matmul_type=matmul_type)
    # bf16 output (8 bits); the GEMV adds its K-split partial sums with bf16 atomics, so the rounding is relative
    # to the partial sums' scale, not to each output's
    return [_bf16_state("y", y, x.double() @ w_deq.T)]


@case("gemlite")
def gemlite_a16w4_mxfp_gemv() -> list[Check]:
    return _gemlite_fp4("mxfp4", "GEMV", 1)


@case("gemlite")
def gemlite_a16w4_mxfp_gemm() -> list[Check]:
    return _gemlite_fp4("mxfp4", "GEMM", 16)


@case("gemlite")
def gemlite_a16w4_nvfp_gemm() -> list[Check]:
    return _gemlite_fp4("nvfp4", "GEMM", 16)


@case("gemlite")
def gemlite_a16w4_gemv() -> list[Check]:
    return _gemlite_int4("GEMV", 1)


@case("gemlite")
def gemlite_a16w4_gemm() -> list[Check]:
    return _gemlite_int4("GEMM", 16)


# ------------------------------------------------------------------------------------------------------------------
# recording: which kernels a case launched, their PTX, and what the emulator said
# ------------------------------------------------------------------------------------------------------------------

@dataclass
class KernelRecord:
    """One compiled kernel (function name + Triton cache hash) as a library launched it."""

    library: str
    name: str
    hash: str
    specialisation: str
    cases: list[str] = field(default_factory=list)
    launches: int = 0
    compiled: bool = True
    compile_error: str = ""
    verifier_errors: int = 0
    verifier_warnings: int = 0
    verifier_first: str = ""
    emulator_error: str = ""
    protocol_failure: bool = False
    numerics_pass: Optional[bool] = None
    gpu_equal: Optional[bool] = None
    tcgen05: bool = False  # the PTX issues tcgen05.mma (what the verifier's protocol rules are about)
    disagreement: str = ""
    ptx: str = field(default="", repr=False)

    @property
    def key(self) -> str:
        return f"{self.library}:{self.name}:{self.hash[:12]}"

    @property
    def clean(self) -> bool:
        """Compiled, zero verifier errors, emulated run and numerics passed."""
        return self.compiled and self.verifier_errors == 0 and not self.emulator_error and bool(self.numerics_pass)


class Recorder:
    """Collects kernels while installed: compile failures (JITFunction._do_compile) and launches (the emulated
    launcher class)."""

    def __init__(self) -> None:
        self.kernels: dict[str, KernelRecord] = {}
        self.library, self.case = "", ""
        self.touched: list[str] = []

    def start_case(self, library: str, name: str) -> None:
        self.library, self.case, self.touched = library, name, []

    def _record(self, name: str, hash_: str, spec: str) -> KernelRecord:
        key = f"{self.library}:{name}:{hash_[:12]}"
        rec = self.kernels.get(key)
        if rec is None:
            rec = self.kernels[key] = KernelRecord(self.library, name, hash_, spec)
        if self.case not in rec.cases:
            rec.cases.append(self.case)
        if key not in self.touched:
            self.touched.append(key)
        return rec

    def compile_failed(self, fn_name: str, constexprs: Any, exc: BaseException) -> None:
        rec = self._record(fn_name, "compile-failed", _short(constexprs))
        rec.compiled, rec.compile_error = False, _one_line(exc)

    def launched(self, launcher: Any, error: Optional[BaseException]) -> None:
        md = launcher.metadata
        rec = self._record(launcher.name, str(md.hash), _specialisation(launcher))
        rec.launches += 1
        if not rec.ptx:
            rec.ptx = launcher.ptx
            rec.tcgen05 = "tcgen05.mma" in rec.ptx
        if error is not None and not rec.emulator_error:
            rec.emulator_error = _one_line(error)
            rec.protocol_failure = type(error).__name__ in PROTOCOL_ERRORS


def _specialisation(launcher: Any) -> str:
    sig = {k: v for k, v in launcher.signature.items() if v != "constexpr"}
    md = launcher.metadata
    names = list(launcher.signature)
    consts = {names[k[0]] if isinstance(k, tuple) and len(k) == 1 and k[0] < len(names) else str(k): v
              for k, v in getattr(launcher, "constexprs", {}).items()}
    return (f"warps={md.num_warps} stages={getattr(md, 'num_stages', '?')} "
            f"sig=({', '.join(f'{k}:{v}' for k, v in sig.items())}) "
            f"constexprs=({', '.join(f'{k}={v}' for k, v in consts.items() if not callable(v))})")


def _short(x: Any, limit: int = 160) -> str:
    s = repr(x)
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _one_line(exc: BaseException, limit: int = 300) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


@contextlib.contextmanager
def recording(recorder: Recorder, drv: Any, all_configs: bool) -> Iterator[None]:
    """Install the recording launcher on the emulated driver `drv`, the compile-failure hook and, unless
    `all_configs`, the first-config autotune pruning; undone on exit."""
    base = drv.launcher_cls

    class RecordingLauncher(base):  # type: ignore[misc, valid-type]
        def __init__(self, src: Any, metadata: Any) -> None:
            super().__init__(src, metadata)
            self.constexprs = dict(getattr(src, "constants", {}) or {})

        def __call__(self, *args: Any) -> None:
            try:
                super().__call__(*args)
            except BaseException as exc:
                recorder.launched(self, exc)
                raise
            recorder.launched(self, None)

    real_compile = JITFunction._do_compile

    def do_compile(self: Any, key: Any, signature: Any, device: Any, constexprs: Any, *rest: Any) -> Any:
        try:
            return real_compile(self, key, signature, device, constexprs, *rest)
        except Exception as exc:
            recorder.compile_failed(self.fn.__name__, constexprs, exc)
            raise

    drv.launcher_cls = RecordingLauncher
    JITFunction._do_compile = do_compile
    try:
        with contextlib.nullcontext() if all_configs else first_config_only():
            yield
    finally:
        drv.launcher_cls = base
        JITFunction._do_compile = real_compile


@contextlib.contextmanager
def first_config_only() -> Iterator[None]:
    """Autotuned kernels take their first (pruned) config and benchmark nothing: on the emulator that saves
    emulated benchmarking, on a GPU it makes plain Triton and bwtriton run the same config (a timing-picked one
    could differ between the two and change the summation order)."""
    real_prune, real_bench = Autotuner.prune_configs, Autotuner._bench

    def first_config(self: Any, kwargs: dict) -> list:
        return real_prune(self, kwargs)[:1]

    Autotuner.prune_configs = first_config
    Autotuner._bench = lambda *args, **kwargs: [0.0, 0.0, 0.0]  # no names: kernel arguments arrive as keywords
    try:
        yield
    finally:
        Autotuner.prune_configs, Autotuner._bench = real_prune, real_bench


# ------------------------------------------------------------------------------------------------------------------
# running cases
# ------------------------------------------------------------------------------------------------------------------

@dataclass
class CaseResult:
    library: str
    name: str
    passed: bool
    seconds: float
    message: str = ""
    kernels: list[str] = field(default_factory=list)
    max_rel: Optional[float] = None


def compare(checks: Sequence[Check]) -> tuple[bool, str, float]:
    """(all within tolerance, first failure, worst |got-want| / (atol + rtol |want|))."""
    worst, first = 0.0, ""
    for c in checks:
        got = torch.as_tensor(c.got).detach().cpu().double()
        want = torch.as_tensor(c.want).detach().cpu().double()
        if got.shape != want.shape:
            return False, f"{c.label}: shape {tuple(got.shape)} != reference {tuple(want.shape)}", float("inf")
        ratio = ((got - want).abs() / (c.atol + c.rtol * want.abs())).nan_to_num(float("inf"))
        r = float(ratio.max()) if ratio.numel() else 0.0
        worst = max(worst, r)
        if r > 1 and not first:
            first = f"{c.label}: {int((ratio > 1).sum())}/{ratio.numel()} outside rtol={c.rtol} atol={c.atol}"
    return not first, first, worst


def run_case(c: Case) -> tuple[bool, str, float, list[Check]]:
    torch.manual_seed(0)
    try:
        checks = c.run()
    except Exception as exc:  # a library call that fails is a failed case, reported with its reason
        return False, _one_line(exc), float("inf"), []
    ok, msg, worst = compare(checks)
    return ok, msg, worst, checks


def select_cases(libraries: Optional[Sequence[str]], names: Optional[Sequence[str]], sample: bool) -> list[Case]:
    known = sorted(LIBRARIES)
    libs = list(libraries) if libraries else known
    for lib in libs:
        if lib not in LIBRARIES:
            raise UsageError(f"unknown library {lib!r}; choose from {', '.join(known)}")
    chosen = [c for c in CASES if c.library in libs and (not sample or c.sample)]
    if names:
        all_names = {f"{c.library}:{c.name}" for c in CASES} | {c.name for c in CASES}
        for n in names:
            if n not in all_names:
                raise UsageError(f"unknown case {n!r}; `third_party.py list` shows them")
        chosen = [c for c in chosen if c.name in names or f"{c.library}:{c.name}" in names]
    return chosen


def missing_libraries(libs: Sequence[str]) -> list[str]:
    return [LIBRARIES[lib][1] for lib in libs if importlib.util.find_spec(LIBRARIES[lib][0]) is None]


def progress(line: str) -> None:
    """Progress output, flushed (long runs go to logs and device consoles)."""
    print(line, flush=True)


def run_emulated(cases: Sequence[Case], all_configs: bool = False, log: Callable[[str], None] = progress,
                 passes: str = EMULATED_PASSES) -> tuple[list[CaseResult], list[KernelRecord]]:
    """Run `cases` on the emulated B200; every kernel launched is recorded, verified and judged."""
    recorder = Recorder()
    results: list[CaseResult] = []
    with emu.emulated_gpu("sm_100a", passes=passes) as drv, recording(recorder, drv, all_configs):
        for i, c in enumerate(cases, 1):
            recorder.start_case(c.library, c.name)
            t0 = time.perf_counter()
            ok, msg, worst, _ = run_case(c)
            dt = time.perf_counter() - t0
            results.append(CaseResult(c.library, c.name, ok, dt, msg, list(recorder.touched), worst))
            judge_case(ok, [recorder.kernels[key] for key in recorder.touched])
            log(f"[{i}/{len(cases)}] {c.library}:{c.name}: {'pass' if ok else 'FAIL'} in {dt:.1f}s, "
                f"{len(recorder.touched)} kernel(s)" + (f" -- {msg}" if msg else ""))
    for rec in recorder.kernels.values():
        if rec.ptx:
            report = verify_ptx(rec.ptx, target="sm_100a")
            rec.verifier_errors, rec.verifier_warnings = len(report.errors), len(report.warnings)
            if report.errors:
                f = report.errors[0]
                rec.verifier_first = f"line {f.line}: [{f.check}/{f.rule}] {f.message}"
        rec.disagreement = disagreement(rec)
    return results, list(recorder.kernels.values())


def judge_case(ok: bool, kernels: Sequence[KernelRecord]) -> None:
    """Fold one case's outcome into the kernels it launched. A case that failed because one of its kernels did
    not compile or stopped the emulator says nothing about the others' numerics: only the culprits are marked."""
    culprits = [k for k in kernels if k.emulator_error or not k.compiled]
    for k in kernels:
        if ok:
            k.numerics_pass = True if k.numerics_pass is None else k.numerics_pass
        elif not culprits or k in culprits:
            k.numerics_pass = False


def disagreement(rec: KernelRecord) -> str:
    """What the verifier and the emulator disagree on for one kernel ('' when they agree)."""
    if rec.verifier_errors and not rec.emulator_error and rec.numerics_pass:
        return f"verifier error the emulator (schedule latest) does not reproduce: {rec.verifier_first}"
    if rec.protocol_failure and not rec.verifier_errors:
        return f"emulator protocol failure the verifier is silent on: {rec.emulator_error}"
    return ""


def same_outputs(a: Sequence[Check], b: Sequence[Check]) -> bool:
    """Bitwise equal outputs (and both runs produced them)."""
    return bool(a and b) and len(a) == len(b) and all(
        torch.equal(torch.as_tensor(x.got).detach().cpu(), torch.as_tensor(y.got).detach().cpu()) for x, y in zip(a, b))


def within_spread(plain: Sequence[Check], again: Sequence[Check], ours: Sequence[Check]) -> bool:
    """`ours` no further from the first plain run than twice the plain runs' own difference (run-to-run
    nondeterminism of atomics), output by output."""
    if not (plain and again and ours) or not len(plain) == len(again) == len(ours):
        return False
    for p, a, o in zip(plain, again, ours):
        p, a, o = (torch.as_tensor(x.got).detach().cpu().double() for x in (p, a, o))
        if p.shape != o.shape or not bool(((o - p).abs() <= 2 * (a - p).abs().max()).all()):
            return False
    return True


def gpu_row(c: Case, plain: tuple, again: Sequence[Check], ours: tuple, kernels: Sequence[str],
            seconds: float, same_ptx: bool = False) -> dict:
    """One case's GPU result: `plain` and `ours` are (passed, message, checks) of plain Triton and of
    `bwtriton.enable()`, `again` the checks of a second plain run; `same_ptx`: both launched the same kernels
    with byte-identical PTX. Outputs that differ from the same PTX are a run-to-run difference (the order of
    atomics), even where two plain runs happened to agree: they count as within the spread."""
    (plain_ok, plain_msg, plain_checks), (bw_ok, bw_msg, bw_checks) = plain, ours
    equal = same_outputs(plain_checks, bw_checks)
    deterministic = same_outputs(plain_checks, again)
    within = equal or (plain_ok and bw_ok and same_ptx) or (
        not deterministic and within_spread(plain_checks, again, bw_checks))
    return {"library": c.library, "case": c.name, "kernels": list(kernels), "plain_pass": plain_ok,
            "plain_message": plain_msg, "bwtriton_pass": bw_ok, "bwtriton_message": bw_msg, "equal": equal,
            "plain_deterministic": deterministic, "same_ptx": same_ptx, "within_spread": within,
            "seconds": seconds}


def _verdict(row: dict) -> str:
    if row["equal"]:
        return "equal"
    if row["within_spread"]:
        return "same PTX as plain Triton, run-to-run difference" if row.get("same_ptx") else \
            "within plain run-to-run spread"
    return "DIFFERENT"


def _log_gpu_row(i: int, n: int, row: dict, log: Callable[[str], None]) -> None:
    msg = row["plain_message"] or row["bwtriton_message"]
    log(f"[{i}/{n}] {row['library']}:{row['case']}: plain {'pass' if row['plain_pass'] else 'FAIL'}, bwtriton "
        f"{'pass' if row['bwtriton_pass'] else 'FAIL'}, "
        f"{_verdict(row)}" + (f" -- {msg}" if msg else ""))


@dataclass
class Launches:
    """The Triton kernels launched inside `launched_kernels()`: names in first-launch order, and per name the
    sha256 of each distinct PTX it ran."""
    names: list[str] = field(default_factory=list)
    ptx: dict[str, list[str]] = field(default_factory=dict)

    def clear(self) -> None:
        self.names.clear()
        self.ptx.clear()

    def code(self) -> dict[str, list[str]]:
        """name -> sorted PTX hashes: equal between two runs when they launched the same code."""
        return {name: sorted(hashes) for name, hashes in self.ptx.items()}

    def take_code(self) -> dict[str, list[str]]:
        """`code()`, then forget the hashes (the names stay), so the next run's code is its own."""
        code = self.code()
        self.ptx.clear()
        return code


def same_code(a: Optional[dict], b: Optional[dict]) -> bool:
    """Two runs launched the same kernels with byte-identical PTX (`Launches.code()` of each; none: not known)."""
    return bool(a) and a == b


@contextlib.contextmanager
def launched_kernels() -> Iterator[Launches]:
    """Record the Triton kernels launched inside the block (`Launches`)."""
    launched = Launches()
    real_run = JITFunction.run

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        name = self.fn.__name__
        if name not in launched.names:
            launched.names.append(name)
        kernel = real_run(self, *args, **kwargs)
        ptx = getattr(kernel, "asm", {}).get("ptx")
        if ptx:
            digest = hashlib.sha256(ptx.encode()).hexdigest()
            if digest not in launched.ptx.setdefault(name, []):
                launched.ptx[name].append(digest)
        return kernel

    JITFunction.run = run
    try:
        yield launched
    finally:
        JITFunction.run = real_run


def _need_cuda() -> None:
    if not torch.cuda.is_available():
        raise UsageError("--gpu needs a CUDA GPU (torch.cuda.is_available() is False); drop --gpu to use the "
                         "emulated B200")


def gpu_worker(case_name: str, mode: str, result: Path, all_configs: bool = False) -> int:
    """One case in this process: plain Triton twice (`mode` plain) or under `bwtriton.enable()`; the outputs go
    to `result` (torch.save) for `run_gpu_parallel`. Autotuned kernels take their first config unless
    `all_configs`."""
    _need_cuda()
    (c,) = select_cases(None, [case_name], sample=False)
    t0 = time.perf_counter()
    with launched_kernels() as launched, contextlib.nullcontext() if all_configs else first_config_only():
        if mode == "plain":
            ok, msg, _, checks = run_case(c)
            again = run_case(c)[3]
        else:
            with bwtriton.enable():
                ok, msg, _, checks = run_case(c)
            again = []
    outputs = [[(x.label, torch.as_tensor(x.got).detach().cpu()) for x in cs] for cs in (checks, again)]
    torch.save({"ok": ok, "msg": msg, "checks": outputs[0], "again": outputs[1], "kernels": list(launched.names),
                "ptx": launched.code(), "seconds": time.perf_counter() - t0}, result)
    return 0


def _worker_result(c: Case, mode: str, folder: Path, timeout_s: float, all_configs: bool) -> dict:
    """Run `gpu-worker` for one (case, mode) in a fresh process; a process that dies (plain Triton's LLVM
    aborts) or overruns is a failed run with its reason."""
    path = folder / f"{c.library}.{c.name}.{mode}.pt"
    cmd = [sys.executable, str(Path(__file__).resolve()), "gpu-worker", "--case", f"{c.library}:{c.name}",
           "--mode", mode, "--result", str(path)] + (["--all-configs"] if all_configs else [])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"ok": False, "msg": f"no result within {timeout_s:.0f}s", "checks": [], "again": [], "kernels": []}
    if proc.returncode != 0 or not path.exists():
        tail = [ln for ln in (proc.stderr or "").splitlines() if ln.strip()][-1:] or [""]
        return {"ok": False, "msg": f"process exited with status {proc.returncode}: {tail[0][:240]}",
                "checks": [], "again": [], "kernels": []}
    return torch.load(path, weights_only=False)


def _as_checks(outputs: Sequence[tuple]) -> list[Check]:
    return [Check(label, got, got, 0.0, 0.0) for label, got in outputs]


def run_gpu_parallel(cases: Sequence[Case], jobs: int, out: Path, log: Callable[[str], None] = progress,
                     timeout_s: float = 200.0, all_configs: bool = False) -> list[dict]:
    """`run_gpu` with each case's plain and bwtriton runs in processes of their own, `jobs` at a time (they
    share Triton's cache): a plain-Triton abort ends only its own process, and compiles use every core.
    Autotuned kernels take their first config unless `all_configs`. gpu.json is rewritten as rows come in,
    in case order."""
    _need_cuda()
    folder = out / "gpu_outputs"
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {(c.name, c.library, mode): pool.submit(_worker_result, c, mode, folder, timeout_s, all_configs)
                   for c in cases for mode in ("plain", "bwtriton")}
        rows = []
        for i, c in enumerate(cases, 1):
            plain = futures[c.name, c.library, "plain"].result()
            ours = futures[c.name, c.library, "bwtriton"].result()
            rows.append(gpu_row(c, (plain["ok"], plain["msg"], _as_checks(plain["checks"])),
                                _as_checks(plain["again"]), (ours["ok"], ours["msg"], _as_checks(ours["checks"])),
                                plain["kernels"] or ours["kernels"], time.perf_counter() - t0,
                                same_ptx=same_code(plain.get("ptx"), ours.get("ptx"))))
            _log_gpu_row(i, len(cases), rows[-1], log)
            (out / "gpu.json").write_text(json.dumps(rows, indent=1))
    return rows


def run_gpu(cases: Sequence[Case], log: Callable[[str], None] = progress, out: Optional[Path] = None,
            all_configs: bool = False) -> list[dict]:
    """On a CUDA GPU: each case under plain Triton and under `bwtriton.enable()`; outputs compared bitwise.
    Autotuned kernels take their first config unless `all_configs`. With `out`, gpu.json is rewritten after
    every case, so a crash (plain Triton aborts on some forms) keeps the rows so far."""
    _need_cuda()
    rows = []
    with launched_kernels() as launched, contextlib.nullcontext() if all_configs else first_config_only():
        for i, c in enumerate(cases, 1):
            launched.clear()
            t0 = time.perf_counter()
            plain_ok, plain_msg, _, plain = run_case(c)
            _, _, _, again = run_case(c)  # a second plain run: atomics make some kernels run-to-run different
            plain_code = launched.take_code()
            with bwtriton.enable():
                bw_ok, bw_msg, _, ours = run_case(c)
            rows.append(gpu_row(c, (plain_ok, plain_msg, plain), again, (bw_ok, bw_msg, ours), launched.names,
                                time.perf_counter() - t0, same_ptx=same_code(plain_code, launched.code())))
            if out is not None:
                (out / "gpu.json").write_text(json.dumps(rows, indent=1))
            _log_gpu_row(i, len(cases), rows[-1], log)
    return rows


# ------------------------------------------------------------------------------------------------------------------
# output
# ------------------------------------------------------------------------------------------------------------------

def library_summary(lib: str, kernels: Sequence[KernelRecord], results: Sequence[CaseResult]) -> str:
    ks = [k for k in kernels if k.library == lib]
    cs = [r for r in results if r.library == lib]
    clean = sum(k.clean for k in ks)
    pct = 100.0 * clean / len(ks) if ks else 0.0
    return (f"{lib}: {len(ks)} kernels ({sum(k.tcgen05 for k in ks)} with tcgen05.mma), "
            f"{sum(k.compiled for k in ks)} compiled, "
            f"{sum(k.compiled and k.verifier_errors == 0 for k in ks)} compiled without verifier errors, "
            f"{clean} clean ({pct:.0f}%), cases {sum(r.passed for r in cs)}/{len(cs)} pass, "
            f"{sum(bool(k.disagreement) for k in ks)} disagreements")


def gpu_summary(lib: str, rows: Sequence[dict]) -> str:
    rs = [r for r in rows if r["library"] == lib]
    return (f"{lib}: {len(rs)} cases on the GPU, plain Triton {sum(r['plain_pass'] for r in rs)} pass, "
            f"bwtriton.enable() {sum(r['bwtriton_pass'] for r in rs)} pass, "
            f"{sum(r['equal'] for r in rs)} bitwise equal, "
            f"{sum(r.get('within_spread', r['equal']) and not r['equal'] for r in rs)} within plain Triton's own "
            f"run-to-run spread")


def _yn(v: Optional[bool]) -> str:
    return "-" if v is None else ("yes" if v else "**no**")


def _gpu_counts(rows: Sequence[dict]) -> str:
    if not rows:
        return "-"
    plain = [r for r in rows if r["plain_pass"]]
    return f"{sum(r.get('within_spread', r['equal']) for r in plain)} / {len(plain)} / {len(rows)}"


def _gpu_cell(rows: Sequence[dict]) -> str:
    """A kernel's H200 column over the cases that launched it: equal where plain Triton works; a kernel only
    bwtriton runs is said so."""
    if not rows:
        return "-"
    plain = [r for r in rows if r["plain_pass"]]
    if plain:
        return _yn(all(r.get("within_spread", r["equal"]) for r in plain))
    return "plain fails, bwtriton passes" if all(r["bwtriton_pass"] for r in rows) else "**no**"


def render_table(results: Sequence[CaseResult], kernels: Sequence[KernelRecord],
                 gpu_rows: Optional[Sequence[dict]] = None) -> str:
    """The generated part of docs/third_party.md: summary per library, then one row per kernel."""
    gpu_by_case = {(r["library"], r["case"]): r for r in gpu_rows or []}
    lines = ["| library | kernels | tcgen05.mma | compiled | zero verifier errors | emulated pass | clean | "
             "disagreements | H200 cases: equal / plain works / run |", "|---|---|---|---|---|---|---|---|---|"]
    for lib in sorted({k.library for k in kernels} | {r.library for r in results}):
        ks = [k for k in kernels if k.library == lib]
        clean = sum(k.clean for k in ks)
        lines.append(f"| {lib} | {len(ks)} | {sum(k.tcgen05 for k in ks)} | {sum(k.compiled for k in ks)} | "
                     f"{sum(k.compiled and k.verifier_errors == 0 for k in ks)} | "
                     f"{sum(bool(k.numerics_pass) and not k.emulator_error for k in ks)} | "
                     f"{clean} ({100.0 * clean / max(1, len(ks)):.0f}%) | {sum(bool(k.disagreement) for k in ks)} | "
                     f"{_gpu_counts([r for r in gpu_rows or [] if r['library'] == lib])} |")
    lines += ["", "| library | kernel | cases | tcgen05.mma | compiled | verifier errors / warnings | emulated pass | "
              "H200 equal | note |", "|---|---|---|---|---|---|---|---|---|"]
    for k in sorted(kernels, key=lambda k: (k.library, k.name, k.hash)):
        gpu = [g for g in (gpu_by_case.get((k.library, c)) for c in k.cases) if g]
        emu_ok = bool(k.numerics_pass) and not k.emulator_error
        note = k.disagreement or k.compile_error or k.emulator_error or (
            "" if emu_ok else "numerics outside tolerance")
        lines.append(f"| {k.library} | `{k.name}` | {', '.join(k.cases)} | {'yes' if k.tcgen05 else ''} | "
                     f"{_yn(k.compiled)} | "
                     f"{k.verifier_errors} / {k.verifier_warnings} | {_yn(emu_ok)} | {_gpu_cell(gpu)} | "
                     f"{note.replace('|', '/')} |")
    failed = [r for r in results if not r.passed]
    if failed:
        lines += ["", "Failed cases:", ""] + [f"* `{r.library}:{r.name}`: {r.message}" for r in failed]
    return "\n".join(lines) + "\n"


BEGIN, END = "<!-- third_party table: begin -->", "<!-- third_party table: end -->"


def write_docs(path: Path, table: str) -> None:
    """Replace the generated block of `path` (between the BEGIN/END markers) with `table`."""
    text = path.read_text() if path.exists() else ""
    if BEGIN not in text or END not in text:
        raise UsageError(f"{path} has no generated block; add the lines {BEGIN} and {END} where the table goes")
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    path.write_text(f"{head}{BEGIN}\n{table}{END}{tail}")


def save_emulated(out: Path, results: Sequence[CaseResult], kernels: Sequence[KernelRecord]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "ptx").mkdir(exist_ok=True)
    for k in kernels:
        if k.ptx:
            (out / "ptx" / f"{k.library}.{k.name}.{k.hash[:12]}.ptx").write_text(k.ptx)
    data = {"cases": [asdict(r) for r in results],
            "kernels": [{**{f: v for f, v in asdict(k).items() if f != "ptx"}, "clean": k.clean} for k in kernels]}
    (out / "emulated.json").write_text(json.dumps(data, indent=1, default=str))


def load_emulated(path: Path) -> tuple[list[CaseResult], list[KernelRecord]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {path}: {exc}; pass the emulated.json a `run --out DIR` wrote") from None
    results = [CaseResult(**r) for r in data["cases"]]
    kernels = [KernelRecord(**{f: v for f, v in k.items() if f != "clean"}) for k in data["kernels"]]
    return results, kernels


# ------------------------------------------------------------------------------------------------------------------
# command line
# ------------------------------------------------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="third_party.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run cases (emulated B200 by default, --gpu on a CUDA GPU)")
    r.add_argument("--library", help="comma-separated: " + ", ".join(sorted(LIBRARIES)))
    r.add_argument("--case", action="append", help="a case name (repeatable); `list` shows them")
    r.add_argument("--sample", action="store_true", help="only the fast CI sample")
    r.add_argument("--all-configs", action="store_true", help="benchmark every autotune config (slow)")
    r.add_argument("--passes", default=EMULATED_PASSES,
                   help=f"bwtriton pass spec for emulated runs (default {EMULATED_PASSES!r}; 'none': Triton's own PTX)")
    r.add_argument("--strict-bounds", action="store_true",
                   help="any access outside a tensor faults (BWTRITON_EMU_STRICT_BOUNDS=1): finds reads past tensors "
                        "that the emulator's read slack otherwise serves")
    r.add_argument("--gpu", action="store_true", help="on a CUDA GPU: plain Triton vs bwtriton.enable()")
    r.add_argument("--jobs", type=int, default=0,
                   help="with --gpu: run each case's plain and bwtriton runs in processes of their own, this many "
                        "at a time (needs --out)")
    r.add_argument("--out", type=Path, help="folder for emulated.json / gpu.json (and the kernels' PTX)")
    r.add_argument("--docs", type=Path, help="update the table in this markdown file (e.g. docs/third_party.md)")
    t = sub.add_parser("table", help="render the docs table from saved results")
    t.add_argument("--emulated", type=Path, required=True, help="emulated.json from `run --out`")
    t.add_argument("--gpu-results", type=Path, help="gpu.json from `run --gpu --out`")
    t.add_argument("--docs", type=Path, help="markdown file to update (default: print)")
    sub.add_parser("list", help="the cases, per library")
    w = sub.add_parser("gpu-worker", help="one case in this process, for `run --gpu --jobs` (not for direct use)")
    w.add_argument("--case", required=True)
    w.add_argument("--mode", choices=("plain", "bwtriton"), required=True)
    w.add_argument("--result", type=Path, required=True)
    w.add_argument("--all-configs", action="store_true")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        return _main(_parser().parse_args(argv))
    except UsageError as exc:
        print(f"third_party.py: error: {exc}", file=sys.stderr)
        return 2


def _main(args: argparse.Namespace) -> int:
    if args.command == "list":
        for c in CASES:
            print(f"{c.library}:{c.name}{'  (sample)' if c.sample else ''}")
        return 0
    if args.command == "gpu-worker":
        return gpu_worker(args.case, args.mode, args.result, args.all_configs)
    if args.command == "table":
        results, kernels = load_emulated(args.emulated)
        rows = json.loads(args.gpu_results.read_text()) if args.gpu_results else None
        table = render_table(results, kernels, rows)
        write_docs(args.docs, table) if args.docs else print(table, end="")
        return 0
    libs = [s.strip() for s in args.library.split(",")] if args.library else None
    cases = select_cases(libs, args.case, args.sample)
    if not cases:
        raise UsageError("no case selected")
    missing = missing_libraries(sorted({c.library for c in cases}))
    if missing:
        raise UsageError(f"not installed: {', '.join(missing)}; `pip install -e .[thirdparty]` (or pip install "
                         "the wheels with --no-deps into a folder on PYTHONPATH)")
    if args.gpu:
        if args.docs:
            raise UsageError("--docs with --gpu: render the table afterwards with `table --emulated ... "
                             "--gpu-results DIR/gpu.json --docs ...`")
        if args.jobs < 0 or (args.jobs and not args.out):
            raise UsageError("--jobs N (N >= 1) keeps each case's outputs in files: give --out DIR too")
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
        rows = (run_gpu_parallel(cases, args.jobs, args.out, all_configs=args.all_configs) if args.jobs
                else run_gpu(cases, out=args.out, all_configs=args.all_configs))
        for lib in sorted({c.library for c in cases}):
            print(gpu_summary(lib, rows))
        return 0 if all(r["within_spread"] or not r["plain_pass"] for r in rows) else 1
    if args.strict_bounds:
        os.environ["BWTRITON_EMU_STRICT_BOUNDS"] = "1"
    results, kernels = run_emulated(cases, args.all_configs, passes=args.passes)
    if args.out:
        save_emulated(args.out, results, kernels)
    if args.docs:
        write_docs(args.docs, render_table(results, kernels))
    for lib in sorted({c.library for c in cases}):
        print(library_summary(lib, kernels, results))
    return 0 if all(k.clean for k in kernels) and all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
