"""The stage hook, pass selection and cache keys (no GPU: everything compiles for sm_100a/sm_90a offline)."""
from __future__ import annotations

import pytest

import bwtriton
from bwtriton.errors import CompileError, UnknownPassError
from bwtriton.examples.matmul import matmul_constexprs, matmul_kernel, matmul_signature
from bwtriton.passes.base import REGISTRY, Pass, PassOption, Stage, register_pass
from bwtriton.pipeline import PassSelection, parse_pass_spec, resolve_passes


@pytest.fixture
def probe_passes():
    """Two throwaway passes: a TTGIR one that sets maxnreg (visible in PTX) and counts calls, a PTX one that
    appends a comment. Removed from the registry afterwards."""
    calls = {"ttgir": 0, "ptx": 0}

    @register_pass
    class SetMaxnreg(Pass):
        name = "test-set-maxnreg"
        stage = Stage.TTGIR
        purpose = "test: set ttg.maxnreg"
        options = (PassOption("regs", int, 168, "register cap"),)
        default_enabled = False

        def run(self, mod, ctx):
            from triton._C.libtriton import ir
            calls["ttgir"] += 1
            mod.set_attr("ttg.maxnreg", ir.builder(mod.context).get_int32_attr(ctx.options["regs"]))
            ctx.report["regs"] = ctx.options["regs"]

    @register_pass
    class TagPtx(Pass):
        name = "test-tag-ptx"
        stage = Stage.PTX
        purpose = "test: append a comment to the PTX"
        default_enabled = False

        def applies_to(self, target):
            return target.has_tcgen05

        def run(self, ptx, ctx):
            calls["ptx"] += 1
            return ptx + "\n// tagged-by-test\n"

    yield calls
    REGISTRY.pop("test-set-maxnreg", None)
    REGISTRY.pop("test-tag-ptx", None)


def _compile(**kw):
    return bwtriton.compile(matmul_kernel, signature=matmul_signature("fp16"), constexprs=matmul_constexprs(), **kw)


def test_stages_carry_the_text_after_our_passes_and_keep_tritons_own(probe_passes):
    res = _compile(passes=["test-set-maxnreg{regs=128}", "test-tag-ptx"])
    assert res.stages == ["source", "ttir", "ttgir", "llir", "ptx", "cubin", "ttgir_triton", "ptx_triton"]
    assert "ttg.maxnreg = 128" in res.asm["ttgir"] and "ttg.maxnreg" not in res.asm["ttgir_triton"]
    assert ".maxnreg 128" in res.asm["ptx"] and ".maxnreg" not in _compile(passes="none").asm["ptx"]
    assert res.asm["ptx"].rstrip().endswith("// tagged-by-test")
    assert res.asm["ptx_triton"] + "\n// tagged-by-test\n" == res.asm["ptx"]
    assert res.reports["test-set-maxnreg"] == {"regs": 128}


def test_the_cubin_is_built_from_asm_ptx(probe_passes):
    """A PTX pass that adds a trap: the trap is in asm["ptx"] and in the cubin's SASS, not in Triton's PTX."""
    @register_pass
    class AddTrap(Pass):
        name = "test-add-trap"
        stage = Stage.PTX
        purpose = "test: trap before the kernel's last ret"
        default_enabled = False

        def run(self, ptx, ctx):
            head, sep, tail = ptx.rpartition("ret;")
            return head + "trap;\n\t" + sep + tail
    try:
        res = _compile(passes=["test-add-trap"])
    finally:
        REGISTRY.pop("test-add-trap")
    assert "trap;" in res.asm["ptx"] and "trap;" not in res.asm["ptx_triton"]
    plain = _compile(passes="none").asm["sass"]
    assert res.asm["sass"].count("BPT.TRAP") == plain.count("BPT.TRAP") + 1


