"""tcgen05 descriptors, bit-exact per docs/tcgen05_facts.md (PTX ISA #tcgen05-instruction-descriptor,
#tcgen05-shared-memory-descriptor, #tcgen05-kind-shapes; CUTLASS cute/arch/mma_sm100_desc.hpp).

* 32-bit instruction descriptor (idesc) for every `.kind`: `decode_idesc(value, kind)` / `encode_idesc(...)`.
* 64-bit shared-memory matrix descriptor: `decode_smem_desc(value)` / `encode_smem_desc(...)`; Hopper's wgmma form
  of it re-encoded as one (`wgmma_desc_as_tcgen05`).
* Legality of a decoded idesc against the instruction (cta_group, scale_vec, .sp, .ws, target):
  `idesc_problems(...)`, and the legal MMA shapes of §4 (`legal_m`, `legal_n`, `mma_k`, `d_tile_columns`).

Decoders take an optional `known_mask`: bits outside it are unknown (e.g. a descriptor whose start-address
field comes from a register); fields that touch an unknown bit decode to None.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

ALL32 = (1 << 32) - 1
ALL64 = (1 << 64) - 1

KINDS = ("f16", "tf32", "f8f6f4", "i8", "mxf8f6f4", "mxf4", "mxf4nvf4")
BLOCK_SCALED = frozenset(("mxf8f6f4", "mxf4", "mxf4nvf4"))

D_FORMATS = {0: "f16", 1: "f32", 2: "s32"}
AB_FORMATS = {
    "f16": {0: "f16", 1: "bf16"},
    "tf32": {2: "tf32"},
    "f8f6f4": {0: "e4m3", 1: "e5m2", 3: "e2m3", 4: "e3m2", 5: "e2m1"},
    "i8": {0: "u8", 1: "s8"},
    "mxf8f6f4": {0: "e4m3", 1: "e5m2", 3: "e2m3", 4: "e3m2", 5: "e2m1"},
    "mxf4": {1: "e2m1"},
    "mxf4nvf4": {1: "e2m1"},
}
SCALE_TYPES = {0: "ue4m3", 1: "ue8m0"}
# Element width in bits of each A/B format (for the 8-bit transpose-B N rule and smem packing).
FORMAT_BITS = {"f16": 16, "bf16": 16, "tf32": 32, "e4m3": 8, "e5m2": 8, "e2m3": 6, "e3m2": 6, "e2m1": 4,
               "u8": 8, "s8": 8}
SWIZZLES = {0: "none", 1: "128B_base32B", 2: "128B", 4: "64B", 6: "32B"}
SWIZZLE_CODES = {v: k for k, v in SWIZZLES.items()}

# (name, lo, width) -- field layouts. "reserved" fields must be zero.
_DENSE_FIELDS = (("sparse_id2", 0, 2), ("sparse", 2, 1), ("saturate", 3, 1), ("d_format", 4, 2),
                 ("reserved6", 6, 1), ("a_format", 7, 3), ("b_format", 10, 3), ("negate_a", 13, 1),
                 ("negate_b", 14, 1), ("transpose_a", 15, 1), ("transpose_b", 16, 1), ("n_dim", 17, 6),
                 ("reserved23", 23, 1), ("m_dim", 24, 5), ("reserved29", 29, 1), ("max_shift", 30, 2))
_MXF8_FIELDS = (("reserved0", 0, 2), ("sparse", 2, 1), ("reserved3", 3, 1), ("sfb_id", 4, 2),
                ("reserved6", 6, 1), ("a_format", 7, 3), ("b_format", 10, 3), ("negate_a", 13, 1),
                ("negate_b", 14, 1), ("transpose_a", 15, 1), ("transpose_b", 16, 1), ("n_dim", 17, 6),
                ("scale_type", 23, 1), ("reserved24", 24, 3), ("m_dim", 27, 2), ("sfa_id", 29, 2),
                ("reserved31", 31, 1))
_MXF4_FIELDS = (("reserved0", 0, 2), ("sparse", 2, 1), ("reserved3", 3, 1), ("sfb_id", 4, 2),
                ("reserved6", 6, 1), ("a_format", 7, 3), ("b_format", 10, 2), ("reserved12", 12, 1),
                ("negate_a", 13, 1), ("negate_b", 14, 1), ("transpose_a", 15, 1), ("transpose_b", 16, 1),
                ("n_dim", 17, 6), ("scale_type", 23, 1), ("reserved24", 24, 3), ("m_dim", 27, 2),
                ("sfa_id", 29, 2), ("k96", 31, 1))
_SMEM_FIELDS = (("start_enc", 0, 14), ("reserved14", 14, 2), ("lbo_enc", 16, 14), ("reserved30", 30, 2),
                ("sbo_enc", 32, 14), ("version", 46, 3), ("base_offset", 49, 3), ("lbo_mode", 52, 1),
                ("fixed53", 53, 8), ("swizzle_code", 61, 3))


def _layout(kind: str):
    if kind not in KINDS:
        raise ValueError(f"unknown tcgen05 kind {kind!r}; valid kinds: {', '.join(KINDS)}")
    if kind in ("mxf4", "mxf4nvf4"):
        return _MXF4_FIELDS
    if kind == "mxf8f6f4":
        return _MXF8_FIELDS
    return _DENSE_FIELDS


def _extract(value: int, known: int, lo: int, width: int) -> Optional[int]:
    mask = ((1 << width) - 1) << lo
    if known & mask != mask:
        return None
    return (value & mask) >> lo


@dataclass
class InstrDesc:
    """A decoded 32-bit instruction descriptor. Raw fields in `fields` (None = unknown bits);
    convenience properties give M, N, K and type names."""

    kind: str
    value: int
    known_mask: int = ALL32
    fields: dict[str, Optional[int]] = field(default_factory=dict)

    def get(self, name: str) -> Optional[int]:
        return self.fields.get(name)

    @property
    def m(self) -> Optional[int]:
        v = self.fields.get("m_dim")
        if v is None:
            return None
        return v << (7 if self.kind in BLOCK_SCALED else 4)

    @property
    def n(self) -> Optional[int]:
        v = self.fields.get("n_dim")
        return None if v is None else v << 3

    @property
    def sparse(self) -> Optional[bool]:
        v = self.fields.get("sparse")
        return None if v is None else bool(v)

    @property
    def k(self) -> Optional[int]:
        """Dense/sparse K from the kind (K is implicit: 256 bits of A; mxf4* K=96 via bit 31)."""
        sp = self.sparse
        if sp is None:
            return None
        base = mma_k(self.kind, sparse=False)
        if self.kind in ("mxf4", "mxf4nvf4") and self.fields.get("k96"):
            return 96
        return base * (2 if sp else 1)

    @property
    def a_type(self) -> Optional[str]:
        v = self.fields.get("a_format")
        return None if v is None else AB_FORMATS[self.kind].get(v, f"invalid({v})")

    @property
    def b_type(self) -> Optional[str]:
        v = self.fields.get("b_format")
        return None if v is None else AB_FORMATS[self.kind].get(v, f"invalid({v})")

    @property
    def d_type(self) -> Optional[str]:
        if self.kind in BLOCK_SCALED:
            return "f32"
        v = self.fields.get("d_format")
        return None if v is None else D_FORMATS.get(v, f"invalid({v})")

    @property
    def scale_type(self) -> Optional[str]:
        if self.kind not in BLOCK_SCALED:
            return None
        v = self.fields.get("scale_type")
        return None if v is None else SCALE_TYPES[v]

    @property
    def a_major(self) -> Optional[str]:
        v = self.fields.get("transpose_a")
        return None if v is None else ("MN" if v else "K")

    @property
    def b_major(self) -> Optional[str]:
        v = self.fields.get("transpose_b")
        return None if v is None else ("MN" if v else "K")

    def reserved_bits_set(self) -> int:
        """Known-set bits in reserved fields (must be zero)."""
        bad = 0
        for name, lo, width in _layout(self.kind):
            if name.startswith("reserved"):
                mask = ((1 << width) - 1) << lo
                bad |= self.value & self.known_mask & mask
        return bad

    def summary(self) -> dict:
        return {"kind": self.kind, "value": f"0x{self.value:08X}", "M": self.m, "N": self.n, "K": self.k,
                "a_type": self.a_type, "b_type": self.b_type, "d_type": self.d_type,
                "a_major": self.a_major, "b_major": self.b_major, "scale_type": self.scale_type,
                "sfa_id": self.fields.get("sfa_id"), "sfb_id": self.fields.get("sfb_id"),
                "sparse": self.sparse, "negate_a": self.fields.get("negate_a"),
                "negate_b": self.fields.get("negate_b")}


def decode_idesc(value: int, kind: str, known_mask: int = ALL32) -> InstrDesc:
    """Decode a 32-bit instruction descriptor of `.kind::<kind>`."""
    value &= ALL32
    known_mask &= ALL32
    fields = {name: _extract(value, known_mask, lo, w) for name, lo, w in _layout(kind)}
    return InstrDesc(kind, value, known_mask, fields)


_FORMAT_CODES = {kind: {v: k for k, v in fmts.items()} for kind, fmts in AB_FORMATS.items()}


def encode_idesc(kind: str, m: int, n: int, a_type: str, b_type: str, d_type: str = "f32", *,
                 transpose_a: bool = False, transpose_b: bool = False, negate_a: bool = False,
                 negate_b: bool = False, sparse: bool = False, saturate: bool = False, max_shift: int = 0,
                 scale_type: Optional[str] = None, sfa_id: int = 0, sfb_id: int = 0, k96: bool = False) -> int:
    """Build an instruction descriptor. M/N are the instruction's (whole CTA pair's for cta_group::2).
    `scale_type` defaults to ue8m0 for block-scaled kinds. Does not check shape legality (see idesc_problems)."""
    layout = {name: (lo, w) for name, lo, w in _layout(kind)}
    codes = _FORMAT_CODES[kind]
    if a_type not in codes or b_type not in codes:
        raise ValueError(f"kind::{kind} takes A/B types {sorted(codes)}, got {a_type!r}, {b_type!r}")
    vals: dict[str, int] = {"a_format": codes[a_type], "b_format": codes[b_type], "negate_a": int(negate_a),
                            "negate_b": int(negate_b), "transpose_a": int(transpose_a),
                            "transpose_b": int(transpose_b), "sparse": int(sparse), "n_dim": n >> 3}
    if kind in BLOCK_SCALED:
        st = scale_type or "ue8m0"
        vals.update(scale_type={"ue4m3": 0, "ue8m0": 1}[st], m_dim=m >> 7, sfa_id=sfa_id, sfb_id=sfb_id)
        if kind != "mxf8f6f4":
            vals["k96"] = int(k96)
    else:
        vals.update(d_format={"f16": 0, "f32": 1, "s32": 2}[d_type], m_dim=m >> 4, saturate=int(saturate),
                    max_shift=max_shift)
    out = 0
    for name, v in vals.items():
        lo, w = layout[name]
        if v < 0 or v >= 1 << w:
            raise ValueError(f"idesc field {name}={v} does not fit in {w} bits")
        out |= v << lo
    return out


# ---------------------------------------------------------------------------------------------------------
@dataclass
class SmemDesc:
    """A decoded 64-bit shared-memory matrix descriptor; byte quantities are decoded (x16)."""

    value: int
    known_mask: int = ALL64
    fields: dict[str, Optional[int]] = field(default_factory=dict)

    def _bytes(self, name: str) -> Optional[int]:
        v = self.fields.get(name)
        return None if v is None else v << 4

    @property
    def start_address(self) -> Optional[int]:
        return self._bytes("start_enc")

    @property
    def lbo(self) -> Optional[int]:
        return self._bytes("lbo_enc")

    @property
    def sbo(self) -> Optional[int]:
        return self._bytes("sbo_enc")

    @property
    def swizzle(self) -> Optional[str]:
        v = self.fields.get("swizzle_code")
        return None if v is None else SWIZZLES.get(v, f"invalid({v})")

    def summary(self) -> dict:
        return {"value": f"0x{self.value:016X}", "known_mask": f"0x{self.known_mask:016X}",
                "start_address": self.start_address, "lbo": self.lbo, "sbo": self.sbo,
                "version": self.fields.get("version"), "base_offset": self.fields.get("base_offset"),
                "lbo_mode": self.fields.get("lbo_mode"), "swizzle": self.swizzle}


def decode_smem_desc(value: int, known_mask: int = ALL64) -> SmemDesc:
    value &= ALL64
    known_mask &= ALL64
    return SmemDesc(value, known_mask, {n: _extract(value, known_mask, lo, w) for n, lo, w in _SMEM_FIELDS})


def matrix_descriptor_encode(x: int) -> int:
    """PTX matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4."""
    return (x & 0x3FFFF) >> 4


def encode_smem_desc(start_address: int, lbo: int, sbo: int, swizzle: str = "128B", *, base_offset: int = 0,
                     lbo_mode: int = 0) -> int:
    """Build a shared-memory descriptor (byte addresses/offsets; they must be 16-byte aligned)."""
    for name, v in (("start_address", start_address), ("lbo", lbo), ("sbo", sbo)):
        if v % 16:
            raise ValueError(f"{name}={v} must be 16-byte aligned")
    if swizzle not in SWIZZLE_CODES:
        raise ValueError(f"swizzle must be one of {sorted(SWIZZLE_CODES)}, got {swizzle!r}")
    return (matrix_descriptor_encode(start_address) | matrix_descriptor_encode(lbo) << 16
            | matrix_descriptor_encode(sbo) << 32 | 1 << 46 | (base_offset & 7) << 49 | (lbo_mode & 1) << 52
            | SWIZZLE_CODES[swizzle] << 61)


#: Hopper's wgmma matrix descriptor (CUTLASS cute/arch/mma_sm90_desc.hpp, GmmaDescriptor): start address,
#: leading and stride byte offsets (each >> 4) in bits 0-13 / 16-29 / 32-45, base offset in 49-51, layout type in
#: 62-63 (0 interleave = no swizzle, 1 = 128B, 2 = 64B, 3 = 32B); no version bits.
WGMMA_SWIZZLES = {0: "none", 1: "128B", 2: "64B", 3: "32B"}


def wgmma_desc_as_tcgen05(value: int) -> int:
    """The tcgen05 descriptor naming the same shared-memory layout as wgmma descriptor `value`: the canonical
    layouts (start, LBO, SBO, swizzle atom) are the same on sm_90 and sm_100, only the bits that carry them
    differ, so one address calculation serves both."""
    value &= ALL64
    return encode_smem_desc(((value & 0x3FFF) << 4), ((value >> 16) & 0x3FFF) << 4, ((value >> 32) & 0x3FFF) << 4,
                            WGMMA_SWIZZLES[value >> 62], base_offset=(value >> 49) & 7)


def smem_desc_problems(d: SmemDesc, target_name: str = "sm_100a") -> list[str]:
    """Encoding problems of a shared-memory descriptor (P19): version, fixed/reserved bits, swizzle, lbo_mode."""
    out = []
    v = d.fields.get("version")
    if v is not None and v != 1:
        out.append(f"bits 46-48 must be the fixed constant 0b001, found {v:#05b}")
    f = d.fields.get("fixed53")
    if f is not None and f != 0:
        out.append(f"bits 53-60 must be 0, found {f:#x}")
    for name in ("reserved14", "reserved30"):
        r = d.fields.get(name)
        if r:
            out.append(f"reserved bits {name[8:]}-{int(name[8:]) + 1} must be 0, found {r}")
    s = d.fields.get("swizzle_code")
    if s is not None and s not in SWIZZLES:
        out.append(f"swizzle code {s} is invalid (legal: 0 none, 1 128B/32B-atom, 2 128B, 4 64B, 6 32B)")
    if d.fields.get("lbo_mode") == 1 and not target_name.startswith("sm_103"):
        out.append("leading-dimension absolute-address mode (bit 52) is only available on sm_103a")
    return out


# ---------------------------------------------------------------------------------------------------------
def mma_k(kind: str, sparse: bool = False) -> int:
    """K of one MMA (K is implicit: 256 bits of A dense, doubled when sparse)."""
    base = {"f16": 16, "tf32": 8, "f8f6f4": 32, "i8": 32, "mxf8f6f4": 32, "mxf4": 64, "mxf4nvf4": 64}[kind]
    return base * (2 if sparse else 1)


def legal_m(kind: str, cta_group: int, ws: bool = False, sparse: bool = False) -> frozenset[int]:
    """Legal M per PTX #tcgen05-kind-shapes (docs/tcgen05_facts.md "Shapes"); M is the whole pair's for cta_group::2."""
    if ws:
        if cta_group != 1 or kind in BLOCK_SCALED:
            return frozenset()
        return frozenset((32, 64, 128))
    if cta_group == 1:
        return frozenset((128,)) if kind in BLOCK_SCALED else frozenset((64, 128))
    if kind in BLOCK_SCALED and sparse:
        return frozenset((256,))
    return frozenset((128, 256))


