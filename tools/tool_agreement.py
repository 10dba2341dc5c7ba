#!/usr/bin/env python3
"""Do the static verifier and the emulator agree? Every kernel of the corpus -- our fixtures (the tutorial-09-style
warp-specialized tile, the persistent warp-specialized GEMM at 3 tiles per CTA, the tutorial-10-style nvfp4 kernel,
the Gluon warp-specialized GEMM), every launchable kernel of the emulator's numerics corpus (`tests/emu_cases.py`,
the cases of tests/emu/test_emu_numerics.py) -- and every fault planted into them (`tests/fixtures/ws_mutants.py`)
and the verifier's own planted faults (tests/verify/test_verify_mutants.py, emulated with the launch recipe of the
corpus kernel they were made from) is verified and emulated under the latest-completion schedule.

    PYTHONPATH=python:tests python tools/tool_agreement.py [--sample] [--kernels A,B] [--faults F,G] [--markdown F]

A row is a disagreement when one tool rejects what the other accepts: a verifier error on a kernel the emulator
runs to the right result, an emulator protocol error (`AsyncRaceError`, `TmemRaceError`, ...) the verifier is
silent on, or a wrong result neither reports. Each names the rule (verifier check id / emulator error). Settled
disagreements that remain by design are in KNOWN with their reason; exit status 1 on any other disagreement.
`--sample` runs SAMPLE, a fixed subset (one row per rule family, in both directions) fast enough for CI.
"""
from __future__ import annotations

import argparse
import copy
import importlib.util
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

import torch

import bwtriton
import bwtriton.emu as emu
from bwtriton.verify import verify_ptx

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Case:
    """A compiled kernel, how to launch it on the emulator, and how to check its output."""

    name: str
    compiled: object
    #: (compiled, schedule) -> a function that runs it under that schedule and says whether the output is right
    launch: Callable[..., Callable[[], bool]]


def _ws_tile() -> Case:
    from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: PLC0415 - host descriptors (heavy import)
    from fixtures import upstream_style as us  # noqa: PLC0415 - the test fixtures are on PYTHONPATH only here
    k = bwtriton.compile(us.CASES["t09_ws_tile"][0], **us.options("t09_ws_tile", True, 3, 4, 1))

    def launch(compiled, schedule: str = "latest"):
        g = torch.Generator().manual_seed(0)
        a, b = torch.randn(128, 256, generator=g).half(), torch.randn(128, 256, generator=g).half()
        c = torch.zeros(128, 128).half()

        def go() -> bool:
            emu.run(compiled, (1, 1), TensorDescriptor.from_tensor(a, [128, 64]),
                    TensorDescriptor.from_tensor(b, [128, 64]), TensorDescriptor.from_tensor(c, [128, 128]), 256,
                    schedule=schedule)
            # fp16 operands, fp32 accumulation of 256 terms, fp16 output: 1e-2 relative is the output rounding
            return torch.allclose(c.float(), a.float() @ b.float().T, atol=5e-2, rtol=1e-2)
        return go
    return Case("t09_ws_tile", k, launch)


def _nvfp4() -> Case:
    from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: PLC0415 - host descriptors (heavy import)
    from fixtures import blockscaled_tutorial as bt  # noqa: PLC0415 - the test fixtures are on PYTHONPATH only
    M, N, K = 128, 256, 512
    k = bwtriton.compile(bt.blockscaled_tma, **bt.compile_options("nvfp4", M=M, N=N, K=K))

    def launch(compiled, schedule: str = "latest"):
        d = bt.make_inputs("nvfp4", M, N, K, seed=1)
        c = torch.zeros(M, N)
        sa, sb = d["sa"].view(torch.float8_e4m3fn), d["sb"].view(torch.float8_e4m3fn)

        def go() -> bool:
            emu.run(compiled, (1,), TensorDescriptor.from_tensor(d["a"], [128, 128]),
                    TensorDescriptor.from_tensor(sa, [1, 1, 4, 2, 256]),
                    TensorDescriptor.from_tensor(d["b"], [256, 128]),
                    TensorDescriptor.from_tensor(sb, [1, 2, 4, 2, 256]), TensorDescriptor.from_tensor(c, [128, 256]),
                    schedule=schedule)
            return bool(((c.double() - d["ref"]).abs() <= K * 2.0 ** -24 * d["ref_abs"] + 1e-6).all())
        return go
    return Case("t10_nvfp4", k, launch)