def test_pass_that_does_not_apply_is_skipped(probe_passes):
    res = _compile(passes=["test-tag-ptx"], target="sm_90a")
    assert "ptx_triton" not in res.stages and "tagged-by-test" not in res.asm["ptx"]


def test_changing_passes_or_options_never_serves_a_stale_cubin(probe_passes):
    a = _compile(passes=["test-set-maxnreg{regs=128}"])
    b = _compile(passes=["test-set-maxnreg{regs=96}"])
    assert ".maxnreg 128" in a.asm["ptx"] and ".maxnreg 96" in b.asm["ptx"]
    assert a.kernel.hash != b.kernel.hash
    again = _compile(passes=["test-set-maxnreg{regs=128}"])
    assert again.kernel.hash == a.kernel.hash and ".maxnreg 128" in again.asm["ptx"]


def test_selection_key_covers_version_passes_and_options(probe_passes, monkeypatch):
    k1 = resolve_passes("test-set-maxnreg{regs=1}", "sm_100a").key()
    assert k1 == resolve_passes("test-set-maxnreg{regs=1}", "sm_100a").key()
    assert k1 != resolve_passes("test-set-maxnreg{regs=2}", "sm_100a").key()
    assert k1 != resolve_passes("test-set-maxnreg{regs=1},test-tag-ptx", "sm_100a").key()
    monkeypatch.setattr(bwtriton.pipeline, "__version__", "9.9.9")
    assert k1 != resolve_passes("test-set-maxnreg{regs=1}", "sm_100a").key()


def test_spec_grammar(probe_passes, monkeypatch):
    assert [(e.sign, e.name, e.options) for e in parse_pass_spec("a{x=1,y=2},-b, +c")] == [
        ("", "a", "x=1,y=2"), ("-", "b", ""), ("+", "c", "")]
    defaults = resolve_passes(None, "sm_100a", use_env=False).names
    assert "test-set-maxnreg" not in defaults
    plus = resolve_passes("+test-set-maxnreg", "sm_100a").names
    assert set(plus) == set(defaults) | {"test-set-maxnreg"}
    assert resolve_passes("none", "sm_100a").names == []
    assert resolve_passes("test-tag-ptx", "sm_100a").names == ["test-tag-ptx"]
    monkeypatch.setenv("BWTRITON_PASSES", "+test-tag-ptx")
    assert "test-tag-ptx" in resolve_passes(None, "sm_100a").names
    assert "test-tag-ptx" not in resolve_passes(None, "sm_100a", use_env=False).names


def test_unknown_pass_and_option_errors_name_the_fix(probe_passes):
    with pytest.raises(UnknownPassError, match=r"unknown pass 'test-set-maxreg'.*Did you mean: test-set-maxnreg"):
        resolve_passes("test-set-maxreg", "sm_100a")
    with pytest.raises(UnknownPassError, match=r"no option 'reg'.*Did you mean: regs"):
        resolve_passes("test-set-maxnreg{reg=3}", "sm_100a")
    with pytest.raises(UnknownPassError, match=r"takes a int, got 'many'"):
        resolve_passes("test-set-maxnreg{regs=many}", "sm_100a")


def test_a_pass_error_fails_the_compile_with_its_name(probe_passes):
    @register_pass
    class Refuse(Pass):
        name = "test-refuse"
        stage = Stage.TTGIR
        purpose = "test: always refuses"
        default_enabled = False

        def run(self, mod, ctx):
            ctx.error("kernel refused: reduce BLOCK_N")
    try:
        with pytest.raises(CompileError, match=r"\[test-refuse\] kernel refused: reduce BLOCK_N"):
            _compile(passes=["test-refuse"])
    finally:
        REGISTRY.pop("test-refuse")


