"""Instruction semantics on hand-written PTX (one warp): conversions to bf16/fp8/fp4, integer ops, divergent
branches with reconvergence, shfl, vote, selp/setp. Expected values come from torch / Python, not the emulator."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import bwtriton.emu as emu

pytestmark = pytest.mark.emulated

HEADER = """
.version 8.8
.target sm_100a
.address_size 64
.visible .entry k(.param .u64 k_param_0, .param .u64 k_param_1)
.reqntid 32
{
  .reg .pred %p<8>;
  .reg .b8 %rc<4>;
  .reg .b16 %rs<8>;
  .reg .b32 %r<32>;
  .reg .b64 %rd<16>;
  ld.param.u64 %rd1, [k_param_0];
  ld.param.u64 %rd2, [k_param_1];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd3, %r1, 8;
  add.s64 %rd4, %rd1, %rd3;
  add.s64 %rd5, %rd2, %rd3;
  ld.global.v2.b32 {%r2, %r3}, [%rd4];
"""


def run_body(body: str, inp: torch.Tensor) -> torch.Tensor:
    """Each lane t loads 8 bytes at in[t] into %r2, %r3, runs `body`, which must leave 8 bytes in %r4, %r5;
    those are stored at out[t]."""
    text = HEADER + body + "\n  st.global.v2.b32 [%rd5], {%r4, %r5};\n  ret;\n}\n"
    out = torch.zeros(32, 2, dtype=torch.int32)
    emu.run(text, (1,), inp.contiguous(), out)
    return out


def f32_pairs(a, b) -> torch.Tensor:
    return torch.stack([torch.as_tensor(a, dtype=torch.float32), torch.as_tensor(b, dtype=torch.float32)], 1)


def test_cvt_e2m1x2_satfinite_round_to_nearest_even():
    a = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, -0.3, 100.0, -100.0, 0.0] + [0.1] * 20)
    b = torch.tensor([1.0, -1.0, 6.0, 0.5, -6.0, 2.0, 3.0, 4.0] * 4)
    out = run_body("""
  cvt.rn.satfinite.e2m1x2.f32 %rc1, %r2, %r3;
  cvt.u32.u8 %r4, %rc1;
  mov.b32 %r5, 0;
""", f32_pairs(a, b))
    codes = out[:, 0].numpy()
    grid = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6])

    def e2m1(x):  # reference: nearest grid value, ties to even code, saturate at 6
        s = 8 if np.signbit(x) else 0
        ax = min(abs(x), 6.0)
        d = np.abs(grid - ax)
        best = np.flatnonzero(d == d.min())
        return s | int(best[0] if len(best) == 1 or best[0] % 2 == 0 else best[1])
    for t in range(32):
        assert codes[t] >> 4 == e2m1(float(a[t])), t  # a -> upper nibble
        assert codes[t] & 0xF == e2m1(float(b[t])), t


def test_cvt_bf16x2_and_f16x2_packing():
    a, b = torch.randn(32) * 10, torch.randn(32) * 10
    out = run_body("""
  cvt.rn.bf16x2.f32 %r4, %r2, %r3;
  cvt.rn.f16x2.f32 %r5, %r2, %r3;
""", f32_pairs(a, b))
    w = out.numpy().view(np.uint32)
    bf_hi = torch.from_numpy((w[:, 0] >> 16).astype(np.int16)).view(torch.bfloat16)
    bf_lo = torch.from_numpy((w[:, 0] & 0xFFFF).astype(np.uint16).view(np.int16)).view(torch.bfloat16)
    assert torch.equal(bf_hi, a.bfloat16()) and torch.equal(bf_lo, b.bfloat16())
    h_hi = torch.from_numpy((w[:, 1] >> 16).astype(np.uint16).view(np.float16))
    assert torch.equal(h_hi, a.half())


def test_cvt_e4m3x2_satfinite_matches_torch():
    a, b = torch.randn(32) * 300, torch.randn(32)
    out = run_body("""
  cvt.rn.satfinite.e4m3x2.f32 %rs1, %r2, %r3;
  cvt.u32.u16 %r4, %rs1;
  cvt.rn.f16x2.e4m3x2 %r5, %rs1;
""", f32_pairs(a, b))
    w = out.numpy().view(np.uint32)
    ref_hi = a.clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    ref_lo = b.to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    assert (w[:, 0] >> 8 == ref_hi).all() and (w[:, 0] & 0xFF == ref_lo).all()
    back_lo = (w[:, 1] & 0xFFFF).astype(np.uint16).view(np.float16).astype(np.float32)
    assert np.array_equal(back_lo, b.to(torch.float8_e4m3fn).float().numpy())


def test_integer_ops_bfe_prmt_mul_hi_shifts():
    x = torch.randint(-2 ** 31, 2 ** 31 - 1, (32, 2), dtype=torch.int64).to(torch.int32)
    out = run_body("""
  bfe.s32 %r6, %r2, 3, 9;
  prmt.b32 %r7, %r2, %r3, 0x7351;
  mul.hi.s32 %r8, %r2, %r3;
  shr.s32 %r9, %r2, 40;
  add.s32 %r4, %r6, %r8;
  xor.b32 %r5, %r7, %r9;
""", x)
    a = x[:, 0].numpy().astype(np.int64)
    b = x[:, 1].numpy().astype(np.int64)
    field = (a >> 3) & 0x1FF
    bfe = np.where(field & 0x100, field - 0x200, field)
    mulhi = (a * b) >> 32
    au, bu = a & 0xFFFFFFFF, b & 0xFFFFFFFF
    by = [(au >> 8 * i) & 0xFF for i in range(4)] + [(bu >> 8 * i) & 0xFF for i in range(4)]
    prmt = by[1] | by[5] << 8 | by[3] << 16 | by[7] << 24
    shr = np.where(a < 0, -1, 0)
    assert np.array_equal(out[:, 0].numpy(), ((bfe + mulhi + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32))
    assert np.array_equal(out[:, 1].numpy().view(np.uint32), ((prmt ^ (shr & 0xFFFFFFFF)) & 0xFFFFFFFF)
                          .astype(np.uint32))


def test_divergent_branch_reconverges_and_shfl_vote():
    """Lanes < 5 take one path, others another; after reconvergence a shfl and a ballot see every lane."""
    out = run_body("""
  setp.lt.u32 %p1, %r1, 5;
  @%p1 bra $L_small;
  mul.lo.s32 %r6, %r1, 100;
  bra.uni $L_join;
$L_small:
  add.s32 %r6, %r1, 1000;
$L_join:
  shfl.sync.idx.b32 %r7, %r6, 31, 31, -1;
  vote.sync.ballot.b32 %r8, %p1, -1;
  add.s32 %r4, %r6, 0;
  add.s32 %r5, %r7, %r8;
""", torch.zeros(32, 2, dtype=torch.int32))
    t = np.arange(32)
    assert np.array_equal(out[:, 0].numpy(), np.where(t < 5, t + 1000, t * 100))
    assert np.array_equal(out[:, 1].numpy(), np.full(32, 3100 + 0b11111))


def test_memory_fault_names_the_line():
    text = HEADER + "  ld.global.b32 %r4, [%rd1+100000];\n  ret;\n}\n"
    with pytest.raises(emu.MemoryFaultError, match=r"PTX line \d+: global access"):
        emu.run(text, (1,), torch.zeros(32, 2, dtype=torch.int32), torch.zeros(32, 2, dtype=torch.int32))


def test_unsupported_instruction_is_reported():
    text = HEADER + "  brkpt;\n  ret;\n}\n"
    with pytest.raises(emu.UnsupportedInstructionError, match="brkpt"):
        emu.run(text, (1,), torch.zeros(32, 2, dtype=torch.int32), torch.zeros(32, 2, dtype=torch.int32))


def test_packed_f32x2_add_mul_fma():
    """sm_100a epilogues keep two f32 in one b64 register: each half is an independent f32 operation."""
    a, b = torch.randn(32) * 3, torch.randn(32) * 3
    out = run_body("""
  mov.b64 %rd6, {%r2, %r3};
  mov.b64 %rd7, {%r3, %r2};
  add.f32x2 %rd8, %rd6, %rd7;
  mul.f32x2 %rd9, %rd6, %rd7;
  fma.rn.f32x2 %rd10, %rd6, %rd7, %rd8;
  mov.b64 {%r6, %r7}, %rd10;
  sub.f32x2 %rd11, %rd9, %rd10;
  mov.b64 {%r8, %r9}, %rd11;
  mov.b32 %r4, %r6;
  mov.b32 %r5, %r9;
""", f32_pairs(a, b))
    got = out.numpy().view(np.float32)
    a64, b64 = a.double().numpy(), b.double().numpy()
    fma_lo = (a64 * b64 + (a + b).double().numpy()).astype(np.float32)   # single rounding of a*b + (a+b)_f32
    fma_hi = fma_lo                                                        # symmetric: (b, a) * (a, b)
    sub_hi = (a * b).numpy() - fma_hi                                      # f32 subtraction
    assert np.array_equal(got[:, 0], fma_lo)
    assert np.array_equal(got[:, 1], sub_hi.astype(np.float32))


def test_device_side_tensormap_decodes_to_the_fields_written():
    """tensormap.replace writes fields of a zero-filled 128-byte object; a TMA through it sees them."""
    from bwtriton.emu.isa.tensormap import TensorMap, decode
    text = HEADER.replace(".visible .entry", ".extern .shared .align 128 .b8 global_smem[];\n.visible .entry") + """
  mov.u64 %rd6, global_smem;
  mov.b32 %r31, 0;
  st.shared.v4.b32 [global_smem], {%r31, %r31, %r31, %r31};
  tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%rd6], %rd1;
  tensormap.replace.tile.rank.shared::cta.b1024.b32 [%rd6], 0x1;
  tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [%rd6], 0x0, 64;
  tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [%rd6], 0x1, 32;
  tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%rd6], 0x0, 200;
  tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%rd6], 0x1, 100;
  tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [%rd6], 0x0, 400;
  tensormap.replace.tile.elemtype.shared::cta.b1024.b32 [%rd6], 0xa;
  tensormap.replace.tile.swizzle_mode.shared::cta.b1024.b32 [%rd6], 0x3;
  tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%rd2], [%rd6], 0x80;
  ret;
}
"""
    out = torch.zeros(128, dtype=torch.uint8)
    inp = torch.zeros(32, 2, dtype=torch.int32)
    emu.run(text, (1,), inp, out)
    tm = decode(out.numpy())
    assert tm == TensorMap(base=tm.base, shape=(100, 200), strides=(400, 2), box=(32, 64), elem_bytes=2,
                           swizzle=128)
    assert decode(np.zeros(128, np.uint8)) is None  # zero bytes are no tensor map


def test_fp4_padded_map_pads_each_16_values_to_16_bytes():
    from bwtriton.emu.isa.tensormap import TensorMap
    tm = TensorMap.fp4_padded(base=0, shape=[4, 256], outer_strides=[128], box=[2, 128], swizzle=0)
    assert (tm.box, tm.elem_bytes, tm.smem_elem, tm.box_bytes) == ((2, 8), 8, 16, 2 * 64)
    gaddr, ok = tm.offsets([1, 32])  # row 1, fp4 column 32 = byte 16 of the row
    assert ok.all() and list(gaddr[:3]) == [128 + 16, 128 + 24, 128 + 32]
    with pytest.raises(emu.EmulationError, match="multiples of 16"):
        TensorMap.fp4_padded(base=0, shape=[4, 250], outer_strides=[125], box=[2, 128], swizzle=0)


def test_isa_table_routes_families_and_the_machine_imports_none():
    """The machine (emu/machine/) imports no instruction family; the one table in isa/table.py routes opcodes."""
    import ast
    import pathlib

    from bwtriton.emu import isa
    from bwtriton.emu.isa import clc, sync, table, tcgen05, tensormap
    machine = pathlib.Path(emu.__file__).parent / "machine"
    for f in machine.glob("*.py"):
        tree = ast.parse(f.read_text())
        imported = {(n.level, n.module or "") for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not [m for lvl, m in imported if (lvl == 2 and m.startswith("isa")) or "emu.isa" in m], f.name
    assert isa.handler_of("tcgen05.mma") is tcgen05.HANDLERS["tcgen05.mma"]
    assert isa.handler_of("mbarrier.try_wait") is sync.HANDLERS["mbarrier.try_wait"]
    assert isa.handler_of("tensormap.replace").__module__ == tensormap.__name__
    assert isa.handler_of("clusterlaunchcontrol.try_cancel").__module__ == clc.__name__
    assert isa.handler_of("mov", ("b128",)).__module__ == clc.__name__  # CLC's 128-bit form of another family's op
    assert isa.handler_of("frobnicate") is None
    assert set(isa.OPCODES) == {op for fam in table.FAMILIES for op in fam.HANDLERS}  # one row per opcode


def test_emulator_modules_import_without_cycles():
    """No import cycle among the emulator's modules (static, module-level relative imports)."""
    import ast
    import pathlib

    root = pathlib.Path(emu.__file__).parent
    files = {".".join(("emu",) + f.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): f
             for f in root.rglob("*.py")}
    graph = {}
    for mod, f in files.items():
        package = mod if f.name == "__init__.py" else mod.rpartition(".")[0]
        deps = set()
        for n in ast.parse(f.read_text()).body:  # module level: what runs on import
            if isinstance(n, ast.ImportFrom) and n.level >= 1:
                base = package
                for _ in range(n.level - 1):
                    base = base.rpartition(".")[0]
                target = f"{base}.{n.module}" if n.module else base
                # `from pkg import sub` loads pkg.sub when that is a module, else reads an attribute of pkg
                deps.update(f"{target}.{a.name}" if f"{target}.{a.name}" in files else target for a in n.names)
        graph[mod] = (deps & set(files)) - {mod}
    state: dict = {}

    def visit(m, path):
        if state.get(m) == 1:
            raise AssertionError(f"import cycle: {' -> '.join(path + [m])}")
        if state.get(m) == 2:
            return
        state[m] = 1
        for d in graph.get(m, ()):
            visit(d, path + [m])
        state[m] = 2
    for m in graph:
        visit(m, [])
    assert "emu.integration.run" in graph["emu.integration.launcher"]  # the graph sees relative imports
    assert "emu.machine.program" in graph["emu.isa.table"]


