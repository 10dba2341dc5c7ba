"""P19: the instruction and shared-memory descriptors of each tcgen05.mma are legal for its kind and form, and
its D tile lies inside the TMEM allocation."""
from __future__ import annotations

from bwtriton.ptx.descriptors import (BLOCK_SCALED, FORMAT_BITS, d_tile_columns, decode_smem_desc, idesc_problems,
                                      smem_desc_problems)

from .context import Ctx, cta_group_of, decode_mma, scale_vec_of, tmem_ref


def check_mma(ctx: Ctx) -> None:
    """P19 (idesc/sdesc legal for the kind and the instruction), D tile inside the allocation."""
    for ins in ctx.func.find("tcgen05.mma"):
        kind = ins.modifier_value("kind")
        cg = cta_group_of(ins) or 1
        if kind is None:
            ctx.add("mma-kind", "P19", "error", ins, "tcgen05.mma without .kind")
            continue
        scale_vec = scale_vec_of(ins)
        if kind not in BLOCK_SCALED and (scale_vec or ins.has("block_scale")):
            ctx.add("idesc-kind", "P19", "error", ins, f".block_scale/.scale_vec used with kind::{kind}")
        if kind == "mxf4nvf4" and scale_vec is None:
            ctx.add("idesc-kind", "P19", "error", ins, "kind::mxf4nvf4 requires an explicit .scale_vec/.blockN")
        d = decode_mma(ctx, ins)
        if d is None:
            continue
        sparse = ins.has("sp")
        ws = ins.has("ws")
        for msg in idesc_problems(d, cta_group=cg, scale_vec=scale_vec, sparse_inst=sparse, ws=ws,
                                  target_name=ctx.target):
            ctx.add("idesc-field", "P19", "error", ins, f"instruction descriptor 0x{d.value:08X} "
                    f"(kind::{kind}, cta_group::{cg}): {msg}")
        # shared-memory descriptors of A (unless A is in TMEM) and B
        for idx, name, major_bit in ((1, "A", "transpose_a"), (2, "B", "transpose_b")):
            op = ins.operands[idx]
            if op.kind != "reg":
                continue
            v = ctx.resolver.operand(op, 64)
            if v is None:
                continue
            val, mask = v.known_bits(64)
            if mask == 0:
                continue
            sd = decode_smem_desc(val, mask)
            for msg in smem_desc_problems(sd, ctx.target):
                ctx.add("smem-desc-field", "P19", "error", ins, f"{name} shared-memory descriptor: {msg}")
            sw = sd.swizzle
            mj = d.fields.get(major_bit)
            ty = d.a_type if name == "A" else d.b_type
            if sw is not None and mj is not None:
                if mj == 0 and sw == "128B_base32B":
                    ctx.add("smem-desc-swizzle", "P19", "error", ins,
                            f"{name} is K-major but its descriptor uses 128B swizzle with 32B atomicity "
                            "(only valid for MN-major)")
                if mj == 1 and ty == "tf32" and sw != "128B_base32B":
                    ctx.add("smem-desc-swizzle", "P19", "error", ins,
                            f"tf32 {name} is MN-major: only 128B swizzle with 32B atomicity supports it, "
                            f"descriptor has {sw}")
                if mj == 1 and FORMAT_BITS.get(ty or "", 0) in (8, 16) and sw == "128B_base32B":
                    ctx.add("smem-desc-swizzle", "P19", "error", ins,
                            f"8/16-bit MN-major {name} cannot use 128B swizzle with 32B atomicity")
        # D tile inside the allocation
        ref = tmem_ref(ctx, ins.operands[0])
        if ref is not None and d.m is not None and d.n is not None:
            sym, lane, col = ref
            need = d_tile_columns(d.m, d.n, cg, ws)
            alloc = ctx.alloc_cols.get(sym)
            if alloc is not None and col + need > alloc:
                ctx.add("mma-d-outside-alloc", "P4", "error", ins,
                        f"MMA D tile (M={d.m}, N={d.n}, cta_group::{cg}) needs columns {col}..{col + need - 1} "
                        f"but the allocation (line {sym.split('@')[1]}) has {alloc} columns",
                        related=int(sym.split("@")[1]))
            if lane not in (0, 16) or (lane == 16 and not (d.m == 64 and cg == 1)):
                ctx.add("mma-d-lane", "P19", "error", ins,
                        f"MMA D address has lane {lane}: D must start at lane 0 (or 16 for M=64 layout F)")