def _gluon_ws() -> Case:
    from bwtriton.emu.driver import emulated_gpu  # noqa: PLC0415 - warmup needs the emulated B200 as target
    from fixtures import gluon_ws  # noqa: PLC0415 - the test fixtures are on PYTHONPATH only here
    args, _ = gluon_ws.host_args()
    with emulated_gpu("sm_100a"):
        k = gluon_ws.gluon_ws_matmul.warmup(*args, STAGES=3, num_warps=4, grid=(1, 1))

    def launch(compiled, schedule: str = "latest"):
        args, (a, b, c) = gluon_ws.host_args(seed=2)

        def go() -> bool:
            emu.run(compiled, (1, 1), *args, schedule=schedule)
            bound = 256 * 2.0 ** -24 * (a.double().abs() @ b.double().abs().T) + 1e-6
            return bool(((c.double() - a.double() @ b.double().T).abs() <= bound).all())
        return go
    return Case("gluon_ws", k, launch)


def _persistent_ws() -> Case:
    """The persistent warp-specialized GEMM compiled with NUM_SMS = 1: one CTA walks all 3 output tiles (4 k-steps
    each through 3 stages and 2 accumulator buffers), so a buffer is reused and a stage is refilled across tiles."""
    from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: PLC0415 - host descriptors (heavy import)
    from fixtures import upstream_style as us  # noqa: PLC0415 - the test fixtures are on PYTHONPATH only here
    opts = us.options("t09_persistent_desc_ws", True, 3, 4, 1)
    opts["constexprs"] = dict(opts["constexprs"], NUM_SMS=1)
    k = bwtriton.compile(us.CASES["t09_persistent_desc_ws"][0], **opts)
    M, N, K = 384, 128, 256

    def launch(compiled, schedule: str = "latest"):
        g = torch.Generator().manual_seed(3)
        a, b = torch.randn(M, K, generator=g).half(), torch.randn(N, K, generator=g).half()
        c = torch.zeros(M, N).half()

        def go() -> bool:
            emu.run(compiled, (1,), TensorDescriptor.from_tensor(a, [128, 64]),
                    TensorDescriptor.from_tensor(b, [128, 64]), TensorDescriptor.from_tensor(c, [128, 128]), M, N, K,
                    schedule=schedule)
            # fp16 operands, fp32 accumulation of 256 terms, fp16 output: 1e-2 relative is the output rounding
            return torch.allclose(c.float(), a.float() @ b.float().T, atol=5e-2, rtol=1e-2)
        return go
    return Case("t09_persistent_desc_ws_3tiles", k, launch)

def _recurrence() -> Case:
    """The delta-rule state update (tests/fixtures/recurrence_kernels.py) through the default pipeline: racy as
    Triton 3.6 emits it, so what runs here is insert-proxy-fence's repair there and Triton's own PTX elsewhere."""
    from fixtures import recurrence_kernels as rk  # noqa: PLC0415 - the test fixtures are on PYTHONPATH only here
    k = bwtriton.compile(rk.delta_state_kernel, **rk.BWTRITON_SPECS["delta_state_kernel"])
    nt = 3   # the race needs a second iteration: the first is fenced before the loop

    def launch(compiled, schedule: str = "latest"):
        g = torch.Generator().manual_seed(0)
        kk = (torch.randn(nt * 64, 128, generator=g) / 8).to(torch.bfloat16)
        v = torch.randn(nt * 64, 64, generator=g).to(torch.bfloat16)

        def go() -> bool:
            out = torch.zeros(128, 64)
            emu.run(compiled, (1,), kk, v, out, nt, schedule=schedule)
            h = torch.zeros(128, 64, dtype=torch.float64)
            for t in range(nt):   # float64 with the kernel's two bf16 roundings: only accumulation order differs
                kt = kk[t * 64:(t + 1) * 64].double()
                vb = (v[t * 64:(t + 1) * 64].double() - kt @ h.to(torch.bfloat16).double()).float()
                h = h + kt.T @ vb.to(torch.bfloat16).double()
            return float((out.double() - h).abs().max()) <= 1e-5 * float(h.abs().max())
        return go
    return Case("recurrence_delta", k, launch)


