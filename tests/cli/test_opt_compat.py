"""triton-opt compatibility of `bwtriton opt` / `python -m bwtriton.opt`: flags, split input, pass options
applied or refused, -verify-diagnostics, local-scope printing, unreachable passes."""
from __future__ import annotations

import textwrap

import pytest

from bwtriton.opt import opt_main, parse_command_line, parse_pass_list, split_chunks
from bwtriton.optcompat.diagnostics import parse_diagnostics, parse_expectations, verify
from bwtriton.optcompat.local_scope import inline_aliases
from bwtriton.optcompat.triton_options import adder_args, check_applied, context_for, split_option_text

# Two functions whose `arith.addi %x, 0` canonicalize folds away; a split marker between them.
FOLDABLE = textwrap.dedent("""\
    module attributes {"ttg.num-warps" = 4 : i32, "ttg.num-ctas" = 1 : i32} {
      tt.func @first(%arg0: i32) -> i32 {
        %c0 = arith.constant 0 : i32
        %0 = arith.addi %arg0, %c0 : i32
        tt.return %0 : i32
      }
    }
    // -----
    module attributes {"ttg.num-warps" = 4 : i32, "ttg.num-ctas" = 1 : i32} {
      tt.func @second(%arg0: i32) -> i32 {
        tt.return %arg0 : i32
      }
    }
    """)


def run_opt_cli(capsys, tmp_path, text: str, *flags: str) -> tuple[int, str, str]:
    src = tmp_path / "in.mlir"
    src.write_text(text)
    rc = opt_main([str(src), *flags])
    out, err = capsys.readouterr()
    return rc, out, err


def test_command_line_reads_triton_opt_flags_in_order():
    inv = parse_command_line(["x.mlir", "-split-input-file", "--tritongpu-pipeline=num-stages=2 "
                              "dump-intermediate-steps=true", "-canonicalize", "-o", "out.mlir",
                              "-verify-diagnostics=only-expected", "-mlir-print-local-scope"])
    assert inv.split and inv.output == "out.mlir" and inv.verify == "only-expected" and inv.local_scope
    assert [(s.name, s.options) for s in inv.steps] == [
        ("tritongpu-pipeline", {"num-stages": "2", "dump-intermediate-steps": "true"}), ("canonicalize", {})]


def test_pass_pipeline_flattens_anchors_and_reads_options():
    steps = parse_pass_list("builtin.module(tritongpu-hoist-tmem-alloc{hoist-out-of-if=true}, "
                            "tt.func(cse), convert-triton-to-tritongpu{num-warps=8 target=cuda:100})")
    assert [(s.name, s.options) for s in steps] == [
        ("tritongpu-hoist-tmem-alloc", {"hoist-out-of-if": "true"}), ("cse", {}),
        ("convert-triton-to-tritongpu", {"num-warps": "8", "target": "cuda:100"})]
    assert split_option_text("a=1 b='x y' c={p q}") == {"a": "1", "b": "x y", "c": "{p q}"}


def test_split_keeps_original_line_numbers():
    chunks = split_chunks(FOLDABLE, True)
    assert [first for first, _ in chunks] == [0, 8]  # 0-based index of the line after the marker
    assert "@second" in chunks[1][1] and "@second" not in chunks[0][1]
    assert split_chunks(FOLDABLE, False) == [(0, FOLDABLE)]


def test_option_of_triton_pass_is_applied():
    cctx = context_for(None, 4, 1, 3)
    assert adder_args("tritongpu-hoist-tmem-alloc", {"hoist-out-of-if": "true"}, cctx) == (True,)
    args = adder_args("convert-triton-to-tritongpu", {"num-warps": "8", "target": "cuda:100"}, cctx)
    assert args == ("cuda:100", 8, 32, 1)
    check_applied("tritongpu-hoist-tmem-alloc", {"hoist-out-of-if": "true"},
                  "any(tritongpu-hoist-tmem-alloc{hoist-out-of-if=true})")


