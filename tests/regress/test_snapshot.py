"""`bwtriton snapshot` / `bwtriton diff`: the readers (PTX census incl. PTX .version 9.x, SASS histogram), the
diff rules and exit codes, and the checked-in corpus snapshot against a fresh one."""
from __future__ import annotations

import json

import pytest

from bwtriton.cli import main
from bwtriton.ptx import parse_ptx
from bwtriton.regress.census import normalise_stage, ptx_census, sass_histogram
from bwtriton.regress.diff import diff_snapshots, parse_fail_on, render_markdown

# Hand-written PTX in the newer toolchain's dialect (.version 9.4), one instruction of each family.
PTX_94 = """
.version 9.4
.target sm_100a
.address_size 64
.visible .entry k(.param .u64 k_param_0)
{
  .reg .b32 %r<8>;
  .reg .b64 %rd<4>;
  .reg .pred %p<2>;
  .shared .align 8 .b64 bar0;
  mbarrier.init.shared::cta.b64 [bar0], 1;
  fence.mbarrier_init.release.cluster;
  bar.sync 0;
  @%p0 tcgen05.mma.cta_group::1.kind::f16 [%r1], %rd1, %rd2, %r2, 1;
  @%p0 tcgen05.mma.cta_group::1.kind::f16 [%r1], %rd1, %rd2, %r2, 1;
  @%p0 tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [bar0];
  mbarrier.arrive.release.cluster.shared::cluster.b64 _, [bar0];
  tcgen05.ld.sync.aligned.32x32b.x4.b32 {%r3, %r4, %r5, %r6}, [%r1];
  tcgen05.wait::ld.sync.aligned;
  ret;
}
"""


def test_census_groups_ptx_9_instructions_by_family_with_modifiers():
    c = ptx_census(parse_ptx(PTX_94))
    assert c["tcgen05"] == {"tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster": 1,
                            "tcgen05.ld.sync.aligned.32x32b.x4": 1, "tcgen05.mma.cta_group::1.kind::f16": 2,
                            "tcgen05.wait::ld.sync.aligned": 1}
    assert c["mbarrier"] == {"mbarrier.arrive.release.cluster.shared::cluster": 1, "mbarrier.init.shared::cta": 1}
    assert c["fences"] == {"fence.mbarrier_init.release.cluster": 1} and c["barriers"] == {"bar.sync": 1}
    assert "wgmma" not in c


def test_sass_histogram_reads_raw_cuobjdump_and_tritons_get_sass_form():
    raw = ("        /*0000*/                   LDC R1, c[0x0][0x37c] ;                 /* 0x00000df */\n"
           "        /*0010*/              @!P0 BRA `(.L_x_1) ;\n"
           "        /*0020*/                   UTCHMMA.2CTA gdesc[UR4], gdesc[UR6], tmem[UR8], idesc[UR9] ;\n")
    triton_form = "Function:k\nB------:R-:W-:-:S01\tLDC R1, c[0x0][0x37c] ;\nLBB0:\n\t@P1 EXIT ;\n"
    assert sass_histogram(raw) == {"BRA": 1, "LDC": 1, "UTCHMMA": 1}
    assert sass_histogram(triton_form) == {"EXIT": 1, "LDC": 1}


def test_stage_normalisation_drops_source_locations():
    a = 'tt.func @k() {\n  tt.return loc(#loc1)\n} loc(#loc)\n#loc = loc("/a/k.py":1:0)\n'
    b = 'tt.func @k() {\n  tt.return loc(#loc1)\n} loc(#loc)\n#loc = loc("/b/k.py":1:0)\n'
    assert normalise_stage("ttgir", a) == normalise_stage("ttgir", b) and "loc" not in normalise_stage("ttir", a)
    ptx_a = '.file 1 "/a/k.py"\n.loc 1 2 3\nadd.s32 %r1, %r2, 1;\n'
    ptx_b = '.file 1 "/b/k.py"\n.loc 1 9 3\nadd.s32 %r1, %r2, 1;\n'
    assert normalise_stage("ptx", ptx_a) == normalise_stage("ptx", ptx_b)
    assert ".loc" not in normalise_stage("ptx", ptx_a) and "add.s32" in normalise_stage("ptx", ptx_a)


def _record(**over) -> dict:
    base = {"census": {"tcgen05": {"tcgen05.mma.cta_group::1.kind::f16": 8}}, "sass": {"UTCHMMA": 8},
            "descriptors": {"idesc": [{"M": 128, "N": 128}], "smem_desc": []},
            "resources": {"registers": 100, "spill_stores": 0, "spill_loads": 0, "shared_bytes": 65536},
            "findings": {"by_check": {}}, "hashes": {"ptx": "aa"}, "ptx_version": "8.8"}
    for key, value in over.items():
        base[key] = value
    return base


def _snap(**records) -> dict:
    return {"triton": "3.6.0", "passes": "default", "targets": ["sm_100a"], "records": records}


@pytest.mark.parametrize("change,rules,expect_fail", [
    ({"resources": {"registers": 108, "spill_stores": 0, "spill_loads": 0, "shared_bytes": 65536}},
     "registers>+8", False),
    ({"resources": {"registers": 109, "spill_stores": 0, "spill_loads": 0, "shared_bytes": 65536}},
     "registers>+8", True),
    ({"resources": {"registers": 100, "spill_stores": 4, "spill_loads": 0, "shared_bytes": 65536}},
     "spills", True),
    ({"findings": {"by_check": {"error/ld-without-wait": 3}}}, "findings", True),
    ({"findings": {"by_check": {"note/missing-after-thread-sync": 1}}}, "errors", False),
    ({"census": {"tcgen05": {"tcgen05.mma.cta_group::2.kind::f16": 8}}}, "tcgen05", True),
    ({"census": {"tcgen05": {"tcgen05.mma.cta_group::2.kind::f16": 8}}}, "wgmma,spills", False),
    ({"descriptors": {"idesc": [{"M": 128, "N": 256}], "smem_desc": []}}, "descriptors", True),
    ({"hashes": {"ptx": "bb"}}, "stages", True),
])
def test_fail_on_rules(change, rules, expect_fail):
    result = diff_snapshots(_snap(k=_record()), _snap(k=_record(**change)), parse_fail_on(rules))
    assert bool(result["failing"]) == expect_fail, result["failing"]
    assert result["kernels"][0]["status"] == "changed"