def test_mapa_and_getctarank_round_trip():
    """mapa gives the shared::cluster address of a local address in another CTA; getctarank reads the rank back."""
    out = run_body("""
  mov.b32 %r6, 3;
  mapa.shared::cluster.u32 %r7, %r2, %r6;
  getctarank.shared::cluster.u32 %r8, %r7;
  and.b32 %r4, %r7, 16777215;
  mov.b32 %r5, %r8;
""", torch.tensor([[0x1230 + 16 * t, 0] for t in range(32)], dtype=torch.int32))
    assert out[:, 0].tolist() == [0x1230 + 16 * t for t in range(32)]
    assert out[:, 1].tolist() == [3] * 32


def test_progress_meter_reports_clusters_and_rate():
    import io

    from bwtriton.emu.machine.scheduler import ProgressMeter

    class Launch:
        instructions = 5000
    buf = io.StringIO()
    meter = ProgressMeter(3, enabled=True, after_s=0.0, stream=buf)
    for _ in range(3):
        meter.tick(Launch())
    text = buf.getvalue()
    assert "clusters 3/3" in text and "k warp-instr/s" in text and text.endswith("\n")
    quiet = io.StringIO()
    ProgressMeter(3, enabled=None, stream=quiet).tick(Launch())  # not a terminal: silent
    assert quiet.getvalue() == ""


def test_run_time_lookup_failure_is_unsupported_not_keyerror(monkeypatch):
    """A family that trips over an unforeseen form at run time reports the PTX line, not a raw KeyError."""
    from bwtriton.emu.isa import alu
    monkeypatch.setitem(alu._CMP, "lt", None)
    del alu._CMP["lt"]  # setp.lt now fails inside the closure
    text = HEADER + "  setp.lt.u32 %p1, %r2, %r3;\n  ret;\n}\n"
    line = next(i + 1 for i, ln in enumerate(text.splitlines()) if "setp.lt" in ln)
    with pytest.raises(emu.UnsupportedInstructionError, match=rf"PTX line {line}: this form of `setp.lt.u32`"):
        emu.run(text, (1,), torch.zeros(32, 2, dtype=torch.int32), torch.zeros(32, 2, dtype=torch.int32))