def test_option_dropped_by_the_pass_manager_is_an_error():
    from bwtriton.errors import UnknownPassError
    with pytest.raises(UnknownPassError, match="did not take effect"):
        check_applied("tritongpu-hoist-tmem-alloc", {"hoist-out-of-if": "true"},
                      "any(tritongpu-hoist-tmem-alloc{hoist-out-of-if=false})")


@pytest.mark.parametrize("spec,message", [
    ("canonicalize{region-simplify=disabled}", "cannot be applied: Triton 3.6's Python binding "
                                               "passes.common.add_canonicalizer() does not take it"),
    ("convert-triton-to-tritongpu{enable-source-remat=true}", "only its default enable-source-remat=false"),
    ("tritongpu-hoist-tmem-alloc{hoist-out-of-iff=true}", "has no option 'hoist-out-of-iff'"),
    ("tritongpu-hoist-tmem-alloc{hoist-out-of-if=maybe}", "expected true or false"),
])
def test_options_that_cannot_be_applied_are_refused(capsys, tmp_path, spec, message):
    rc, out, err = run_opt_cli(capsys, tmp_path, FOLDABLE, f"--pass-pipeline=builtin.module({spec})")
    assert rc == 1 and message in err and out == ""


def test_default_option_value_of_an_unsettable_option_is_accepted(capsys, tmp_path):
    rc, out, err = run_opt_cli(capsys, tmp_path, FOLDABLE, "-split-input-file",
                               "--canonicalize=region-simplify=normal")
    assert rc == 0, err
    assert "arith.addi" not in out and out.count("// -----") == 1


def test_split_input_runs_each_chunk_and_joins_outputs(capsys, tmp_path):
    rc, out, err = run_opt_cli(capsys, tmp_path, FOLDABLE, "-split-input-file", "-canonicalize")
    assert rc == 0, err
    first, second = out.split("// -----\n")
    assert "@first" in first and "arith.addi" not in first and "tt.return %arg0" in first
    assert "@second" in second and "loc(" not in out


def test_unknown_pass_is_not_reachable_from_python(capsys, tmp_path):
    rc, _, err = run_opt_cli(capsys, tmp_path, FOLDABLE, "--tritongpu-test-pipeline-lower-loop")
    assert rc == 1 and "'tritongpu-test-pipeline-lower-loop'" in err and "not reachable from Python" in err


def test_unregistered_dialect_gets_a_reason_not_a_fake_pass(capsys, tmp_path):
    text = 'module {\n  tt.func @f() {\n    "test.op"() : () -> ()\n    tt.return\n  }\n}\n'
    rc, out, err = run_opt_cli(capsys, tmp_path, text, "-allow-unregistered-dialect", "-canonicalize")
    assert rc == 1 and out == ""
    assert "-allow-unregistered-dialect cannot be honoured" in err and "allowUnregisteredDialects()" in err


def test_no_target_means_compute_capability_80_for_triton_passes():
    assert context_for(None, 4, 1, 3).capability == 80
    assert context_for(100, 4, 1, 3).capability == 100


# ----------------------------------------------------------------------------------------------------------
# -verify-diagnostics
BAD_TYPES = textwrap.dedent("""\
    module {
      tt.func @f(%arg0: i32) {
        // expected-error @+1 {{expects different type than prior uses: 'i64' vs 'i32'}}
        %0 = arith.addi %arg0, %arg0 : i64
        tt.return
      }
    }
    """)


def test_verify_diagnostics_accepts_the_expected_error(capsys, tmp_path):
    rc, _, err = run_opt_cli(capsys, tmp_path, BAD_TYPES, "-verify-diagnostics")
    assert rc == 0, err


def test_verify_diagnostics_reports_a_wrong_expectation(capsys, tmp_path):
    rc, _, err = run_opt_cli(capsys, tmp_path, BAD_TYPES.replace("@+1", "@above"), "-verify-diagnostics")
    assert rc == 1
    assert "unexpected error" in err and "line 4" in err and "was not produced" in err