def test_diff_report_groups_changes_and_lists_added_kernels():
    new = _record(resources={"registers": 120, "spill_stores": 0, "spill_loads": 0, "shared_bytes": 65536},
                  ptx_version="9.4")
    result = diff_snapshots(_snap(k=_record()), _snap(k=new, extra=_record()), parse_fail_on("added"))
    md = render_markdown(result)
    assert "| registers | 100 | 120 | +20 |" in md and "**resources**" in md and "| PTX .version | 8.8 | 9.4 |" in md
    assert result["failing"] == ["extra: added"]


def test_bad_fail_on_rule_names_the_valid_ones():
    from bwtriton.errors import InputError
    with pytest.raises(InputError, match=r"unknown rule 'regs>\+8'.*registers"):
        parse_fail_on("regs>+8")
    with pytest.raises(InputError, match="takes no threshold"):
        parse_fail_on("tcgen05>+1")


def test_diff_cli_exit_code_and_json(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_snap(k=_record())))
    changed = _record(census={"tcgen05": {"tcgen05.mma.cta_group::1.kind::f16": 4}})
    b.write_text(json.dumps(_snap(k=changed)))
    assert main(["diff", str(a), str(a), "--fail-on", "any"]) == 0
    capsys.readouterr()
    assert main(["diff", str(a), str(b), "--fail-on", "tcgen05", "--format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["failing"] and data["kernels"][0]["groups"]["instructions"][0]["new"] == 4
    assert main(["diff", str(a), str(tmp_path / "missing.json")]) == 1
    assert "missing.json: no such file" in capsys.readouterr().err


def test_snapshot_of_a_kernel_with_two_configs(tmp_path, capsys):
    """A kernel file with a list of configs: one record per config, each with the tile its constexprs ask for."""
    from bwtriton.examples.matmul import matmul_constexprs, matmul_signature
    src = tmp_path / "two_configs.py"
    src.write_text("from bwtriton.examples.matmul import matmul_kernel, matmul_signature, matmul_constexprs\n"
                   "BWTRITON_SPECS = {'matmul_kernel': [\n"
                   "  {'name': 'n128', 'signature': matmul_signature('fp16'), 'constexprs': matmul_constexprs()},\n"
                   "  {'name': 'n64', 'signature': matmul_signature('fp16'),\n"
                   "   'constexprs': {**matmul_constexprs(), 'BLOCK_N': 64}}]}\n")
    assert matmul_constexprs()["BLOCK_N"] == 128 and matmul_signature("fp16")
    out = tmp_path / "snap.json"
    assert main(["snapshot", str(src), "--targets", "sm_100a", "-o", str(out), "-q",
                 "--cache", str(tmp_path / "cache")]) == 0
    records = json.loads(out.read_text())["records"]
    by_config = {r["config"]: r for r in records.values()}
    assert set(by_config) == {"n128", "n64"}
    assert [d["N"] for d in by_config["n128"]["descriptors"]["idesc"]] == [128]
    assert [d["N"] for d in by_config["n64"]["descriptors"]["idesc"]] == [64]
    assert by_config["n64"]["resources"]["tmem_columns"] == 64
    assert by_config["n128"]["sass"].get("UTCHMMA", 0) > 0 and by_config["n128"]["resources"]["registers"] > 0
    # second run: every record comes from the incremental cache, with the same content
    assert main(["snapshot", str(src), "--targets", "sm_100a", "-o", str(out), "-q",
                 "--cache", str(tmp_path / "cache")]) == 0
    again = json.loads(out.read_text())["records"]
    assert all(r["cached"] for r in again.values())
    assert {k: {f: v for f, v in r.items() if f not in ("cached", "compile_seconds")} for k, r in again.items()} \
        == {k: {f: v for f, v in r.items() if f not in ("cached", "compile_seconds")} for k, r in records.items()}


def test_checked_in_corpus_snapshot_is_current():
    """Any change in what bwtriton emits for its corpus shows up here; update with
    `python -m bwtriton.regress.corpus` and review `git diff tests/snapshots/corpus.json`."""
    from bwtriton.regress.corpus import REPO, SNAPSHOT, snapshot_corpus
    from bwtriton.regress.snapshot import load_snapshot
    checked_in = load_snapshot(str(REPO / SNAPSHOT))
    fresh = snapshot_corpus(jobs=2, progress=None)
    result = diff_snapshots(checked_in, fresh, parse_fail_on("any"))
    assert not result["failing"], ("emitted code changed; if intended run `python -m bwtriton.regress.corpus`:\n"
                                   + render_markdown(result)[:4000])
    assert not [k for k, r in fresh["records"].items() if "error" in r]


def test_snapshot_rejects_a_file_without_kernels(tmp_path, capsys):
    empty = tmp_path / "nothing.py"
    empty.write_text("x = 1\n")
    assert main(["snapshot", str(empty), "-o", str(tmp_path / "s.json")]) == 1
    assert "nothing.py declares no kernels (add BWTRITON_SPECS" in capsys.readouterr().err
    assert not (tmp_path / "s.json").exists()
