"""Stage hashes on canonical text: equal for what Triton emits nondeterministically (value names, the order of
side-effect-free operations), different for real changes (data flow, the place of an operation with effects);
repeated fresh compiles of 2-CTA kernels hash equal; what still varies is reported as nondeterminism."""
from __future__ import annotations

import pytest

from bwtriton.regress.census import normalise_stage, stage_hashes
from bwtriton.regress.diff import diff_snapshots, parse_fail_on

# Two TTGIR texts as Triton 3.6 printed them for one num_ctas=2 kernel in two compiles (shortened): the two
# layout copies of one index computation swap places and names.
TTGIR_A = """\
tt.func public @k(%a: !tt.ptr<f16>, %m: i32) {
  %rm_1 = tt.make_range {end = 256 : i32, start = 0 : i32} : tensor<256xi32, #ttg.slice<{dim = 1, parent = #blocked}>>
  %rm_2 = tt.make_range {end = 256 : i32, start = 0 : i32} : tensor<256xi32, #ttg.slice<{dim = 1, parent = #blocked1}>>
  %rm_3 = tt.splat %m : i32 -> tensor<256xi32, #ttg.slice<{dim = 1, parent = #blocked}>>
  %rm_4 = tt.splat %m : i32 -> tensor<256xi32, #ttg.slice<{dim = 1, parent = #blocked1}>>
  %rm_5 = arith.subi %rm_3, %rm_1 : tensor<256xi32, #ttg.slice<{dim = 1, parent = #blocked}>>
  %rm_6 = arith.subi %rm_4, %rm_2 : tensor<256xi32, #ttg.slice<{dim = 1, parent = #blocked1}>>
  ttng.fence_async_shared {bCluster = false}
  tt.store %a, %rm_6 : !tt.ptr<f16>
  tt.return
}"""
TTGIR_B = """\
tt.func public @k(%a: !tt.ptr<f16>, %m: i32) {
  %rm_1 = tt.make_range {end = 256 : i32, start = 0 : i32} : tensor<256xi32, #ttg.slice<{dim = 1, parent = #blocked1}>>
  %rm_2 = tt.make_range {end = 256 : i32, start = 0 : i32} : tensor<256xi32, #ttg.slice<{dim = 1, parent = #blocked}>>
  %rm_3 = tt.splat %m : i32 -> tensor<256xi32, #ttg.slice<{dim = 1, parent = #blocked1}>>
  %rm_4 = tt.splat %m : i32 -> tensor<256xi32, #ttg.slice<{dim = 1, parent = #blocked}>>
  %rm_5 = arith.subi %rm_3, %rm_1 : tensor<256xi32, #ttg.slice<{dim = 1, parent = #blocked1}>>
  %rm_6 = arith.subi %rm_4, %rm_2 : tensor<256xi32, #ttg.slice<{dim = 1, parent = #blocked}>>
  ttng.fence_async_shared {bCluster = false}
  tt.store %a, %rm_5 : !tt.ptr<f16>
  tt.return
}"""


def test_mlir_names_and_order_of_pure_ops_do_not_count():
    assert TTGIR_A != TTGIR_B
    assert normalise_stage("ttgir", TTGIR_A) == normalise_stage("ttgir", TTGIR_B)


def test_mlir_data_flow_and_effect_order_do_count():
    swapped = TTGIR_A.replace("arith.subi %rm_4, %rm_2", "arith.subi %rm_2, %rm_4")  # operands swapped
    assert normalise_stage("ttgir", swapped) != normalise_stage("ttgir", TTGIR_A)
    stores_other = TTGIR_A.replace("tt.store %a, %rm_6", "tt.store %a, %rm_5")  # stores the other layout copy
    assert normalise_stage("ttgir", stores_other) != normalise_stage("ttgir", TTGIR_A)
    lines = TTGIR_A.splitlines()
    fence, store = lines.index("  ttng.fence_async_shared {bCluster = false}"), lines.index("  tt.store %a, %rm_6 : "
                                                                                           "!tt.ptr<f16>")
    lines[fence], lines[store] = lines[store], lines[fence]  # the fence after the store instead of before
    assert normalise_stage("ttgir", "\n".join(lines)) != normalise_stage("ttgir", TTGIR_A)