def test_expectation_locations_and_regex():
    text = "a\n// expected-error @below {{x}}\n// expected-warning@above {{y}}\nb\n// expected-note @-4 {{z}}\n"
    exp = parse_expectations(text)
    assert [(e.severity, e.line) for e in exp] == [("error", 4), ("warning", 1), ("note", 1)]
    diags = parse_diagnostics('loc("f.mlir":4:3): error: found x here\n/t/f.mlir:1:1: warning: why y\n'
                              "  continuation\n")
    assert [(d.severity, d.line) for d in diags] == [("error", 4), ("warning", 1)]
    assert "continuation" in diags[1].message
    problems = verify(diags, parse_expectations(text), only_expected=False)
    assert problems[0].startswith("line 5: expected note \"z\" at line 1 was not produced")
    regex = parse_expectations("x // expected-error-re {{value {{[0-9]+}} is bad}}\n")
    assert regex[0].is_regex
    assert verify(parse_diagnostics('loc("f":1:1): error: value 42 is bad'), regex, False) == []


def test_plain_expectation_is_a_literal_substring_and_re_one_is_not():
    diag = 'loc("f":1:1): error: shape [4] vs [8]'
    literal = parse_expectations("x // expected-error {{shape [4] vs}}\n")
    assert not literal[0].is_regex
    assert verify(parse_diagnostics(diag), literal, False) == []
    # `[48]` would match as a regex class; without -re it is literal text, so it is not found.
    assert "was not produced" in verify(parse_diagnostics(diag),
                                        parse_expectations("x // expected-error {{shape [48]}}\n"), False)[-1]
    assert verify(parse_diagnostics(diag),
                  parse_expectations("x // expected-error-re {{shape [{{[48]}}] vs}}\n"), False) == []


def test_multi_line_message_keeps_indentation_and_ends_at_its_snippet():
    printed = ('loc("f":3:5): error: conflicting values:\n  #a<{x = [1]}>\nand\n  #a<{x = [2]}>\n'
               "    %0 = arith.constant 0 : i32\n    ^\nmodule {\n}\n")
    diag, = parse_diagnostics(printed)
    assert diag.message == "conflicting values:\n  #a<{x = [1]}>\nand\n  #a<{x = [2]}>"
    ok = parse_expectations("\n\nop // expected-error-re {{values:{{.}}  #a<{x = [1]}>{{.*}}and}}\n")
    assert verify([diag], ok, False) == []
    stripped = parse_diagnostics(printed.replace("\n  #a", "\n#a"))
    assert verify(stripped, parse_expectations("\n\nop // expected-error-re {{values:{{.}}  #a}}\n"),
                  False)[0].startswith("line 3: unexpected error")


def test_missing_note_says_why_when_no_note_was_printed():
    exp = parse_expectations("op // expected-note {{prior use here}}\n")
    problems = verify(parse_diagnostics('loc("f":1:1): error: bad'), exp, only_expected=True)
    assert problems and "drops attached notes" in problems[0]
    printed_note = 'loc("f":1:1): error: bad\nloc("f":9:1): note: elsewhere'
    problems = verify(parse_diagnostics(printed_note), parse_expectations("op // expected-note {{prior}}\n"), True)
    assert problems and "drops attached notes" not in problems[0]


def test_debug_flag_is_ignored_with_a_note(capsys):
    inv = parse_command_line(["in.mlir", "--debug", "-canonicalize"])
    assert [s.name for s in inv.steps] == ["canonicalize"]
    assert "--debug ignored" in capsys.readouterr().err


def test_filecheck_wrapper_drops_only_display_flags():
    from bwtriton.optcompat.filecheck import strip_display_flags
    argv = ["f.mlir", "--dump-input-context", "20", "--check-prefix=A", "--dump-input-context=5", "--dump-input=fail"]
    assert strip_display_flags(argv) == ["f.mlir", "--check-prefix=A", "--dump-input=fail"]