class _PtxOnly:
    """A hand-written kernel: PTX text only (no Triton ABI, no outputs)."""

    def __init__(self, ptx: str):
        self.asm = {"ptx": ptx}


def _lit_case(name: str, path: str, case: int, *args) -> Callable[[], Case]:
    """A kernel of a lit file (its `// -----` case), launched on one CTA; "right" means it ran."""
    def build() -> Case:
        import re  # noqa: PLC0415 - only the lit cases split files
        piece = re.split(r"^// -----$", (ROOT / "test_lit" / path).read_text(), flags=re.M)[case]

        def launch(compiled, schedule: str = "latest"):
            def go() -> bool:
                emu.run(compiled.asm["ptx"], (1,), *args, triton_abi=False, schedule=schedule)
                return True
            return go
        return Case(name, _PtxOnly(piece[piece.index(".version"):]), launch)
    return build


#: the generic -> async proxy kernels (P15): racy and correct forms, within an iteration, across the back edge
#: and across warps (docs/verifier.md, P15)
PROXY_CASES: dict[str, Callable[[], Case]] = {
    "lit:proxy_hoisted_fence": _lit_case("lit:proxy_hoisted_fence", "insert_proxy_fence/hoisted_fence.ptx", 0, 3),
    "lit:proxy_loop_carried": _lit_case("lit:proxy_loop_carried", "insert_proxy_fence/loop_carried.ptx", 0, 3),
    "lit:proxy_fenced_in_loop": _lit_case("lit:proxy_fenced_in_loop", "insert_proxy_fence/fenced_in_loop.ptx", 0, 3),
    "lit:proxy_cross_warp": _lit_case("lit:proxy_cross_warp", "verify_tcgen05/proxy_fence_cross_warp.ptx", 0),
    "lit:proxy_cross_warp_barrier": _lit_case("lit:proxy_cross_warp_barrier",
                                              "verify_tcgen05/proxy_fence_cross_warp.ptx", 1),
}

#: kernels racy as written (both tools must reject them unmutated)
RACY = frozenset({"lit:proxy_hoisted_fence", "lit:proxy_loop_carried", "lit:proxy_cross_warp"})

#: the fixtures' kernels (name -> Case builder)
FIXTURES: dict[str, Callable[[], Case]] = {"t09_ws_tile": _ws_tile, "t10_nvfp4": _nvfp4, "gluon_ws": _gluon_ws,
                                           "t09_persistent_desc_ws_3tiles": _persistent_ws,
                                           "recurrence_delta": _recurrence, **PROXY_CASES}


def _emu_case(make_case: Callable) -> Callable[[], Case]:
    """A Case from an `emu_cases.EmuCase` builder: output within the case's own tolerance."""
    def build() -> Case:
        ec = make_case()

        def launch(compiled, schedule: str = "latest"):
            def go() -> bool:
                args, out, ref, tol = ec.make()
                emu.run(compiled, ec.grid, *args, schedule=schedule)
                return float((out.double() - ref).abs().max()) <= tol
            return go
        return Case(ec.name, ec.kernel, launch)
    return build


