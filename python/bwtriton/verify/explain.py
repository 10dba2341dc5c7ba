"""`--explain`: every tcgen05.mma with its decoded instruction and shared-memory descriptors."""
from __future__ import annotations

from typing import Optional

from bwtriton.ptx import Module
from bwtriton.ptx.descriptors import d_tile_columns, decode_smem_desc

from . import function_contexts
from .checks.context import cta_group_of, decode_mma, scale_vec_of


def _fmt(v) -> str:
    return "?" if v is None else str(v)


def explain_mmas(mod: Module, target: str = "sm_100a") -> list[dict]:
    """One dict per tcgen05.mma: line, kind, cta_group, M/N/K, types, majorness, swizzle, scales, D address."""
    out: list[dict] = []
    for ctx in function_contexts(mod, target):
        func, r = ctx.func, ctx.resolver
        for ins in func.find("tcgen05.mma"):
            kind = ins.modifier_value("kind") or "?"
            cg = cta_group_of(ins) or 1
            row: dict = {"function": func.name, "line": ins.line, "kind": kind, "cta_group": cg,
                         "scale_vec": scale_vec_of(ins), "sparse": ins.has("sp"), "ws": ins.has("ws")}
            d = decode_mma(ctx, ins)
            row["idesc"] = d.summary() if d is not None else None
            for idx, name in ((1, "a"), (2, "b")):
                op = ins.operands[idx] if len(ins.operands) > idx else None
                if op is None:
                    continue
                if op.kind == "addr":
                    row[f"{name}_desc"] = {"tmem": op.text}
                    continue
                v = r.operand(op, 64)
                sd = decode_smem_desc(*v.known_bits(64)) if v is not None else None
                row[f"{name}_desc"] = sd.summary() if sd is not None and sd.known_mask else None
            dref = r.address(ins.operands[0]) if ins.operands else None
            d_info: dict = {"operand": ins.operands[0].text if ins.operands else None}
            if dref is not None and dref.base and dref.base.startswith("tmem@") and dref.offset is not None:
                d_info.update(alloc_line=int(dref.base.split("@")[1]), lane=dref.offset >> 16,
                              column=dref.offset & 0xFFFF)
                if d is not None and d.m and d.n:
                    d_info["columns"] = d_tile_columns(d.m, d.n, cg, ins.has("ws"))
            row["d_tmem"] = d_info
            if kind in ("mxf8f6f4", "mxf4", "mxf4nvf4"):
                addrs = [o.text for o in ins.operands[4:6] if o.kind == "addr"]
                row["scale_tmem"] = addrs
            out.append(row)
    return out


def format_explain(rows: list[dict]) -> str:
    """The rows of `explain_mmas` as indented text, one block per MMA."""
    lines = []
    for row in rows:
        d: Optional[dict] = row["idesc"]
        head = f"line {row['line']} ({row['function']}): tcgen05.mma cta_group::{row['cta_group']} kind::{row['kind']}"
        if row.get("scale_vec"):
            head += f" {row['scale_vec']}"
        lines.append(head)
        if d is None:
            lines.append("  idesc: not statically known")
        else:
            lines.append(f"  idesc {d['value']}: M={_fmt(d['M'])} N={_fmt(d['N'])} K={_fmt(d['K'])} "
                         f"A={_fmt(d['a_type'])} ({_fmt(d['a_major'])}-major) B={_fmt(d['b_type'])} "
                         f"({_fmt(d['b_major'])}-major) D={_fmt(d['d_type'])}"
                         + (f" scale={d['scale_type']} sfa_id={d['sfa_id']} sfb_id={d['sfb_id']}"
                            if d.get("scale_type") else ""))
        for name in ("a", "b"):
            sd = row.get(f"{name}_desc")
            if sd is None:
                lines.append(f"  {name.upper()} desc: not statically known")
            elif "tmem" in sd:
                lines.append(f"  {name.upper()} from TMEM {sd['tmem']}")
            else:
                lines.append(f"  {name.upper()} desc {sd['value']}: swizzle={_fmt(sd['swizzle'])} "
                             f"SBO={_fmt(sd['sbo'])} LBO={_fmt(sd['lbo'])} start="
                             f"{'register' if sd['start_address'] is None else sd['start_address']}")
        dt = row["d_tmem"]
        where = f"  D in TMEM {dt['operand']}"
        if "alloc_line" in dt:
            where += (f" = alloc(line {dt['alloc_line']}) + lane {dt['lane']}, column {dt['column']}"
                      + (f", {dt['columns']} columns" if "columns" in dt else ""))
        lines.append(where)
        if row.get("scale_tmem"):
            lines.append(f"  scales in TMEM: A {row['scale_tmem'][0]}, B {row['scale_tmem'][-1]}")
    return "\n".join(lines)