def test_a_crashing_pass_is_reported_with_its_name(probe_passes):
    @register_pass
    class Crash(Pass):
        name = "test-crash"
        stage = Stage.PTX
        purpose = "test: raises a bug"
        default_enabled = False

        def run(self, ptx, ctx):
            raise KeyError("oops")
    try:
        with pytest.raises(CompileError, match=r"\[test-crash\] pass failed on the ptx stage: KeyError"):
            _compile(passes=["test-crash"])
    finally:
        REGISTRY.pop("test-crash")


def test_registration_rejects_incomplete_and_duplicate_passes():
    with pytest.raises(TypeError, match="must set `purpose`"):
        @register_pass
        class NoPurpose(Pass):
            name = "test-no-purpose"
            stage = Stage.PTX
    with pytest.raises(TypeError, match="Stage"):
        @register_pass
        class BadStage(Pass):
            name = "test-bad-stage"
            stage = "ptx"
            purpose = "x"


def test_enable_routes_jit_launch_compiles_and_disable_restores(probe_passes, tmp_path):
    from triton import knobs
    before_hook, before_dir = knobs.runtime.add_stages_inspection_hook, knobs.cache.dir
    with bwtriton.enable(["test-tag-ptx"], target="sm_100a"):
        hook = knobs.runtime.add_stages_inspection_hook
        assert hook is not None and knobs.cache.dir != before_dir
        stages = {"ttir": None, "ttgir": None, "llir": None, "ptx": None, "cubin": None}
        hook(None, stages, None, None, 100)
        assert list(stages) == ["ttir", "ttgir", "llir", "ptx", "cubin", "ptx_triton"]
    assert knobs.runtime.add_stages_inspection_hook is before_hook and knobs.cache.dir == before_dir


def test_selection_entries_are_in_pipeline_order(probe_passes):
    sel = resolve_passes("test-tag-ptx,test-set-maxnreg", "sm_100a")
    assert sel.names == ["test-set-maxnreg", "test-tag-ptx"]  # ttgir before ptx, whatever the spec order
    assert isinstance(sel, PassSelection) and sel.options_for("test-set-maxnreg") == {"regs": 168}


def test_editing_bwtriton_source_changes_the_key(probe_passes, monkeypatch):
    from bwtriton import pipeline
    k1 = resolve_passes("test-tag-ptx", "sm_100a").key()
    monkeypatch.setattr(pipeline, "source_digest", lambda: "edited")
    assert resolve_passes("test-tag-ptx", "sm_100a").key() != k1


def test_nested_enable_restores_the_outer_selection_and_target(probe_passes):
    from triton import knobs
    before = knobs.runtime.add_stages_inspection_hook
    with bwtriton.enable(["test-tag-ptx"], target="sm_100a"):
        outer_dir = knobs.cache.dir
        with bwtriton.enable("none", target="sm_90a"):
            assert knobs.cache.dir != outer_dir
        assert knobs.cache.dir == outer_dir
        stages = {"ttir": None, "ttgir": None, "llir": None, "ptx": None, "cubin": None}
        knobs.runtime.add_stages_inspection_hook(None, stages, None, None, 90)  # a Hopper compile
        assert "ptx_triton" in stages  # the outer explicit sm_100a target is kept, not re-derived from capability 90
    assert knobs.runtime.add_stages_inspection_hook is before


@pytest.mark.parametrize("spec", [",,", "plan-tmem,,verify-tcgen05", "plan-tmem,", "", " "])
def test_empty_spec_entries_are_errors_not_defaults(spec):
    with pytest.raises(UnknownPassError, match=r"empty entry in pass spec .*use 'none' for no passes"):
        resolve_passes(spec, "sm_100a")


def test_blank_env_means_the_defaults(monkeypatch):
    monkeypatch.setenv("BWTRITON_PASSES", "  ")
    assert resolve_passes(None, "sm_100a").names == resolve_passes(None, "sm_100a", use_env=False).names