PTX_A = """\
\tmov.u32 \t%r1, %tid.x;
\tbfe.u32 \t%r4, %r1, 3, 4;
\tshr.u32 \t%r5, %r1, 4;
\tor.b32 \t%r6, %r4, %r5;
\tbar.sync \t0;
\tst.shared.u32 \t[%r6], %r4;
"""
PTX_B = """\
\tmov.u32 \t%r1, %tid.x;
\tshr.u32 \t%r63, %r1, 4;
\tbfe.u32 \t%r9, %r1, 3, 4;
\tor.b32 \t%r6, %r9, %r63;
\tbar.sync \t0;
\tst.shared.u32 \t[%r6], %r9;
"""


def test_ptx_register_numbers_and_pure_order_do_not_count_but_data_flow_does():
    assert normalise_stage("ptx", PTX_A) == normalise_stage("ptx", PTX_B)
    other_operand = PTX_A.replace("[%r6], %r4", "[%r6], %r5")  # stores another value
    assert normalise_stage("ptx", other_operand) != normalise_stage("ptx", PTX_A)
    barrier_later = PTX_A.replace("\tbar.sync \t0;\n\tst.shared.u32 \t[%r6], %r4;\n",
                                  "\tst.shared.u32 \t[%r6], %r4;\n\tbar.sync \t0;\n")
    assert normalise_stage("ptx", barrier_later) != normalise_stage("ptx", PTX_A)


def test_llvm_ir_value_and_label_numbers_do_not_count():
    a = ("define void @k(i32 %0) {\n  %2 = lshr i32 %0, 3, !dbg !11\n  %3 = lshr i32 %0, 4, !dbg !11\n"
         "  %4 = or i32 %2, %3\n  br label %5\n5:\n  %6 = phi i32 [ %4, %1 ], [ %7, %5 ]\n  %7 = add i32 %6, 1\n"
         "  store i32 %7, ptr null\n  ret void\n}")
    b = ("define void @k(i32 %0) {\n  %2 = lshr i32 %0, 4, !dbg !12\n  %3 = lshr i32 %0, 3, !dbg !12\n"
         "  %4 = or i32 %3, %2\n  br label %5\n5:\n  %6 = phi i32 [ %4, %1 ], [ %7, %5 ]\n  %7 = add i32 %6, 1\n"
         "  store i32 %7, ptr null\n  ret void\n}")
    assert normalise_stage("llir", a) == normalise_stage("llir", b)
    assert normalise_stage("llir", a) != normalise_stage("llir", a.replace("add i32 %6, 1", "add i32 %6, 2"))


def _fresh_hashes(compile_once, times: int) -> list[dict[str, str]]:
    """Stage hashes of `times` compiles of one input (the caller bypasses Triton's cache)."""
    out = []
    for _ in range(times):
        asm = compile_once()
        out.append(stage_hashes({k: v for k, v in asm.items() if isinstance(v, str) and k != "json"}))
    return out


def _assert_equal_hashes(compile_once, times: int) -> None:
    hashes = _fresh_hashes(compile_once, times)
    assert {"ttgir", "llir", "ptx"} <= set(hashes[0])
    assert all(h == hashes[0] for h in hashes), [{k for k in h if h[k] != hashes[0].get(k)} for h in hashes]


def test_repeated_fresh_compiles_of_a_plain_two_cta_kernel_hash_equal(monkeypatch):
    """Triton alone, num_ctas=2: the TTGIR text differs between compiles of one process (measured on 3.6: 3 texts
    in 4 compiles, LLIR/PTX 2). Its canonical hashes must not."""
    import triton

    from bwtriton.examples.matmul import matmul_constexprs, matmul_kernel, matmul_signature
    from bwtriton.specialize import build_source
    from bwtriton.targets import get_target

    def plain():
        src, _ = build_source(matmul_kernel, matmul_signature("fp16"), matmul_constexprs(256, 128, 64), None, None)
        return triton.compile(src, target=get_target("sm_100a").gpu_target(),
                              options={"num_ctas": 2, "num_warps": 4}).asm

    monkeypatch.setenv("TRITON_ALWAYS_COMPILE", "1")  # each compile afresh, as in a new process
    _assert_equal_hashes(plain, 4)


