"""The shared-memory bytes a tcgen05.mma / tcgen05.cp reads (start address and extent of each operand), shared by
the proxy-fence (sync.py) and copy-overlap (async_copy.py) checks."""
from __future__ import annotations

from typing import Optional

from bwtriton.ptx.descriptors import decode_smem_desc
from bwtriton.ptx.ir import Instruction
from bwtriton.ptx.values import AbsVal

from .context import Ctx, cta_group_of, decode_mma


def _desc_smem_address(ctx: Ctx, op) -> Optional[AbsVal]:
    """Follow a descriptor register back (or/add/cvt/bfe/shr/and/mov) to the smem address it encodes."""
    r = ctx.resolver
    cur = op
    for _ in range(12):
        if cur is None or cur.kind != "reg":
            return None
        v = r.operand(cur)
        if v is not None and v.base is not None and v.base_max is not None:
            return v  # an address relative to a shared-memory symbol
        defs = ctx.func.definitions(cur.name)
        if len(defs) != 1:
            return None
        d = defs[0]
        if d.opcode == "mov" and len(d.operands) == 2 and d.operands[1].kind == "vec" and d.operands[1].items:
            cur = d.operands[1].items[0]  # mov.b64 %rd, {lo, hi}: the start address is in the low word
            continue
        srcs = [o for o in d.operands[1:] if o.kind in ("reg", "sym")]
        if d.opcode in ("or", "add", "cvt", "bfe", "shr", "and", "mov", "cvta") and srcs:
            nonconst = [o for o in srcs if (r.operand(o) or AbsVal(None, 0, 1)).exact is None]
            if len(nonconst) != 1:
                return None
            cur = nonconst[0]
            if cur.kind == "sym":
                return r.operand(cur)
            continue
        return None
    return None


# Upper bound of the bytes one MMA reads from an operand's start address: 256 rows x 128-byte swizzle rows.
_MMA_OPERAND_EXTENT = 256 * 128


def smem_reads(ctx: Ctx, ins: Instruction) -> Optional[list[tuple[AbsVal, int, int]]]:
    """(start address, exact extent, upper-bound extent) of each smem operand an MMA/cp reads; None if unknown.

    K-major swizzled operands span rows/8 * SBO bytes exactly; otherwise only a generous bound is known."""
    idxs = (1, 2) if ins.opcode == "tcgen05.mma" else (1,)
    d = decode_mma(ctx, ins) if ins.opcode == "tcgen05.mma" else None
    out = []
    for i in idxs:
        if i >= len(ins.operands) or ins.operands[i].kind == "addr":
            continue  # A from TMEM
        v = _desc_smem_address(ctx, ins.operands[i])
        if v is None:
            return None
        dv = ctx.resolver.operand(ins.operands[i], 64)
        sd = decode_smem_desc(*dv.known_bits(64)) if dv is not None else None
        rows = None
        if d is not None:
            rows = d.m if i == 1 else d.n
            if rows and cta_group_of(ins) == 2:
                rows //= 2  # each CTA of the pair supplies half of A's rows and half of B's columns
        sbo, lbo = (sd.sbo, sd.lbo) if sd is not None else (None, None)
        major = d.fields.get("transpose_a" if i == 1 else "transpose_b") if d is not None else None
        if rows and sbo and major == 0 and sd.swizzle not in (None, "none"):
            exact = upper = -(-rows // 8) * sbo
        else:
            exact = 16
            upper = max(_MMA_OPERAND_EXTENT, (-(-(rows or 256) // 8) + 2) * max(sbo or 0, lbo or 0, 1024))
        out.append((v, exact, upper))
    if ins.opcode == "tcgen05.cp":
        out = [(v, 16, 128 * 32) for v, _, _ in out]
    return out
