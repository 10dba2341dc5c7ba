"""`bwtriton snapshot --passes none` (Triton alone, the baseline regression diffs compare against) for every kind
of input: a BWTRITON_SPECS file, FILE.py:KERNEL, a folder and a PTX corpus module; each kernel is snapshotted
both ways (Triton alone and bwtriton's default passes) and the two are compared with `bwtriton diff`."""
from __future__ import annotations

import json
import textwrap

import pytest

from bwtriton.cli import main

DOT_KERNEL = textwrap.dedent('''
    import triton
    import triton.language as tl


    @triton.jit
    def dot_kernel(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
        rows = tl.arange(0, BLOCK)
        tile = rows[:, None] * BLOCK + rows[None, :]
        tl.store(c_ptr + tile, tl.dot(tl.load(a_ptr + tile), tl.load(b_ptr + tile)))


    BWTRITON_SPECS = {"dot_kernel": {"signature": {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32"},
                                     "constexprs": {"BLOCK": 128}}}
''')

# A PTX corpus module: corpus_kernels() maps names to callables returning sm_100a PTX (recorded as given).
PTX_CORPUS = textwrap.dedent('''
    PTX = """
    .version 8.7
    .target sm_100a
    .address_size 64
    .visible .entry tiny(.param .u64 tiny_param_0)
    {
      .reg .b32 %r<3>;
      .reg .b64 %rd<2>;
      ld.param.u64 %rd1, [tiny_param_0];
      mov.u32 %r1, %tid.x;
      add.s32 %r2, %r1, 1;
      st.global.u32 [%rd1], %r2;
      ret;
    }
    """


    def corpus_kernels():
        return {"tiny": lambda: PTX}
''')


@pytest.fixture()
def corpus(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # record keys are paths relative to the working folder
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "dot.py").write_text(DOT_KERNEL)
    (tmp_path / "ptx_corpus.py").write_text(PTX_CORPUS)
    return tmp_path


def _snapshot(capsys, out: str, *argv: str) -> dict:
    rc = main(["snapshot", *argv, "-o", out, "--no-cache", "-q", "--no-timing"])
    _, err = capsys.readouterr()
    assert rc == 0, err
    with open(out) as f:
        return json.load(f)


def _diff(capsys, old: str, new: str) -> dict:
    rc = main(["diff", old, new, "--format", "json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out)


DOT_KEY = "kernels/dot.py:dot_kernel[default]@sm_100a"


@pytest.mark.parametrize("inputs", [["kernels/dot.py"], ["kernels/dot.py:dot_kernel"], ["kernels"]],
                         ids=["specs-file", "file-kernel", "folder"])
def test_passes_none_snapshots_triton_alone_and_diffs_against_the_default(corpus, capsys, inputs):
    plain = _snapshot(capsys, "none.json", *inputs, "--passes", "none")
    ours = _snapshot(capsys, "default.json", *inputs)
    assert list(plain["records"]) == [DOT_KEY] and list(ours["records"]) == [DOT_KEY]
    base, record = plain["records"][DOT_KEY], ours["records"][DOT_KEY]
    assert "error" not in base and base["passes"] == "none" and plain["passes"] == "none"
    # Triton alone lowers a 128x128 fp16 dot on sm_100a to tcgen05.mma too, without bwtriton's stage hook: the
    # hook's copies of Triton's own text (ptx_triton, ...) exist only in the default snapshot.
    assert any(k.startswith("tcgen05.mma") for k in base["census"]["tcgen05"])
    assert not any(k.endswith("_triton") for k in base["hashes"])
    assert "ptx_triton" in record["hashes"]
    diff = _diff(capsys, "none.json", "default.json")
    assert diff["old"]["passes"] == "none" and diff["new"]["passes"] == "default"
    (kernel,) = diff["kernels"]
    assert kernel["kernel"] == DOT_KEY and kernel["status"] == "changed"  # at least the hook's *_triton hashes


def test_the_same_kernel_named_three_ways_gives_the_same_passes_none_record(corpus, capsys):
    by_file = _snapshot(capsys, "a.json", "kernels/dot.py", "--passes", "none")
    by_kernel = _snapshot(capsys, "b.json", "kernels/dot.py:dot_kernel", "--passes", "none")
    by_folder = _snapshot(capsys, "c.json", "kernels", "--passes", "none")
    assert by_file["records"] == by_kernel["records"] == by_folder["records"]
    rc = main(["diff", "a.json", "b.json", "--fail-on", "spills,registers>+0,findings,tcgen05"])
    out, _ = capsys.readouterr()
    assert rc == 0 and "1 unchanged" in out


def test_passes_none_records_a_ptx_corpus_as_given(corpus, capsys):
    plain = _snapshot(capsys, "none.json", "ptx_corpus.py", "--passes", "none")
    ours = _snapshot(capsys, "default.json", "ptx_corpus.py")
    key = "ptx_corpus.py:tiny[ptx]@sm_100a"
    assert list(plain["records"]) == [key] and "error" not in plain["records"][key]
    assert plain["records"][key]["census"] == ours["records"][key]["census"]
    assert plain["records"][key]["resources"]["registers"] > 0  # ptxas assembled it
    rc = main(["diff", "none.json", "default.json"])
    out, _ = capsys.readouterr()
    assert rc == 0 and "1 unchanged" in out