def legal_n(kind: str, cta_group: int, ws: bool = False, sparse: bool = False,
            transpose_b_8bit: bool = False) -> frozenset[int]:
    """Legal N per PTX #tcgen05-kind-shapes (incl. the 8-bit transpose-B restriction)."""
    if ws:
        return frozenset((64, 128)) if sparse else frozenset((64, 128, 256))
    if cta_group == 1:
        if kind == "i8":
            ns = {8, 16, 24, 32} | set(range(48, 257, 16))
        else:
            ns = set(range(8, 257, 8))
        if transpose_b_8bit:
            ns = {n for n in ns if n % 16 == 0}
    else:
        ns = set(range(32, 257, 32)) if kind == "i8" else set(range(16, 257, 16))
        if transpose_b_8bit:
            ns = {n for n in ns if n % 32 == 0}
    return frozenset(ns)


def d_tile_columns(m: int, n: int, cta_group: int, ws: bool = False) -> int:
    """32-bit TMEM columns the D tile occupies per CTA (PTX #tcgen05-data-path-layout-organization, layouts A-G)."""
    if ws:
        return {32: n // 4, 64: n // 2}.get(m, n)
    if cta_group == 2 and m == 128:
        return n // 2  # layout B: 2x2 datapath, second N half in lanes 64-127
    return n


def idesc_problems(d: InstrDesc, *, cta_group: int, scale_vec: Optional[str] = None, sparse_inst: bool = False,
                   ws: bool = False, target_name: str = "sm_100a") -> list[str]:
    """Every illegal field of a decoded idesc for this instruction (P19 + §4 shapes). Unknown fields skip."""
    out: list[str] = []
    kind = d.kind
    f = d.fields
    bad = d.reserved_bits_set()
    if bad:
        bits = [i for i in range(32) if bad >> i & 1]
        extra = ""
        if kind not in BLOCK_SCALED and 29 in bits:
            extra = " (bit 29 is Triton's future-architecture kSize flag; not valid on sm_100/sm_103)"
        out.append(f"reserved bit(s) {bits} set{extra}")
    sp = f.get("sparse")
    if sp is not None and bool(sp) != sparse_inst:
        out.append(f"sparsity bit 2 is {sp} but the instruction is {'tcgen05.mma.sp' if sparse_inst else 'dense'}")
    if kind not in BLOCK_SCALED:
        if not sparse_inst and f.get("sparse_id2"):
            out.append(f"sparsity selector (bits 0-1) = {f['sparse_id2']} on a dense MMA; must be 0")
        if f.get("saturate") and kind != "i8":
            out.append("saturate bit 3 is only valid for kind::i8")
        if f.get("max_shift") and not ws:
            out.append(f"max_shift (bits 30-31) = {f['max_shift']} is only meaningful for tcgen05.mma.ws")
    # types
    fmts = AB_FORMATS[kind]
    for side in ("a", "b"):
        v = f.get(f"{side}_format")
        if v is not None and v not in fmts:
            out.append(f"{side}type code {v} is not legal for kind::{kind} (legal: "
                       + ", ".join(f"{c}={n}" for c, n in fmts.items()) + ")"
                       + (" -- E2M1 is code 5 under f8f6f4/mxf8f6f4 but code 1 under mxf4/mxf4nvf4"
                          if kind in ("f8f6f4", "mxf8f6f4", "mxf4", "mxf4nvf4") else ""))
    dfmt = f.get("d_format") if kind not in BLOCK_SCALED else None
    if dfmt is not None:
        legal_d = {"f16": {0, 1}, "tf32": {1}, "f8f6f4": {0, 1}, "i8": {2}}[kind]
        if dfmt not in legal_d:
            out.append(f"dtype (bits 4-5) = {dfmt} ({D_FORMATS.get(dfmt, 'invalid')}) is not legal for kind::{kind}")
        elif kind == "f16" and dfmt == 0 and (f.get("a_format") == 1 or f.get("b_format") == 1):
            out.append("bf16 inputs require an f32 accumulator (dtype=1) under kind::f16")
    if kind == "i8" and (f.get("negate_a") or f.get("negate_b")):
        out.append("negate A/B must be 0 for kind::i8")
    if kind in ("mxf4", "mxf4nvf4"):
        if f.get("transpose_a") or f.get("transpose_b"):
            out.append(f"transpose A/B must be 0 (K-major only) for kind::{kind}")
        for side in ("sfa_id", "sfb_id"):
            v = f.get(side)
            if v is not None and v not in (0, 2):
                out.append(f"{side} = {v}: must be 0 or 2 for kind::{kind}")
        if f.get("k96") and not target_name.startswith("sm_103"):
            out.append("K=96 (bit 31) is only supported on sm_103a")
    # scale vector vs kind
    if kind in BLOCK_SCALED:
        sv = (scale_vec or "").upper().replace("SCALE_VEC::", "")
        norm = {"BLOCK16": "4X", "BLOCK32": "1X" if kind == "mxf8f6f4" else "2X"}.get(sv, sv)
        legal_sv = {"mxf8f6f4": {"1X", ""}, "mxf4": {"2X", ""}, "mxf4nvf4": {"2X", "4X"}}[kind]
        if norm not in legal_sv:
            out.append(f"scale_vec {scale_vec or '(none)'} is not legal for kind::{kind} "
                       f"(legal: {', '.join(sorted(x or '(default)' for x in legal_sv))})")
        st = f.get("scale_type")
        if st is not None:
            if kind in ("mxf8f6f4", "mxf4") and st != 1:
                out.append(f"scale type (bit 23) must be UE8M0 (1) for kind::{kind}")
            if kind == "mxf4nvf4" and norm == "2X" and st != 1:
                out.append("scale_vec::2X (block32) with kind::mxf4nvf4 requires UE8M0 scales (bit 23 = 1)")
        if norm == "4X":
            for side in ("sfa_id", "sfb_id"):
                if f.get(side):
                    out.append(f"{side} must be 0 with scale_vec::4X (block16)")
    # shapes
    m, n = d.m, d.n
    if m is not None:
        lm = legal_m(kind, cta_group, ws, bool(sp))
        if m not in lm:
            if kind in BLOCK_SCALED and f.get("m_dim") == 0 and d.value & (7 << 24) == 1 << 26:
                out.append("M=64 is not encodable for block-scaled kinds (bit 26 is reserved)")
            out.append(f"M={m} is not legal for kind::{kind} with cta_group::{cta_group}{' .ws' if ws else ''} "
                       f"(legal: {sorted(lm) or 'none'})")
    if n is not None:
        t8 = bool(f.get("transpose_b")) and kind in ("f8f6f4", "mxf8f6f4", "i8") and \
            FORMAT_BITS.get(d.b_type or "", 0) == 8
        ln = legal_n(kind, cta_group, ws, bool(sp), t8)
        if n not in ln:
            out.append(f"N={n} is not legal for kind::{kind} with cta_group::{cta_group}"
                       f"{' and an 8-bit transposed B' if t8 else ''} ("
                       + (f"{min(ln)}..{max(ln)}, step {sorted(ln)[1] - sorted(ln)[0] if len(ln) > 1 else 0})"
                          if ln else "none)"))
    return out


def to_dict(obj) -> dict:
    return asdict(obj)


def spelled_scale_vec(modifiers: "list[str] | tuple[str, ...]", kind: str) -> Optional[str]:
    """The scale vector a block-scaled MMA's modifiers name ('1X', '2X', '4X'), or None when they name none.
    PTX spells it `scale_vec::4X` or, as Triton 3.8+ emit it, by block size: `block16` is 4X, `block32` is 2X
    (1X for kind::mxf8f6f4)."""
    for m in modifiers:
        if m.startswith("scale_vec::"):
            return m.split("::")[1]
        if m == "block16":
            return "4X"
        if m == "block32":
            return "1X" if kind == "mxf8f6f4" else "2X"
    return None