def test_repeated_fresh_compiles_of_a_paired_two_cta_kernel_hash_equal(monkeypatch):
    """bwtriton's 2-CTA path (pair-ctas, cta_group::2): every stage, Triton's own texts included, hashes equal."""
    import bwtriton
    from bwtriton.examples.tma_matmul import matmul_tma_bt_kernel, tma_bt_spec

    def paired():
        spec = tma_bt_spec()
        return bwtriton.compile(matmul_tma_bt_kernel, signature=spec["signature"], constexprs=spec["constexprs"],
                                two_cta=True).asm

    monkeypatch.setenv("TRITON_ALWAYS_COMPILE", "1")
    _assert_equal_hashes(paired, 3)


@pytest.mark.parametrize("rules", ["stages", "any", "stages,spills,registers>+8,findings,tcgen05"])
def test_a_nondeterministic_stage_is_reported_as_such_not_as_a_change(rules):
    base = {"census": {}, "sass": {}, "resources": {}, "findings": {"by_check": {}}, "ptx_version": "8.8",
            "specialisation": {"divisible_by_16": ["a"], "source": "assumed"}}
    old = {**base, "hashes": {"ttgir": "aa", "ptx": "11"}, "nondeterministic": ["ttgir"]}
    new = {**base, "hashes": {"ttgir": "bb", "ptx": "11"}, "nondeterministic": []}
    doc = lambda rec: {"triton": "3.6.0", "passes": "none", "records": {"k": rec}}  # noqa: E731
    result = diff_snapshots(doc(old), doc(new), parse_fail_on(rules))
    (kernel,) = result["kernels"]
    assert kernel["status"] == "unchanged" and not result["failing"]
    assert [c["what"] for c in kernel["groups"]["nondeterministic"]][0].startswith("ttgir hash (stage is "
                                                                                    "nondeterministic")
    changed = {**new, "hashes": {"ttgir": "bb", "ptx": "22"}}  # a stable stage that changed still counts
    result = diff_snapshots(doc(old), doc(changed), parse_fail_on(rules))
    assert result["kernels"][0]["status"] == "changed" and result["failing"]


def test_check_determinism_records_no_unstable_stage_for_a_two_cta_kernel(tmp_path, monkeypatch, capsys):
    """`snapshot --check-determinism` compiles once more afresh: after canonicalisation nothing differs."""
    import json

    from bwtriton.cli import main
    monkeypatch.chdir(tmp_path)
    (tmp_path / "k.py").write_text(
        "from bwtriton.examples.matmul import matmul_kernel, matmul_signature, matmul_constexprs\n"
        "BWTRITON_SPECS = {'matmul_kernel': {'signature': matmul_signature('fp16'), 'num_ctas': 2,\n"
        "                                    'constexprs': matmul_constexprs(256, 128, 64)}}\n")
    assert main(["snapshot", "k.py", "--passes", "none", "--check-determinism", "-o", "s.json", "-q",
                 "--no-cache"]) == 0, capsys.readouterr().err
    (record,) = json.loads((tmp_path / "s.json").read_text())["records"].values()
    assert record["resources"]["num_ctas"] == 2 and record["nondeterministic"] == []


def test_hashes_of_snapshots_of_different_formats_are_not_compared():
    """Format 1 hashed raw text, format 2 canonical text: their hashes differ for the same code."""
    from bwtriton.regress.diff import render_markdown
    rec = {"census": {}, "resources": {}, "findings": {"by_check": {}}, "ptx_version": "8.8"}
    old = {"format": 1, "records": {"k": {**rec, "hashes": {"ptx": "aa"}}}}
    new = {"format": 2, "records": {"k": {**rec, "hashes": {"ptx": "bb"}, "specialisation": None}}}
    result = diff_snapshots(old, new, parse_fail_on("stages"))
    assert result["kernels"][0]["status"] == "unchanged" and not result["failing"]
    assert "Stage hashes not compared: the snapshots have formats 1 and 2" in render_markdown(result)
