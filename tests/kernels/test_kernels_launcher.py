"""Host-side machinery of the kernels, without a GPU: cached launchers (launch path mocked), decode's tuning
candidates, nvfp4_linear's dispatch inputs, the import structure of the kernels package, and clear errors."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
import torch

from bwtriton.errors import InputError
from bwtriton.formats import nvfp4_global_encode_scale, quantize_nvfp4
from bwtriton.kernels import _launcher

decode = importlib.import_module("bwtriton.kernels.decode")
linear = importlib.import_module("bwtriton.kernels.nvfp4_linear")
KERNELS_DIR = Path(importlib.import_module("bwtriton.kernels").__file__).parent


class _FakeCompiled:
    function = "fn-handle"
    packed_metadata = ("meta",)

    def __init__(self):
        self.calls = []
        self.metadata_calls = 0

    def run(self, *call):
        self.calls.append(call)

    def launch_metadata(self, grid, stream, *args):
        self.metadata_calls += 1
        return {"grid": grid}


@pytest.fixture
def fake_launcher(monkeypatch):
    """A CachedLauncher for the GEMV kernel whose JIT path and stream lookup are replaced by fakes."""
    compiled = _FakeCompiled()
    launcher = _launcher.CachedLauncher(decode.nvfp4_gemv_kernel, pipeline=False)
    jit_calls = []

    def fake_jit(grid, device, args, kwargs):
        jit_calls.append((tuple(grid), kwargs))
        launcher.jit_launches += 1
        return compiled, launcher._tail(len(args), kwargs)

    monkeypatch.setattr(launcher, "_jit_launch", fake_jit)
    monkeypatch.setattr(_launcher, "_current_stream", lambda device: 1234)
    return launcher, compiled, jit_calls


def _gemv_args(x=None):
    x = torch.zeros(1, 128, dtype=torch.int32) if x is None else x
    return (x, torch.zeros(8, 256, dtype=torch.uint8), torch.zeros(8, 32, dtype=torch.uint8),
            torch.zeros(1, 8), torch.ones(1), torch.zeros(8), 1, 8, 512, 128, 256, 8)


_GEMV_KW = dict(SCALE_BLOCKED=False, BLOCK_M=1, ROWS_PER_THREAD=2, THREADS_N=1, SPLIT_K=1, num_warps=4)


def test_tail_is_constexprs_in_signature_order_with_defaults():
    launcher = _launcher.CachedLauncher(decode.nvfp4_gemv_kernel, pipeline=False)
    tail = launcher._tail(12, dict(_GEMV_KW, THREADS_N=2))
    # SCALE_BLOCKED, BLOCK_M, ROWS_PER_THREAD, THREADS_N, SPLIT_K, then the defaults TWO_STEPS, GROUPS_PER_THREAD,
    # HAS_BIAS
    assert tail == (False, 1, 2, 2, 1, False, 2, False)


def test_first_call_compiles_later_calls_launch_the_compiled_kernel(fake_launcher):
    launcher, compiled, jit_calls = fake_launcher
    device = torch.device("cuda", 0)
    args = _gemv_args()
    for _ in range(3):
        launcher.launch(("k",), (4,), device, args, _GEMV_KW)
    assert len(jit_calls) == 1 and launcher.jit_launches == 1 and len(launcher) == 1
    assert len(compiled.calls) == 2
    call = compiled.calls[0]
    assert call[:7] == (4, 1, 1, 1234, "fn-handle", ("meta",), None)  # grid padded to 3-D, no launch metadata
    assert call[9:9 + len(args)] == args
    assert call[9 + len(args):] == (False, 1, 2, 1, 1, False, 2, False)


def test_misaligned_pointer_is_its_own_entry(fake_launcher):
    """Triton specialises pointers on 16-byte alignment, so a view at an odd offset must not reuse the
    aligned compile."""
    launcher, compiled, jit_calls = fake_launcher
    device = torch.device("cuda", 0)
    base = torch.zeros(1, 129, dtype=torch.int32)
    launcher.launch(("k",), (4,), device, _gemv_args(base[:, :128]), _GEMV_KW)
    launcher.launch(("k",), (4,), device, _gemv_args(base[:, 1:]), _GEMV_KW)
    assert len(jit_calls) == 2 and len(launcher) == 2


def test_launch_enter_hook_gets_metadata(fake_launcher, monkeypatch):
    from triton import knobs
    launcher, compiled, _ = fake_launcher
    device = torch.device("cuda", 0)
    launcher.launch(("k",), (4, 2), device, _gemv_args(), _GEMV_KW)
    hook = lambda meta: None  # noqa: E731
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", hook)
    launcher.launch(("k",), (4, 2), device, _gemv_args(), _GEMV_KW)
    assert compiled.metadata_calls == 1
    assert compiled.calls[-1][:2] == (4, 2) and compiled.calls[-1][6] == {"grid": (4, 2, 1)}
    assert compiled.calls[-1][7] is hook


def test_empty_hook_chains_launch_as_no_hooks(fake_launcher, monkeypatch):
    """An empty HookChain (Triton's default) goes to the C launcher as None, without launch metadata; a chain
    holding a hook goes as itself, with metadata."""
    from triton import knobs
    launcher, compiled, _ = fake_launcher
    device = torch.device("cuda", 0)
    launcher.launch(("k",), (4,), device, _gemv_args(), _GEMV_KW)
    chain, empty = knobs.HookChain(), knobs.HookChain(reversed=True)
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", chain)
    monkeypatch.setattr(knobs.runtime, "launch_exit_hook", empty)
    launcher.launch(("k",), (4,), device, _gemv_args(), _GEMV_KW)
    assert compiled.metadata_calls == 0 and compiled.calls[-1][7] is None and compiled.calls[-1][8] is None
    chain.add(lambda meta: None)
    launcher.launch(("k",), (4,), device, _gemv_args(), _GEMV_KW)
    assert compiled.metadata_calls == 1 and compiled.calls[-1][7] is chain and compiled.calls[-1][8] is None


# ----------------------------------------------------------------------------------------- decode tuning
_SHAPES = [(8192, 8192), (7168, 16384), (4096, 7168), (7168, 2048)]


@pytest.mark.parametrize("m", [1, 2, 4, 8, 16, 64])
@pytest.mark.parametrize("n,k", _SHAPES)
def test_decode_candidates_tile_the_shape_and_fit_registers(m, n, k):
    cands = decode.decode_candidates(m, n, k, num_sms=132)
    # tuning must stay quick (one compile, ~1-2 s, per candidate per process); the frag configs with split-K come
    # twice (reduced after the launch or inside it)
    assert cands and len(cands) <= 25
    for cfg in cands:
        if cfg["path"] == "frag":
            assert m <= 16 and n % (16 * cfg["TILES_PER_THREAD"] * cfg["num_warps"]) == 0
            assert (k // 64) % (cfg["CHUNKS_PER_STEP"] * cfg["SPLIT_K"]) == 0
        elif cfg["path"] == "gemv":
            groups = cfg["GROUPS_PER_THREAD"]
            block_n = cfg["ROWS_PER_THREAD"] * cfg["THREADS_N"] * cfg["num_warps"]
            block_k = 512 * groups // cfg["THREADS_N"] * (2 if cfg["TWO_STEPS"] else 1)
            assert n % block_n == 0 and k % (block_k * cfg["SPLIT_K"]) == 0 and cfg["BLOCK_M"] >= m
            assert decode._gemv_fits(m, cfg["ROWS_PER_THREAD"], groups, cfg["TWO_STEPS"])
        elif cfg["path"] != "dequant_gemm":  # mma.sync and the wgmma mixed GEMM
            assert n % cfg["BLOCK_N"] == 0 and k % (cfg["BLOCK_K"] * cfg["SPLIT_K"]) == 0
    labels = [decode.config_label(c) for c in cands]
    assert len(set(labels)) == len(labels)
    assert any(c["path"] == "mma" for c in cands)


def test_decode_candidates_at_m1_cover_gemv_rows_wide_loads_and_tensor_cores():
    cands = decode.decode_candidates(1, 8192, 8192)
    gemv = {(c["ROWS_PER_THREAD"], c["GROUPS_PER_THREAD"], c["TWO_STEPS"]) for c in cands if c["path"] == "gemv"}
    assert {(1, 2, False), (2, 2, False), (4, 2, False), (1, 4, False), (1, 2, True)} <= gemv
    assert any(c["path"] == "gemv" and c["num_warps"] == 8 and c["ROWS_PER_THREAD"] == 4 for c in cands)
    assert not any(c["path"] == "gemv" for c in decode.decode_candidates(16, 8192, 8192))


def test_decode_candidates_take_the_frag_path_up_to_m16_unless_disabled(monkeypatch):
    assert any(c["path"] == "frag" for c in decode.decode_candidates(16, 8192, 8192))
    assert not any(c["path"] == "frag" for c in decode.decode_candidates(17, 8192, 8192))
    # K = 7168 has 112 chunks of 64: the sweep's split 16 / 32 shapes are lowered until they divide it
    assert {c["SPLIT_K"] for c in decode.decode_candidates(1, 4096, 7168) if c["path"] == "frag"} <= {1, 2, 4, 8, 16}
    monkeypatch.setenv("BWTRITON_DECODE_FRAG", "0")
    assert not any(c["path"] == "frag" for c in decode.decode_candidates(1, 8192, 8192))


def test_decode_user_config_errors_name_the_keys():
    with pytest.raises(InputError, match=r"unknown config keys \['BOGUS'\]"):
        decode._user_config("nvfp4_decode_matmul", {"BOGUS": 1}, 1, 8192, 8192, 132)
    with pytest.raises(InputError, match="'gemv' .*, 'mma' / 'frag' .*'wgmma' .* or 'dequant_gemm'"):
        decode._user_config("nvfp4_decode_matmul", {"path": "simt"}, 1, 8192, 8192, 132)


def test_decode_frag_config_errors_say_what_tiles():
    with pytest.raises(InputError, match="frag path takes M <= 16, got M=17; use path 'mma'"):
        decode._user_config("nvfp4_decode_matmul", {"path": "frag"}, 17, 8192, 8192, 132)
    cfg = decode._user_config("nvfp4_decode_matmul", {"path": "frag", "TILES_PER_THREAD": 4, "num_warps": 8},
                              1, 256, 256, 132)
    w_q = quantize_nvfp4(torch.randn(256, 256))
    x = torch.randn(1, 256).bfloat16()
    with pytest.raises(InputError, match=r"N a multiple of 16\*TILES_PER_THREAD\*num_warps=512"):
        decode._launch_frag("nvfp4_decode_matmul", x, w_q, torch.ones(1), None, cfg, torch.bfloat16)


def test_decode_rejects_cpu_inputs_after_caching_the_weight_check():
    w_q = quantize_nvfp4(torch.randn(64, 256))
    for _ in range(2):  # the second call takes the cached weight check and must still refuse CPU tensors
        with pytest.raises(InputError, match="runs on a CUDA GPU"):
            decode.nvfp4_decode_matmul(torch.randn(1, 256).bfloat16(), w_q)


# --------------------------------------------------------------------------------------------- linear
@pytest.mark.parametrize("x", [torch.randn(7, 33), torch.zeros(3, 16), torch.full((2, 16), 1e-40),
                               torch.randn(5, 16) * 1e30])
def test_capturable_encode_scale_is_bit_equal_to_formats(x):
    assert torch.equal(linear.amax_encode_scale(x.bfloat16()).reshape(()), nvfp4_global_encode_scale(x.bfloat16()))


def test_linear_form_must_be_known():
    w_q = quantize_nvfp4(torch.randn(64, 128))
    with pytest.raises(InputError, match="form must be one of 'auto', 'fused', 'two_kernel', 'dequant_decode'"):
        linear.nvfp4_linear(torch.randn(2, 128).bfloat16(), w_q, form="fast")


@pytest.mark.parametrize("x,s_enc,match", [
    (torch.randn(4, 256).bfloat16(), torch.ones(1), "runs on a CUDA GPU.*quantize_nvfp4 computes the same"),
    (torch.randn(4, 256), torch.ones(1), "x has dtype float32"),
    (torch.randn(4, 200).bfloat16(), torch.ones(1), "must be a positive multiple of 128"),
    (torch.randn(4, 256).bfloat16(), torch.ones(2), "s_enc must hold one value"),
    (torch.randn(4, 256).bfloat16(), torch.ones(1, dtype=torch.float64), "s_enc has dtype float64"),
])
def test_quantize_nvfp4_pdl_without_gpu_gives_clear_errors(x, s_enc, match):
    with pytest.raises(InputError, match=match):
        linear.quantize_nvfp4_pdl(x, s_enc)


# ------------------------------------------------------------------------------------ package structure
def _kernel_imports(module: str) -> set[str]:
    tree = ast.parse((KERNELS_DIR / f"{module}.py").read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            found.add(node.module)
        elif isinstance(node, ast.ImportFrom) and node.level == 1:
            found.update(alias.name for alias in node.names)
    return found


def test_kernel_modules_import_each_other_without_cycles():
    """One allowed direction between the torch-facing kernel modules (nvfp4_linear launches the decode kernels;
    decode tunes over the mixed GEMMs (Triton and two in Gluon) and dequantize + matmul; blockscaled's dequant path runs
    matmul), never a cycle; the rest is shared via _common."""
    modules = {p.stem for p in KERNELS_DIR.glob("*.py") if not p.stem.startswith("_")}
    graph = {m: _kernel_imports(m) & modules for m in modules}
    assert graph["nvfp4_linear"] & {"decode", "nvfp4_dequant"} == {"decode", "nvfp4_dequant"}

    def reaches(start: str, goal: str, seen: set) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n})) for n in graph[start])
    for module in modules:
        assert not reaches(module, module, set()), f"import cycle through {module}"
    assert graph["decode"] <= {"mixed_gemm", "gluon_mixed", "dq_wgmma", "matmul", "nvfp4_dequant"}
    assert not graph["nvfp4_dequant"] and not graph["matmul"]  # the leaves the others build on


def test_package_exports_every_entry_point_without_fallback_imports():
    import bwtriton.kernels as kernels
    for name in ("matmul", "nvfp4_matmul", "mxfp4_matmul", "mxfp8_matmul", "nvfp4_decode_matmul",
                 "nvfp4_linear", "nvfp4_linear_two_kernel", "quantize_nvfp4_pdl"):
        assert callable(getattr(kernels, name)) and name in kernels.__all__
    tree = ast.parse((KERNELS_DIR / "__init__.py").read_text())
    assert not any(isinstance(node, ast.Try) for node in ast.walk(tree))


def test_decode_scale_arg_views_fp32_and_caches_conversions_weakly():
    import gc

    from bwtriton.formats import QuantizedTensor
    from bwtriton.kernels._common import _DECODE_SCALES, decode_scale_arg
    cpu = torch.device("cpu")
    q = quantize_nvfp4(torch.randn(16, 32))
    arg = decode_scale_arg(q, cpu)
    q.global_scale.mul_(2)  # a view: in-place edits of the weight's scale are seen
    assert arg.shape == (1,) and arg.item() == q.global_scale.item()
    q64 = QuantizedTensor(data=q.data, scales=q.scales, scale_layout="plain", format="nvfp4", shape=q.shape,
                          global_scale=torch.tensor(0.25, dtype=torch.float64))
    first = decode_scale_arg(q64, cpu)
    assert first.dtype == torch.float32 and first.item() == 0.25 and decode_scale_arg(q64, cpu) is first
    q64.global_scale.fill_(0.5)  # bumps the version counter: converted again
    assert decode_scale_arg(q64, cpu).item() == 0.5
    before = len(_DECODE_SCALES)
    del q64, first
    gc.collect()
    assert len(_DECODE_SCALES) == before - 1  # the entry went with its scale tensor


# ------------------------------------------------------------------ plans launch what the slow path launches
class _Recorder(_FakeCompiled):
    def __init__(self):
        super().__init__()
        self.runs = []

    def run(self, *call):
        self.runs.append(call[9:])  # the kernel arguments (positional + constexpr tail)


@pytest.fixture
def cpu_launch(monkeypatch):
    """Kernels 'launch' on CPU tensors into a recorder: device checks pass for CPU, the JIT path is faked."""
    from bwtriton.kernels import _validate
    rec = _Recorder()

    def fake_jit(self, grid, device, args, kwargs):
        params = {k: v for k, v in kwargs.items() if k not in _launcher._LAUNCH_OPTIONS}
        return rec, self._tail(len(args), params)

    monkeypatch.setattr(_launcher.CachedLauncher, "_jit_launch", fake_jit)
    monkeypatch.setattr(_launcher, "_current_stream", lambda device: 0)
    monkeypatch.setattr(_validate.InputChecker, "on_cuda", lambda self, tensors, hint="": torch.device("cpu"))
    monkeypatch.setattr(decode, "sm_count", lambda device: 132)
    yield rec
    # Forget the fake entries and the CPU plans, so no later test can meet them.
    mm = importlib.import_module("bwtriton.kernels.matmul")
    dq = importlib.import_module("bwtriton.kernels.nvfp4_dequant")
    for launcher in (decode._GEMV_LAUNCHER, decode._MMA_LAUNCHER, decode._FRAG_LAUNCHER, decode._WIDE_LAUNCHER,
                     linear._FUSED, linear._QUANT, linear._PDL_GEMM,
                     mm._LAUNCHER, dq._QDQ, dq._AMAX, dq._DEQUANT):
        for key in [key for key, entry in launcher._entries.items() if entry[0] is rec]:
            del launcher._entries[key]
    for plans in (decode._PLANS, linear._PLANS):
        for key in [key for key in plans if torch.device("cpu") in key]:
            del plans[key]


def _same_launch(a: tuple, b: tuple) -> bool:
    """Equal kernel arguments: tensors by dtype/shape/strides (and pointer for weights: `keep`), descriptors by
    their base's layout and block, scalars by value."""
    def norm(v):
        if isinstance(v, torch.Tensor):
            return ("T", v.dtype, tuple(v.shape), v.stride())
        if hasattr(v, "block_shape"):
            return ("D", v.base.dtype, tuple(v.shape), tuple(v.strides), tuple(v.block_shape))
        return v
    return len(a) == len(b) and all(norm(x) == norm(y) for x, y in zip(a, b))


@pytest.mark.parametrize("path", ["gemv", "mma"])
def test_decode_plan_launches_what_the_slow_path_does(cpu_launch, path, monkeypatch):
    m, n, k = 2, 256, 2048
    w_q = quantize_nvfp4(torch.randn(n, k))
    cfg = decode.default_config(m, n, k) if path == "gemv" else dict(decode.decode_config(m, n, k), path="mma")
    monkeypatch.setitem(decode._TUNED, (None, m, n, k, "plain", torch.bfloat16), cfg)
    x1, x2 = torch.randn(m, k).bfloat16(), torch.randn(m, k).bfloat16()
    decode.nvfp4_decode_matmul(x1, w_q)              # slow path: makes the launcher entry and the plan
    plans = len(decode._PLANS)
    decode.nvfp4_decode_matmul(x2, w_q)              # plan
    assert len(decode._PLANS) == plans
    decode.nvfp4_decode_matmul(x2, w_q, config=cfg)  # slow path again (config given: no plan)
    plan_args, slow_args = cpu_launch.runs[-2], cpu_launch.runs[-1]
    assert _same_launch(plan_args, slow_args)
    assert plan_args[1] is w_q.data and plan_args[2] is w_q.scales
    assert plan_args[0].data_ptr() == x2.data_ptr()


@pytest.mark.parametrize("form,with_bias", [("fused", False), ("two_kernel", True)])
def test_linear_plan_launches_what_the_slow_path_does(cpu_launch, form, with_bias):
    m, n, k = 16, 128, 256
    w_q = quantize_nvfp4(torch.randn(n, k))
    bias = torch.randn(n).bfloat16() if with_bias else None
    x1, x2 = torch.randn(m, k).bfloat16(), torch.randn(m, k).bfloat16()
    linear.nvfp4_linear(x1, w_q, bias, x_global_scale=0.01, form=form)   # slow path + plan
    plans = len(linear._PLANS)
    before = len(cpu_launch.runs)
    linear.nvfp4_linear(x2, w_q, bias, x_global_scale=0.01, form=form)   # plan
    assert len(linear._PLANS) == plans
    plan_runs = cpu_launch.runs[before:]
    linear._PLANS.clear()
    linear.nvfp4_linear(x2, w_q, bias, x_global_scale=0.01, form=form)   # slow path (entries exist: run_entry)
    slow_runs = cpu_launch.runs[before + len(plan_runs):]
    assert len(plan_runs) == len(slow_runs) == (1 if form == "fused" else 2)
    for p, s in zip(plan_runs, slow_runs):
        assert _same_launch(p, s)
    args = plan_runs[-1]  # fused: (x, s_enc, w, ws, w_dec, bias, out, ..); GEMM: (xq, xs, s_enc, w, ..)
    w_at = 2 if form == "fused" else 3
    assert args[w_at] is w_q.data and args[w_at + 1] is w_q.scales
    # without a bias the output pointer stands in for it (HAS_BIAS=False never reads it)
    assert args[w_at + 3] is bias if with_bias else args[w_at + 3] is args[w_at + 4]


@pytest.mark.parametrize("with_bias,scale,m,k,launches", [(False, 0.01, 16, 256, 2), (True, None, 16, 256, 2),
                                                           (False, None, 64, 512, 3)])
def test_linear_dequant_decode_plan_launches_what_the_slow_path_does(cpu_launch, monkeypatch, with_bias, scale, m,
                                                                     k, launches):
    """quantize-dequantize x, then the decode kernel reading the alpha that the first kernel wrote (with the x
    scale from amax, the first kernel computes it itself for a small x, and a larger x gets the single-CTA amax
    kernel first); the plan repeats exactly those launches."""
    n = 128
    monkeypatch.setitem(decode._TUNED, (None, m, n, k, "plain", torch.bfloat16),
                        dict(decode.decode_config(m, n, k), path="mma"))
    w_q = quantize_nvfp4(torch.randn(n, k))
    bias = torch.randn(n).bfloat16() if with_bias else None
    x1, x2 = torch.randn(m, k).bfloat16(), torch.randn(m, k).bfloat16()
    form = "dequant_decode"
    linear.nvfp4_linear(x1, w_q, bias, x_global_scale=scale, form=form)   # slow path + plan
    before = len(cpu_launch.runs)
    linear.nvfp4_linear(x2, w_q, bias, x_global_scale=scale, form=form)   # plan
    plan_runs = cpu_launch.runs[before:]
    linear._PLANS.clear()
    linear.nvfp4_linear(x2, w_q, bias, x_global_scale=scale, form=form)   # slow path
    slow_runs = cpu_launch.runs[before + len(plan_runs):]
    assert len(plan_runs) == len(slow_runs) == launches
    for p, s in zip(plan_runs, slow_runs):
        assert _same_launch(p, s)
    qdq, dec = plan_runs[-2], plan_runs[-1]
    assert qdq[0].data_ptr() == x2.data_ptr()
    assert dec[0] is qdq[4] and dec[4] is qdq[3]  # decode reads the bf16 x and the alpha the first kernel wrote
    assert dec[1] is w_q.data and dec[2] is w_q.scales
    assert dec[5] is bias if with_bias else dec[5] is dec[3]
    if scale is None:  # the amax kernel's S_enc feeds the quantizer
        assert qdq[1] is plan_runs[0][1]


@pytest.mark.parametrize("n", [384, 100])  # 100 bf16 columns: C is a column slice of a 16-byte padded buffer
def test_matmul_plan_launches_what_the_slow_path_does(cpu_launch, monkeypatch, n):
    import gc
    import weakref
    mm = importlib.import_module("bwtriton.kernels.matmul")
    monkeypatch.setattr(mm, "sm_count", lambda device: 132)
    monkeypatch.setattr(mm, "device_capability", lambda device: 90)
    a1, a2 = torch.randn(256, 512).bfloat16(), torch.randn(256, 512).bfloat16()
    b = torch.randn(n, 512).bfloat16().t()  # column-major B, the fast layout
    cfg = mm.gemm_configs(90, 2, 2)[0]
    facts = mm._facts(a1, b, None, None, None)
    monkeypatch.setitem(mm._TUNED, mm._tuning_key(a1, facts), cfg)
    mm.matmul(a1, b)                 # slow path + plan
    assert "plan" in facts
    first = weakref.ref(a1)
    del a1
    gc.collect()
    assert first() is None           # the plan's descriptor templates do not hold the first call's A
    out = mm.matmul(a2, b)           # plan
    slow = mm.matmul(a2, b, config=cfg)  # slow path (config given)
    plan_args, slow_args = cpu_launch.runs[-2], cpu_launch.runs[-1]
    assert _same_launch(plan_args, slow_args)
    assert out.shape == slow.shape == (256, n) and out.stride() == slow.stride()
    assert plan_args[0].base is a2 and plan_args[1].base.data_ptr() == b.data_ptr() and plan_args[2].base is out
    facts.pop("plan")


# ------------------------------------------------------------------------ nvfp4_linear's per-call host budget
class _CountOps:
    """The aten ops a call runs on the host (allocations show up as aten.empty)."""

    def __enter__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        ops = self.ops = []

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                ops.append(str(func.overloadpacket))
                return func(*args, **(kwargs or {}))

        self._mode = Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        self._mode.__exit__(*exc)


@pytest.mark.parametrize("form,scale,launches", [("fused", 0.01, 1), ("fused", None, 1), ("dequant_decode", 0.01, 2),
                                                  ("dequant_decode", None, 2), ("two_kernel", 0.01, 2),
                                                  ("two_kernel", None, 2)])
def test_linear_plan_call_costs_its_budget(cpu_launch, monkeypatch, form, scale, launches):
    """A repeated nvfp4_linear call runs only its kernels and allocates only its output (intermediates live in
    per-stream scratch): no validation, no other torch op (no host->device copy, no sync), and with the x scale
    from amax of a small x no separate amax launch (the first kernel computes S_enc itself)."""
    m, n, k = 16, 128, 256
    monkeypatch.setitem(decode._TUNED, (None, m, n, k, "plain", torch.bfloat16),
                        dict(decode.decode_config(m, n, k), path="mma"))
    w_q = quantize_nvfp4(torch.randn(n, k))
    x = torch.randn(m, k).bfloat16()
    linear.nvfp4_linear(x, w_q, x_global_scale=scale, form=form)  # slow path + plan
    linear.nvfp4_linear(x, w_q, x_global_scale=scale, form=form)  # plan: makes this stream's scratch
    before = len(cpu_launch.runs)
    with _CountOps() as counted:
        out = linear.nvfp4_linear(x, w_q, x_global_scale=scale, form=form)
    assert len(cpu_launch.runs) - before == launches
    assert counted.ops == ["aten.empty"], counted.ops  # the output
    assert any(arg is out for arg in cpu_launch.runs[-1])  # the last kernel writes the returned tensor


_FRAG_SPLIT2 = {"path": "frag", "TILES_PER_THREAD": 2, "CHUNKS_PER_STEP": 2, "num_warps": 4, "SPLIT_K": 2,
                "PREFETCH": 0}


@pytest.mark.parametrize("scale", [0.01, None])
def test_linear_qdq_decode_plan_call_is_one_launch_and_one_allocation(cpu_launch, monkeypatch, scale):
    """The one-launch W4A4 form: x's quantize-dequantize in the frag kernel's prologue and split-K reduced in the
    launch, its scratch kept per stream; a repeated call allocates only its output."""
    monkeypatch.setattr(_launcher, "reads_only_data_ptr", lambda device: True)  # as on the GPU: no view op
    m, n, k = 16, 128, 256
    w_q = quantize_nvfp4(torch.randn(n, k))
    x = torch.randn(m, k).bfloat16()
    monkeypatch.setitem(linear._QDQ_CFG, (None, m, n, k, False, "plain"), dict(_FRAG_SPLIT2, FIXUP=True))
    for _ in range(2):  # slow path + plan, then the plan's first call (makes this stream's scratch)
        linear.nvfp4_linear(x, w_q, x_global_scale=scale, form="qdq_decode")
    before = len(cpu_launch.runs)
    with _CountOps() as counted:
        out = linear.nvfp4_linear(x, w_q, x_global_scale=scale, form="qdq_decode")
    assert len(cpu_launch.runs) - before == 1 and counted.ops == ["aten.empty"], counted.ops
    args = cpu_launch.runs[-1]
    assert args[3] is out and args[13] is x  # writes the returned tensor, reads x itself


@pytest.mark.parametrize("fixup,capturing,ops", [(True, False, ["aten.empty"]),
                                                  (True, True, ["aten.empty", "aten.zeros"]),
                                                  (False, False, ["aten.zeros", "aten._to_copy"]),
                                                  (False, True, ["aten.zeros", "aten._to_copy"])])
def test_decode_frag_split_k_plan_call_costs(cpu_launch, monkeypatch, fixup, capturing, ops):
    """Split-K reduced inside the launch allocates only the output (under CUDA-graph capture also a fresh zeroed
    accumulator: one memset node); reduced after it, a zeroed fp32 buffer and the cast. No stand-in buffers: a
    graph would capture each one's memset."""
    monkeypatch.setattr(_launcher, "reads_only_data_ptr", lambda device: True)
    m, n, k = 3, 128, 256
    monkeypatch.setitem(decode._TUNED, (None, m, n, k, "plain", torch.bfloat16), dict(_FRAG_SPLIT2, FIXUP=fixup))
    w_q = quantize_nvfp4(torch.randn(n, k))
    x = torch.randn(m, k).bfloat16()
    for _ in range(2):
        decode.nvfp4_decode_matmul(x, w_q)
    monkeypatch.setattr(_launcher, "_capturing", lambda device: capturing)
    with _CountOps() as counted:
        decode.nvfp4_decode_matmul(x, w_q)
    device_work = [op for op in counted.ops if op not in ("aten.slice", "aten.view", "aten.detach")]  # host-only
    assert device_work == ops, counted.ops


def test_stream_scratch_is_per_stream_and_fresh_under_capture(monkeypatch):
    stream, capturing = [1], [False]
    monkeypatch.setattr(_launcher, "_current_stream", lambda device: stream[0])
    monkeypatch.setattr(_launcher, "_capturing", lambda device: capturing[0])
    cuda = torch.device("cuda", 0)
    scratch = _launcher.StreamScratch(lambda: (torch.empty(4),), cuda, 16)
    first = scratch.get()
    assert scratch.get()[0] is first[0]                 # same stream: reused
    stream[0] = 2
    assert scratch.get()[0] is not first[0]             # another stream: its own
    capturing[0] = True
    assert scratch.get()[0] is not scratch.get()[0]     # under capture: fresh every time, never kept
    capturing[0], stream[0] = False, 3
    big = _launcher.StreamScratch(lambda: (torch.empty(4),), cuda, 2 << 20)
    assert big.get()[0] is not big.get()[0]             # over max_bytes: per call


def test_linear_plan_is_keyed_on_the_weight_tensors(cpu_launch, monkeypatch):
    """torch.ops.bwtriton.nvfp4_linear (nn.NVFP4Linear) wraps the same weight tensors in a new QuantizedTensor on
    every call: the plan is still found (the weight is validated once) and launches the current call's tensors;
    it goes when the weight's tensors do."""
    import gc
    from bwtriton.torch_ops import quantized_nvfp4
    checks = []
    monkeypatch.setattr(linear, "check_quantized", lambda *a, **kw: checks.append(a))
    m, n, k = 16, 128, 256
    q = quantize_nvfp4(torch.randn(n, k))
    x = torch.randn(m, k).bfloat16()
    plans = len(linear._PLANS)
    for _ in range(3):
        linear.nvfp4_linear(x, quantized_nvfp4(q.data, q.scales, q.global_scale, "plain"), x_global_scale=0.01,
                            form="fused")
    assert len(checks) == 1 and len(linear._PLANS) == plans + 1
    assert cpu_launch.runs[-1][2] is q.data and cpu_launch.runs[-1][3] is q.scales
    cpu_launch.runs.clear()
    checks.clear()  # both hold the weight's tensors
    del q
    gc.collect()
    assert len(linear._PLANS) == plans


@pytest.mark.parametrize("path,word", [("gemv", 2), ("frag", 4), ("fragw", 4)])
@pytest.mark.parametrize("row_stride", [None, 2048 + 2])
def test_decode_replay_passes_x_itself_where_its_word_view_is_plain(cpu_launch, monkeypatch, path, word,
                                                                      row_stride):
    """On the GPU the replay hands x to the launcher as is (no view op per call), with its row stride in words;
    a row stride the word view cannot express (2050 elements for int64 words) takes the copying view."""
    monkeypatch.setattr(importlib.import_module("bwtriton.kernels._launcher"), "reads_only_data_ptr",
                        lambda device: True)
    m, n, k = 3, 256, 2048
    w_q = quantize_nvfp4(torch.randn(n, k))
    cfg = {"gemv": lambda: decode.default_config(m, n, k),
           "frag": lambda: decode._user_config("t", {"path": "frag", "SPLIT_K": 1}, m, n, k, 132),
           "fragw": lambda: decode._user_config("t", {"path": "fragw", "SPLIT_K": 1}, m, n, k, 132)}[path]()
    base = torch.randn(m, row_stride or k).bfloat16()
    x = base[:, :k]
    _, entry = decode._decode("t", x, w_q, cfg, torch.bfloat16, x.device)
    replay = decode.make_replay(w_q, cfg, entry, m, torch.bfloat16, x.device)
    replay(x, decode.decode_scale_arg(w_q, x.device), None)
    args = cpu_launch.runs[-1]
    stride_at = 10 if path == "frag" or path == "fragw" else 9
    if row_stride is None or row_stride % word == 0:
        assert args[0] is x and args[stride_at] == x.stride(0) // word
    else:
        assert args[0].dtype == (torch.int32 if word == 2 else torch.int64) and args[0].is_contiguous()
        assert args[stride_at] == k // word


def _fast_layer(monkeypatch, activations="nvfp4", bias=True):
    """An NVFP4Linear (N = 128, K = 256) whose eager CUDA path has served one CPU x [16, 256] (the form fixed to
    'fused', the decode config untuned), so its next forward of that x takes the fast path."""
    from bwtriton import nn as bnn
    from bwtriton.nn import NVFP4Linear
    monkeypatch.setattr(bnn, "_runs_kernels", lambda x: True)  # CPU tensors stand in for CUDA ones
    torch.manual_seed(0)
    layer = NVFP4Linear.from_linear(torch.nn.Linear(256, 128, bias=bias),
                                    x_global_scale=0.01 if activations == "nvfp4" else None, activations=activations)
    for has_bias in (False, True):
        monkeypatch.setitem(linear._FORM, (None, 16, 128, 256, has_bias, "plain"), "fused")
    monkeypatch.setitem(decode._TUNED, (None, 16, 128, 256, "plain", torch.bfloat16),
                        decode.default_config(16, 128, 256))
    x = torch.randn(16, 256).bfloat16()
    layer._forward_cuda(x)  # the checked path: makes the kernel's plan and keeps it for the layer
    return layer, x


@pytest.mark.parametrize("activations", ["nvfp4", "bf16"])
def test_nvfp4linear_fast_path_replays_the_plan_without_the_checks(cpu_launch, monkeypatch, activations):
    """A forward whose signature matches an earlier eager CUDA call launches that call's plan with this call's
    tensors, without the layer's or the kernel entry's checks."""
    layer, x = _fast_layer(monkeypatch, activations)
    checked = []
    monkeypatch.setattr(linear, "check_bf16_activations", lambda *a: checked.append(a))
    monkeypatch.setattr(decode, "check_bf16_activations", lambda *a: checked.append(a))
    monkeypatch.setattr(type(layer), "_forward_cuda", lambda self, x: checked.append(x))
    x2 = torch.randn(16, 256).bfloat16()
    out = layer(x2)
    assert not checked and isinstance(out, torch.Tensor) and out.shape == (16, 128)
    args = cpu_launch.runs[-1]
    assert args[1 if activations == "bf16" else 2] is layer.weight_data  # the buffer itself: in-place edits show
    if activations == "nvfp4":
        assert args[0] is x2 and args[6] is out
    else:
        assert args[0].data_ptr() == x2.data_ptr()


def test_nvfp4linear_fast_path_still_rejects_bad_inputs(cpu_launch, monkeypatch):
    """Inputs that differ from the served one in dtype, features, strides or alignment take the checked path
    (and fail there as without the fast path)."""
    layer, x = _fast_layer(monkeypatch)
    with pytest.raises(InputError, match="must be bfloat16"):
        layer(x.float())
    with pytest.raises(InputError, match="features"):
        layer(torch.randn(16, 128).bfloat16())
    slow = []
    checked_path = type(layer)._forward_cuda
    monkeypatch.setattr(type(layer), "_forward_cuda", lambda self, x: slow.append(x) or checked_path(self, x))
    layer(torch.randn(256, 16).bfloat16().t())  # same shape, other strides
    assert len(slow) == 1 and cpu_launch.runs[-1][0] is not slow[0]  # the checked path made it contiguous
    offset = torch.randn(16 * 256 + 1).bfloat16()[1:].view(16, 256)  # 2 bytes off 16-byte alignment
    layer(offset)
    assert len(slow) == 2
    layer(x)
    assert len(slow) == 2  # the served signature still takes the fast path


def test_nvfp4linear_fast_path_follows_buffers_and_settings(cpu_launch, monkeypatch):
    """Replacing a buffer, changing the x scale or the mode sends the next call to the checked path, which
    launches the new state; `.to()` and pickling drop the kept plans."""
    import copy
    import io
    layer, x = _fast_layer(monkeypatch)
    slow = []
    checked_path = type(layer)._forward_cuda
    monkeypatch.setattr(type(layer), "_forward_cuda", lambda self, x: slow.append(x) or checked_path(self, x))
    new_data = layer.weight_data.clone()
    layer.weight_data = new_data
    layer(x)
    assert len(slow) == 1 and cpu_launch.runs[-1][2] is new_data
    layer(x)
    assert len(slow) == 1 and cpu_launch.runs[-1][2] is new_data  # the new buffer's plan is kept in turn
    layer.x_global_scale = 0.02
    layer(x)
    assert len(slow) == 2
    layer.bias = None
    layer(x)
    assert len(slow) == 3
    saved = io.BytesIO()
    torch.save(layer, saved)  # pickles the module: the kept closures must not be in its state
    assert "_fast_calls" in layer.__dict__ and "_fast_calls" not in layer.__getstate__()
    assert "_fast_calls" not in copy.deepcopy(layer).__dict__
    layer.to("cpu")
    assert "_fast_calls" not in layer.__dict__


def test_rotated_timer_falls_back_to_one_call_where_it_cannot_capture(monkeypatch):
    """Without CUDA graphs (a CPU-only build here) the tuners' rotated timer times the first call alone."""
    if torch.cuda.is_available():
        pytest.skip("the fallback is for machines without a CUDA device")
    timed = []
    monkeypatch.setattr(_launcher, "kernel_time_us", lambda fn: timed.append(fn) or 7.0)
    first, second = (lambda: None), (lambda: None)
    assert _launcher.rotated_kernel_time_us([first, second]) == 7.0 and timed == [first]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs")
def test_gpu_rotated_timer_replays_every_call_in_turn():
    """Each replay of the timer's graph runs every call once, in order: three counters end equal, and the time is
    per call."""
    counters = [torch.zeros(1 << 20, device="cuda") for _ in range(3)]
    us = _launcher.rotated_kernel_time_us([lambda c=c: c.add_(1) for c in counters], rep_ms=2.0)
    values = [int(c[0].item()) for c in counters]
    assert us > 0 and values[0] > 3 and values == [values[0]] * 3
    assert all(torch.equal(c, torch.full_like(c, values[0])) for c in counters)


def test_linear_qdq_decode_rejects_what_it_cannot_take(cpu_launch):
    """M over the frag kernel's 16 rows, and an explicit frag config whose CTAs would quantize too much of x:
    InputErrors that name the limit and the way out, raised before any launch."""
    w_q = quantize_nvfp4(torch.randn(128, 256))
    with pytest.raises(InputError, match=r"form='qdq_decode' needs M <= 16 and K % 256 == 0, got M=17.*form='auto'"):
        linear.nvfp4_linear(torch.randn(17, 256).bfloat16(), w_q, form="qdq_decode")
    x = torch.randn(16, 8192).bfloat16()
    w_q = quantize_nvfp4(torch.randn(128, 8192))
    cfg = dict(_FRAG_SPLIT2, FIXUP=True)  # 16 x 4096 activations per CTA: over the prologue's 8192
    with pytest.raises(InputError, match=r"16 x 4096 activations to quantize, over 8192; use a larger SPLIT_K"):
        decode.decode_qdq(x, w_q, None, torch.ones(1), None, cfg, x.device)
    assert not cpu_launch.runs
