"""Regenerate the lit inputs of test_lit/verify: a small real Triton 3.6 Gluon tcgen05 kernel (debug info and
.loc lines stripped) and one mutation per check. Run from the repo root: python test_lit/verify/Inputs/make_mutants.py
The CHECK lines are written here too, so a regenerated file keeps its expectations."""
from __future__ import annotations

import pathlib
import re
import sys

import triton
from triton.backends.compiler import GPUTarget

HERE = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE.parent.parent / "tests"))
import ptx_corpus  # noqa: E402


def small_kernel() -> str:
    from triton.experimental.gluon._runtime import GluonASTSource
    _, one_mma, _, _ = ptx_corpus._gluon_kernels()
    sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "M": "constexpr", "N": "constexpr",
           "K": "constexpr", "num_warps": "constexpr"}
    src = GluonASTSource(fn=one_mma, signature=sig, constexprs={"M": 128, "N": 32, "K": 16, "num_warps": 4})
    return triton.compile(src, target=GPUTarget("cuda", 100, 32), options={"num_warps": 4}).asm["ptx"]


def strip(ptx: str) -> str:
    ptx = ptx.split("\t.section\t.debug", 1)[0]
    lines = [ln for ln in ptx.splitlines() if not re.match(r"\s*(\.loc|\.file|//|$)", ln)]
    return "\n".join(lines) + "\n"


def sub(text: str, pattern: str, repl: str, count: int = 1) -> str:
    new, n = re.subn(pattern, repl, text, count=count)
    assert n, pattern
    return new


def main() -> None:
    base = strip(small_kernel())
    idesc = int(re.search(r"mov\.b32\s+%r\d+, (\d+);\s*\n(?:.*\n){0,3}?.*tcgen05\.mma", base).group(1))
    cases = {
        "clean": ("%bwtriton check %s | FileCheck %s",
                  ["CHECK: 0 error(s), 0 warning(s)"], base),
        "explain": ("%bwtriton check --explain %s | FileCheck %s",
                    ["CHECK: tcgen05.mma cta_group::1 kind::f16",
                     "CHECK-NEXT: idesc 0x{{[0-9A-F]+}}: M=128 N=32 K=16 A=f16 (K-major) B=f16 (K-major) D=f32",
                     "CHECK: D in TMEM {{.*}} = alloc(line {{[0-9]+}}) + lane 0, column 0, 32 columns"], base),
        "dropped_dealloc": (None, ["CHECK: error: [dealloc-missing/P4] TMEM allocated here (32 columns)"],
                            sub(base, r"\n.*tcgen05\.dealloc.*", "")),
        "wrong_dealloc_columns": (None, ["CHECK: error: [dealloc-columns/P4] tcgen05.dealloc frees 64 columns"],
                                  sub(base, r"(tcgen05\.dealloc.*), 32;", r"\1, 64;")),
        "alloc_not_pow2": (None, ["CHECK: error: [alloc-columns/P2] tcgen05.alloc of 48 columns"],
                           sub(sub(base, r"(tcgen05\.alloc.*), 32;", r"\1, 48;"), r"(tcgen05\.dealloc.*), 32;",
                               r"\1, 48;")),
        "alloc_increasing": (None, ["CHECK: error: [alloc-increasing/P3] allocation of 64 columns follows an "
                                    "allocation of 32 columns"],
                             sub(base, r"(\n(.*)tcgen05\.alloc(.*)\[(%r\d+)\], 32;)",
                                 r"\1\n\2tcgen05.alloc\3[\4], 64;")),
        "mixed_cta_group": (None, ["CHECK: error: [cta-group-mixed/P1] {{.*}}cta_group::2"],
                            sub(base, r"tcgen05\.commit\.cta_group::1", "tcgen05.commit.cta_group::2")),
        "removed_wait_ld": (None, ["CHECK: error: [ld-without-wait/P9]"],
                            sub(base, r"\n.*tcgen05\.wait::ld.*", "")),
        "idesc_reserved_bit": (None, ["CHECK: error: [idesc-field/P19] instruction descriptor "
                                      f"0x{idesc | 1 << 23:08X}{{{{.*}}}}reserved bit(s) [23] set"],
                               sub(base, rf"\b{idesc};", f"{idesc | 1 << 23};")),
        "illegal_n": (None, ["CHECK: error: [idesc-field/P19] {{.*}}N=264 is not legal for kind::f16"],
                      sub(base, rf"\b{idesc};", f"{(idesc & ~(0x3F << 17)) | 33 << 17};")),
        "illegal_m": (None, ["CHECK: error: [idesc-field/P19] {{.*}}M=256 is not legal for kind::f16 with "
                             "cta_group::1"],
                      sub(base, rf"\b{idesc};", f"{(idesc & ~(0x1F << 24)) | 16 << 24};")),
        "missing_fence": (None, ["CHECK: error: [missing-proxy-fence/P15] tcgen05.mma reads shared memory"],
                          sub(base, r"\n.*fence\.proxy\.async.*", "")),
        "cta_group2_no_cluster": (None, ["CHECK: error: [cta-group2-cluster/P18] {{.*}}gives 1 CTA(s) per cluster"],
                                  sub(base.replace("cta_group::1", "cta_group::2"), r"(\.reqntid \d+)",
                                      r"\1\n.reqnctapercluster 1")),
        "trap_only": (None, ["CHECK: error: [trap-only-body/T1] entry {{.*}} whole body is `trap`"],
                      strip(ptx_corpus.bad_kernels()["tmem_overflow_trap"]())),
    }
    for name, (run, checks, text) in cases.items():
        run = run or "not %bwtriton check %s 2>&1 | FileCheck %s"
        header = [f"// RUN: {run}"] + [f"// {c}" for c in checks]
        (HERE / f"{name}.ptx").write_text("\n".join(header) + "\n" + text)
        print(name, len(text.splitlines()), "lines")


if __name__ == "__main__":
    main()