def _numerics_cases() -> dict[str, Callable[[], Case]]:
    """The emulator's numerics corpus (tests/emu/test_emu_numerics.py's CASES), each as a Case."""
    path = ROOT / "tests" / "emu" / "test_emu_numerics.py"
    spec = importlib.util.spec_from_file_location("emu_numerics_corpus", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    import emu_cases as ec  # noqa: PLC0415 - tests/ is on PYTHONPATH only here
    extra = {  # the verifier mutants' originals, and the one-k-tile paths the numerics launches do not take
        "emu+:matmul_fp16_stages1": lambda: ec.case_matmul("fp16", "fp16", num_stages=1),
        "emu+:matmul_fp16_8warps": lambda: ec.case_matmul("fp16", "fp16", num_warps=8),
        "emu+:block_scaled_tma_nvfp4_1024": lambda: ec.case_block_scaled_tma(16, M=1024, N=1024, K=1024),
        "emu+:t03_bias_one_k_tile": lambda: ec.case_bias_matmul(K=48),
        "emu+:t10_mixed_one_k_tile": lambda: ec.case_mixed_scaled_tma(K=128),
    }
    return {**{f"emu:{name}": _emu_case(make) for name, make in mod.CASES.items()},
            **{name: _emu_case(make) for name, make in extra.items()}}


CASES: dict[str, Callable[[], Case]] = dict(FIXTURES)


def all_cases() -> dict[str, Callable[[], Case]]:
    """Every kernel the tool knows: the fixtures and the numerics corpus."""
    return {**FIXTURES, **_numerics_cases()}


def _with_ptx(compiled, ptx: str):
    out = copy.copy(compiled)
    out.asm = dict(compiled.asm, ptx=ptx)
    return out


#: emulator errors that are protocol violations (the verifier's business); others mean "cannot judge"
PROTOCOL_ERRORS = ("AsyncOverwriteError", "PoisonReadError", "MissingProxyFenceError", "UnorderedGenericStoreError",
                   "TmemRaceError",
                   "UnwaitedTmemLoadError", "LaneQuarterError", "DeadlockError", "TmemLeakError", "TmemAllocError",
                   "EmulationError")


def emulator_verdict(case: Case, ptx: str, schedule: str = "latest") -> str:
    """"ok", "wrong" (ran, wrong output) or the name of the emulation error."""
    try:
        return "ok" if case.launch(_with_ptx(case.compiled, ptx), schedule)() else "wrong"
    except emu.EmulationError as e:
        return type(e).__name__


def verifier_verdict(ptx: str, **kw) -> str:
    errors = verify_ptx(ptx, **kw).errors
    return ",".join(sorted({f.check for f in errors})) if errors else "clean"


def agrees(verifier: str, emulator: str) -> bool:
    """Both accept, or both reject (the emulator rejects with an error or a wrong result)."""
    return (verifier == "clean") == (emulator == "ok")


def compare(case: Case, fault: Optional[str]) -> tuple[str, str, bool]:
    """(verifier verdict, emulator verdict, agree) for the kernel, or for `fault` planted into it."""
    from fixtures import ws_mutants as wm  # noqa: PLC0415 - the fixtures are on PYTHONPATH only here
    ptx = case.compiled.asm["ptx"] if fault is None else wm.FAULTS[fault](case.compiled.asm["ptx"])
    if ptx is None:
        return "n/a", "n/a", True
    v, e = verifier_verdict(ptx), emulator_verdict(case, ptx)
    return v, e, agrees(v, e)


@dataclass
class Row:
    kernel: str
    fault: str
    verifier: str
    emulator: str

    @property
    def agree(self) -> bool:
        return agrees(self.verifier, self.emulator)

    def kind(self) -> str:
        """What a disagreement is: which tool is silent."""
        if self.agree:
            return ""
        if self.verifier != "clean":
            return "verifier error, emulator ok"
        return "emulator wrong result, verifier silent" if self.emulator == "wrong" else \
            "emulator protocol error, verifier silent"


# Why a disagreement stands: each is a launch that cannot show the fault (the verifier is right).
_E_SHORT_RING = ("not a tool error: 3 stages and 2 K tiles, so the ring never comes round and the frozen MMA-barrier "
                 "wait is never reached a second time in this launch; with K = 512 (8-bit types: 1024) the same "
                 "PTX fails on the emulator (AsyncOverwriteError, PoisonReadError for the padded-fp4 kernel)")
_E_UNEXECUTED_PATH = ("not a tool error: the fence dropped sits on the K = 0 path (a zero tile stored through "
                      "st.shared and a TMA store), which the launch (K = 256) never executes; the verifier is right, "
                      "the emulator only judges the paths a launch takes")
_E_TWO_TILES = ("not a tool error: at 2 tiles per CTA the two accumulator buffers are never reused, so the dropped "
                "wait or barrier is harmless in this launch; 3 tiles per CTA (t09_persistent_desc_ws_3tiles, and "
                "M = 384 over 2 programs in tests/emu's rule reproductions) fail on the emulator and agree")
_E_ONE_K_TILE = ("not a tool error: the MMA moved after the commit is left uncovered only on the path with one "
                 "k-tile (the loop body skipped); this launch has two, so the next commit covers it. The one-k-tile "
                 "launch of the same PTX (emu+:..._one_k_tile) fails on the emulator and agrees")
_E_ONE_K_TILE_REFILL = ("not a tool error: with one k-tile the stage refilled after the dropped wait is never read "
                        "again; the same PTX at two k-tiles agrees")

_E_ONE_K_TILE_FENCE = ("not a tool error: with one k-tile the loop body runs once, so the in-loop store the "
                       "removed fence ordered is never followed by a second iteration's MMA; the same kernel at "
                       "K = 100 (emu:t03_bias_leaky_unaligned) fails with MissingProxyFenceError")
KNOWN: dict[tuple[str, str], str] = {
    **{(k, "drop_mma_proxy_fence"): _E_UNEXECUTED_PATH
       for k in ("t09_persistent_desc_ws_3tiles", "emu:t09_persistent_tma", "emu:t09_persistent_warp_specialized",
                 "emu:t09_descriptor_persistent")},
    ("emu:t09_persistent_warp_specialized", "drop_acc_empty_wait"): _E_TWO_TILES,
    ("emu:t09_persistent_warp_specialized", "drop_release_barrier"): _E_TWO_TILES,
    **{(k, "mma_after_commit"): _E_ONE_K_TILE
       for k in ("emu:t03_bias_leaky_unaligned", "emu:t10_mixed_mxfp8_mxfp4_fp4_padded_tma")},
    **{(k, "freeze_ready_phase"): _E_SHORT_RING
       for k in ("emu:example_matmul_fp16", "emu:example_matmul_bf16", "emu:dot_fp16_m64", "emu:dot_bf16_n256_8warps",
                 "emu:dot_fp8e4m3", "emu:dot_fp8e5m2", "emu+:matmul_fp16_8warps",
                 "emu:t10_mixed_mxfp8_mxfp4_fp4_padded_tma", "emu+:t10_mixed_one_k_tile")},
    ("emu+:t10_mixed_one_k_tile", "drop_last_mma_wait"): _E_ONE_K_TILE_REFILL,
    ("emu+:t03_bias_one_k_tile", "hoist_loop_proxy_fence"): _E_ONE_K_TILE_FENCE,
}

#: the CI sample: (kernel, fault) rows covering every rule family in both directions (None: the clean kernel)
SAMPLE: tuple[tuple[str, Optional[str]], ...] = (
    ("t09_ws_tile", None), ("t09_ws_tile", "drop_acc_wait"), ("t09_ws_tile", "ld_lane_plus32"),
    ("t09_ws_tile", "drop_last_mma_wait"), ("t09_ws_tile", "mma_after_commit"),
    ("t09_ws_tile", "drop_mma_proxy_fence"), ("t09_ws_tile", "flip_acc_parity"),
    ("gluon_ws", None), ("gluon_ws", "freeze_ready_phase"),
    ("t09_persistent_desc_ws_3tiles", None), ("t09_persistent_desc_ws_3tiles", "drop_acc_empty_wait"),
    ("t09_persistent_desc_ws_3tiles", "mma_after_commit"),
    ("emu:gluon_two_ctas_m128", None), ("emu:gluon_two_ctas_m128", "drop_cluster_barrier"),
    ("recurrence_delta", None), ("recurrence_delta", "hoist_loop_proxy_fence"),
    ("lit:proxy_hoisted_fence", None), ("lit:proxy_cross_warp", None),
)


def _fault_rows(name: str, case: Case, faults: Sequence[str]) -> Iterator[Row]:
    from fixtures import ws_mutants as wm  # noqa: PLC0415 - the fixtures are on PYTHONPATH only here
    base = case.compiled.asm["ptx"]
    for fault in faults:
        ptx = base if fault == "(none)" else wm.FAULTS[fault](base)
        if ptx is None:
            continue
        yield Row(name, fault, verifier_verdict(ptx), emulator_verdict(case, ptx))


def _verifier_mutant_rows(cases: dict[str, Case]) -> Iterator[Row]:
    """The verifier's planted faults, each emulated with the launch recipe of the corpus kernel it was made from
    (matched by PTX text); one without such a kernel is verified only ("not emulated")."""
    path = ROOT / "tests" / "verify" / "test_verify_mutants.py"
    spec = importlib.util.spec_from_file_location("verify_mutants_corpus", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    by_ptx = {c.compiled.asm["ptx"].strip(): (n, c) for n, c in cases.items()}
    for rule, original, mutant, kw, _check in mod.MUTANTS:
        hit = by_ptx.get(original.strip())
        v = verifier_verdict(mutant, **kw)
        if hit is None:
            yield Row("(no launch recipe)", rule, v, "not emulated")
            continue
        yield Row(hit[0], rule, v, emulator_verdict(hit[1], mutant) if not kw else "not emulated (verifier option)")


def table(rows: Sequence[Row]) -> str:
    out = ["| kernel | fault | verifier | emulator | |", "|---|---|---|---|---|"]
    for r in rows:
        mark = "AGREE" if r.agree else ("known: " if (r.kernel, r.fault) in KNOWN else "") + "DISAGREE"
        if r.emulator.startswith("not emulated"):
            mark = "-"
        out.append(f"| {r.kernel} | {r.fault} | {r.verifier} | {r.emulator} | {mark} |")
    return "\n".join(out)


def open_disagreements(rows: Sequence[Row]) -> list[Row]:
    return [r for r in rows if not r.agree and not r.emulator.startswith("not emulated")
            and (r.kernel, r.fault) not in KNOWN]


def run(sample: bool = False, kernels: Optional[Sequence[str]] = None, faults: Optional[Sequence[str]] = None,
        verifier_mutants: bool = True, progress: bool = False) -> list[Row]:
    """Every row of the table (or of SAMPLE)."""
    from fixtures import ws_mutants as wm  # noqa: PLC0415 - the fixtures are on PYTHONPATH only here
    known = all_cases()
    names = [k for k, _ in SAMPLE] if sample else (kernels or list(known))
    built: dict[str, Case] = {}
    rows: list[Row] = []
    for name in dict.fromkeys(names):
        if name not in known:
            raise SystemExit(f"tool_agreement: unknown kernel {name!r} (known: {', '.join(known)})")
        built[name] = case = known[name]()
        todo = [f or "(none)" for k, f in SAMPLE if k == name] if sample else ["(none)", *(faults or wm.FAULTS)]
        for row in _fault_rows(name, case, todo):
            rows.append(row)
            if progress:
                print(table([row]).splitlines()[-1], file=sys.stderr, flush=True)
    if verifier_mutants and not sample and not kernels:
        rows.extend(_verifier_mutant_rows(built))
    return rows


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    p.add_argument("--sample", action="store_true", help="the CI sample (SAMPLE) only")
    p.add_argument("--kernels", default="", help="comma-separated kernel names (default: all)")
    p.add_argument("--faults", default="", help="comma-separated ws_mutants faults (default: all)")
    p.add_argument("--markdown", default="", help="also write the table to this file")
    args = p.parse_args(argv)
    t0 = time.time()
    rows = run(args.sample, [k for k in args.kernels.split(",") if k] or None,
               [f for f in args.faults.split(",") if f] or None, progress=True)
    text = table(rows)
    bad = open_disagreements(rows)
    known = [r for r in rows if not r.agree and (r.kernel, r.fault) in KNOWN]
    unemulated = [r for r in rows if r.emulator.startswith("not emulated")]
    summary = (f"{len(rows)} rows, {sum(r.agree for r in rows) - len(unemulated)} agree, {len(unemulated)} verified "
               f"only, {len(known)} known disagreement(s), {len(bad)} open disagreement(s) in "
               f"{time.time() - t0:.0f} s")
    print(text + "\n\n" + summary)
    for r in bad:
        print(f"OPEN: {r.kernel} / {r.fault}: {r.kind()} (verifier {r.verifier}, emulator {r.emulator})")
    if args.markdown:
        Path(args.markdown).write_text(text + "\n\n" + summary + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