def test_only_expected_ignores_unexpected_diagnostics_but_not_missing_ones():
    diags = parse_diagnostics('loc("f":9:1): error: elsewhere')
    assert verify(diags, parse_expectations("// expected-error @+1 {{x}}\nop\n"), True) == [
        'line 1: expected error "x" at line 2 was not produced']
    assert verify(diags, [], False) == ["line 9: unexpected error: elsewhere"]


# ----------------------------------------------------------------------------------------------------------
# -mlir-print-local-scope
def test_local_scope_inlines_aliases_including_nested_ones():
    text = ("#blocked = #ttg.blocked<{order = [0]}>\n#blocked1 = #ttg.slice<{dim = 0, parent = #blocked}>\n"
            "module {\n  %0 : tensor<4xi32, #blocked1>, tensor<4xi32, #blocked>\n}\n")
    out = inline_aliases(text)
    assert "#blocked =" not in out and "#blocked1" not in out
    assert "tensor<4xi32, #ttg.slice<{dim = 0, parent = #ttg.blocked<{order = [0]}>}>>" in out
    assert "tensor<4xi32, #ttg.blocked<{order = [0]}>>" in out


# ----------------------------------------------------------------------------------------------------------
# mlir-translate / opt / llc stand-ins (bwtriton.optcompat.translate)
LLVM_DIALECT = """module {
  llvm.func @twice(%arg0: i32) -> i32 {
    %zero = llvm.mlir.constant(0 : i32) : i32
    %0 = llvm.add %arg0, %arg0 : i32
    %1 = llvm.or %0, %zero : i32
    llvm.return %1 : i32
  }
}
"""


def test_translate_keeps_ir_unoptimized_and_o1_folds_it():
    from bwtriton.optcompat.translate import translate
    plain, optimized = translate(LLVM_DIALECT, None), translate(LLVM_DIALECT, 1)
    assert "define i32 @twice(i32 %0)" in plain and "or i32" in plain
    assert "or i32" not in optimized and ("shl i32 %0, 1" in optimized or "add i32 %0, %0" in optimized)


def test_llc_stand_in_emits_ptx_for_the_requested_cpu():
    from bwtriton.optcompat.translate import llc, translate
    ptx = llc(translate(LLVM_DIALECT, None), "nvptx64-nvidia-cuda", "sm_90", "+ptx83")
    assert ".target sm_90" in ptx and ".version 8.3" in ptx


def test_translate_refuses_non_llvm_dialect_input(capfd):
    from bwtriton.errors import InputError
    from bwtriton.optcompat.translate import translate
    with pytest.raises(InputError, match="must be in the LLVM dialect"):
        translate("module {\n  tt.func @f() {\n    tt.return\n  }\n}\n", None)


# ----------------------------------------------------------------------------------------------------------
# upstream lit trees, one test per RUN line (bwtriton.optcompat.upstream_lit)
def test_one_run_per_file_keeps_line_numbers_and_comments_out_the_others(tmp_path):
    from bwtriton.optcompat.upstream_lit import one_run_per_file, prepare
    text = ("// RUN: triton-opt %s -a | FileCheck %s\n// RUN: triton-opt %s -b \\\n// RUN:   -c | FileCheck %s\n"
            "module {}\n// CHECK: module\n")
    first, second = one_run_per_file(text)
    assert first.splitlines()[0].startswith("// RUN: triton-opt %s -a")
    assert first.splitlines()[1:3] == ["// COM: triton-opt %s -b \\", "// COM:   -c | FileCheck %s"]
    assert second.splitlines()[0].startswith("// COM:") and "RUN:   -c" in second.splitlines()[2]
    assert len(first.splitlines()) == len(second.splitlines()) == len(text.splitlines())
    (tmp_path / "t" / "Sub").mkdir(parents=True)
    (tmp_path / "t" / "Sub" / "x.mlir").write_text(text)
    assert prepare(tmp_path / "t", tmp_path / "out") == 2
    assert (tmp_path / "out" / "Sub" / "x.run2.mlir").exists()
    assert "bwtriton.optcompat.filecheck" in (tmp_path / "out" / "lit.cfg.py").read_text()