def test_requires_selects_the_required_pass_first_and_refuses_removing_it():
    assert resolve_passes("plan-tmem", "sm_100a").names == ["tmem-ttir-snapshot", "plan-tmem"]
    assert "tmem-ttir-snapshot" not in resolve_passes("-plan-tmem", "sm_100a").names
    with pytest.raises(UnknownPassError, match=r"tmem-ttir-snapshot is required by plan-tmem; remove -plan-tmem"):
        resolve_passes("-tmem-ttir-snapshot", "sm_100a")


def test_with_pass_adds_a_pass_in_pipeline_order_with_options():
    base = resolve_passes("verify-tcgen05", "sm_100a")
    sel = base.with_pass("pair-ctas", mode="auto")
    assert sel.names == ["pair-ctas", "verify-tcgen05"] and sel.options_for("pair-ctas") == {"mode": "auto"}
    assert sel.with_pass("pair-ctas").options_for("pair-ctas") == {"mode": "auto"}  # keeps given options
    assert sel.without_pass("pair-ctas") == base
    with pytest.raises(UnknownPassError, match="no option 'mod'"):
        base.with_pass("pair-ctas", mod="auto")


def test_pipeline_table_rejects_a_pass_before_what_it_requires(monkeypatch):
    import bwtriton.passes as passes
    from bwtriton.passes import PlanTmem, TmemTtirSnapshot
    assert passes.PIPELINE[Stage.TTIR][-1] is TmemTtirSnapshot and passes.PIPELINE[Stage.TTGIR][0] is PlanTmem
    monkeypatch.setitem(passes.PIPELINE, Stage.TTIR, ())
    monkeypatch.setitem(passes.PIPELINE, Stage.TTGIR, (TmemTtirSnapshot, PlanTmem))
    with pytest.raises(TypeError, match="tmem-ttir-snapshot is a ttir pass, listed under ttgir"):
        passes._check_table()
    monkeypatch.setitem(passes.PIPELINE, Stage.TTGIR, (PlanTmem,))
    with pytest.raises(TypeError, match="plan-tmem requires tmem-ttir-snapshot, which must be listed before it"):
        passes._check_table()


def test_a_pass_reads_only_what_it_declared_it_requires():
    from bwtriton.passes import PassContext
    provider = PassContext(pass_name="a", target=None, provided={})
    provider.provide("text")
    reader = PassContext(pass_name="b", target=None, requires=("a",), provided=provider.provided)
    assert reader.required("a") == "text"
    with pytest.raises(TypeError, match="reads 'c' without declaring requires"):
        reader.required("c")


def test_scoped_installs_hook_and_enables_cache_folder_without_clearing_jit_caches(probe_passes, monkeypatch):
    import os

    from triton import knobs

    from bwtriton import pipeline
    cleared = []
    monkeypatch.setattr(pipeline, "_clear_jit_caches", lambda: cleared.append(1))
    sel = resolve_passes("test-tag-ptx", "sm_100a")
    before_hook, before_dir = knobs.runtime.add_stages_inspection_hook, knobs.cache.dir
    with pipeline.scoped(sel, bwtriton.get_target("sm_100a")):
        scoped_dir = knobs.cache.dir
        assert scoped_dir == os.path.join(str(before_dir), f"bwtriton-{sel.key()}")
        stages = {"ttir": None, "ttgir": None, "llir": None, "ptx": None, "cubin": None}
        knobs.runtime.add_stages_inspection_hook(None, stages, None, None, 100)
        assert "ptx_triton" in stages  # our hook wrapped the stages
    assert knobs.runtime.add_stages_inspection_hook is before_hook and knobs.cache.dir == before_dir
    assert cleared == []  # scoped never drops other kernels' in-memory entries
    with bwtriton.enable(["test-tag-ptx"], target="sm_100a"):  # enable() picks the same folder: one cache entry
        assert knobs.cache.dir == scoped_dir
        with pipeline.scoped(sel):  # nested inside enable(): still the same folder, not one folder deeper
            assert knobs.cache.dir == scoped_dir
