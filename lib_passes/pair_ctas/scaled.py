"""pair-ctas-scaled (PTX): 2-CTA (``cta_group::2``, M = 256) block-scaled MMAs for `tl.dot_scaled`, by pairing the
PTX of a 1-CTA kernel with 128-row tiles.

Why at PTX: Triton 3.6 cannot lower a block-scaled MMA split over 2 CTAs ('Failed to find a valid layout' even with
the 2-CTA marks), so `pair-ctas` refuses it at TTGIR. Its 1-CTA lowering is fine, and two 1-CTA programs computing
vertically adjacent 128 x N tiles hold almost exactly what one 2-CTA MMA needs: each CTA its own A rows, SFA and D;
SFB of the whole N tile in both CTAs (replicated, as Gluon's 2-CTA block-scaled tutorial lays it out); only B must
change: the peer supplies the second N/2 columns, so its B TMA starts N/2 rows further. docs/two_cta.md ("Block-scaled
pairs") has the operand table.

The rewrite: `.explicitcluster` + `.reqnctapercluster 2` (a compile-time cluster of 2); every tcgen05 op
`cta_group::2`; the MMA's idesc M = 256; MMAs, scale copies and commits issued by the leader only (the even CTA);
commits `.multicast::cluster` with CTA mask 0b11 (the stage and the accumulator are released in both CTAs); an exit
cluster barrier before the TMEM dealloc; then the mbarrier handoff of `pair-ctas-handoff` (the peer's TMA completes
on the leader's mbarrier, which expects both CTAs' bytes; one cluster barrier after the mbarrier inits).

The launch: clusters of 2 consecutive CTAs along x (`%ctaid.x` 2i, 2i+1) must compute the two 128-row halves of one
256-row tile of the same N tile (program ids laid out M-fastest with an even number of M tiles, as in Triton's
block-scaled tutorial). The pass cannot see the program-id mapping; it is the caller's contract (docs/two_cta.md).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from bwtriton.passes.base import Pass, PassContext, Stage, register_pass
from bwtriton.ptx.descriptors import BLOCK_SCALED, decode_idesc, encode_idesc

from .handoff import REG_PREFIX, apply_handoff, code_of, plan_handoff

_P = "%bwps"  # registers of this pass
_MMA = re.compile(r"^(?P<indent>\s*)(?P<guard>@!?%\w+\s+)?tcgen05\.mma\.cta_group::1\.(?P<mods>\S+)\s+(?P<ops>.*);\s*$")
_CP = re.compile(r"^(?P<indent>\s*)(?P<guard>@!?%\w+\s+)?tcgen05\.cp\.cta_group::1\.(?P<rest>.*)$")
_COMMIT = re.compile(r"^(?P<indent>\s*)(?P<guard>@!?%\w+\s+)?tcgen05\.commit\.cta_group::1\.mbarrier::arrive::one"
                     r"(\.shared::cluster)?\.b64\s+\[(?P<bar>[^\]]+)\];\s*$")
_TMA = re.compile(r"cp\.async\.bulk\.tensor\.(?P<dim>\dd)\.[\w:.]*global\.mbarrier[\w:.]*\s+\[(?P<dst>[^\]]+)\],\s*"
                  r"\[(?P<map>%rd\d+),\s*\{(?P<coords>[^}]*)\}\]")
# `mov.b64 %rd, {%lo, %hi}` (Triton 3.9 builds the MMA descriptor so) counts its low half, the address, as source
_DEF = re.compile(r"^(@!?%\w+\s+)?(?P<op>[\w.]+)\s+(?P<dst>%\w+),\s*\{?(?P<src>%\w+)")
_MOV_CONST = re.compile(r"^mov\.b32\s+(?P<reg>%r\d+),\s*(?P<val>-?\d+);$")


@dataclass(frozen=True)
class ScaledPair:
    """What the pairing found in the 1-CTA kernel."""

    kind: str
    n: int                 # the MMA's N (the pair tile's BLOCK_N)
    b_map: str             # the register holding B's tensor map
    b_param: str           # the kernel parameter B's tensor map comes from


def _def_of(code: list[str], reg: str, before: int) -> tuple[int, str, str] | None:
    """(line, opcode, first source) of the last definition of `reg` before line `before`."""
    for i in range(before - 1, -1, -1):
        m = _DEF.match(code[i])
        if m and m["dst"] == reg:
            return i, m["op"], m["src"]
    return None


def _b_tensor_map(code: list[str], mma_line: int, b_desc: str) -> str | None:
    """The tensor-map register of the TMA load whose destination the MMA's B descriptor points at: follow the
    descriptor's definition chain (or/add of constant bits, cvt, bfe of the shared address) back to a TMA dst."""
    dsts = {}
    for c in code:
        m = _TMA.search(c)
        if m:
            dsts.setdefault(m["dst"].strip(), m["map"])
    reg, at = b_desc, mma_line
    for _ in range(8):
        if reg in dsts:
            return dsts[reg]
        d = _def_of(code, reg, at)
        if d is None or d[1].split(".")[0] not in ("or", "add", "cvt", "bfe", "mov"):
            return None
        at, reg = d[0], d[2]
    return None


def _param_of(code: list[str], reg: str) -> str | None:
    """The kernel parameter a tensor-map register was taken from (`mov.b64 %rd, param; cvta.param.u64 reg, %rd`;
    Triton 3.9: `mov.b32 %r, param; cvt.u64.u32 %rd, %r; cvta.param.u64 reg, %rd`)."""
    for _ in range(4):
        d = _def_of(code, reg, len(code))
        if d is None:
            return None
        if not d[2].startswith("%"):
            return None
        reg = d[2]
        m = next((re.match(r"^mov\.b(?:64|32)\s+%\w+,\s*(\w+_param_\d+);", c) for c in code
                  if re.match(rf"^mov\.b(?:64|32)\s+{re.escape(reg)},", c)), None)
        if m:
            return m.group(1)
    return None


def _tensormap_params(code: list[str]) -> list[str]:
    return [m.group(1) for c in code if (m := re.match(r"^\.param \.align 64 \.b8 (\w+)\[128\]", c))]


def _mma_shape(code: list[str], mmas: list[tuple[int, re.Match]]) -> tuple[str, int] | str:
    """(kind, N) shared by every MMA, decoded from its idesc constant; or why the MMAs cannot be paired."""
    consts: dict[str, list[int]] = {}
    for c in code:
        if m := _MOV_CONST.match(c):
            consts.setdefault(m["reg"], []).append(int(m["val"]) & 0xFFFFFFFF)
    shapes = set()
    for _, m in mmas:
        kind = re.match(r"kind::(\w+)", m["mods"]).group(1)
        idesc = m["ops"].split(",")[3].strip()
        if len(consts.get(idesc, [])) != 1:
            return f"the MMA's instruction descriptor {idesc} is not one constant"
        d = decode_idesc(consts[idesc][0], kind)
        if kind not in BLOCK_SCALED or d.m != 128:
            return f"a kind::{kind} MMA with M = {d.m}; pairing needs 128-row block-scaled MMAs (BLOCK_M = 128)"
        shapes.add((kind, d.n))
    if len(shapes) != 1:
        return "MMAs of different kinds or N"
    return shapes.pop()


def find_pair(code: list[str]) -> tuple[ScaledPair | None, str]:
    """The pairing's facts, or (None, why the kernel cannot be paired)."""
    if any(c.startswith(".reqnctapercluster") for c in code):
        return None, "the kernel is already launched in clusters"
    if any("cta_group::2" in c for c in code):
        return None, "the kernel already has cta_group::2 ops"
    mmas = [(i, m) for i, c in enumerate(code) if (m := _MMA.match(c))]
    if not mmas or len(mmas) != sum("tcgen05.mma" in c for c in code):
        return None, "no tcgen05.mma, or a .ws / sparse one (only dense cta_group::1 MMAs are paired)"
    if not all("block_scale" in m["mods"] for _, m in mmas):
        return None, "not every MMA is block-scaled (plain tl.dot pairs through pair-ctas with num_ctas=2)"
    shape = _mma_shape(code, mmas)
    if isinstance(shape, str):
        return None, shape
    kind, n = shape
    if n % 32:
        return None, f"N = {n}: each CTA's half of B must be whole 16-row groups"
    first, m0 = mmas[0]
    b_map = _b_tensor_map(code, first, m0["ops"].split(",")[2].strip())
    if b_map is None:
        return None, "cannot tell which TMA load holds B (the MMA's B descriptor is not a TMA destination)"
    b_param = _param_of(code, b_map)
    if b_param is None:
        return None, f"cannot find the kernel parameter of B's tensor map {b_map}"
    if any(m["dim"] != "2d" for c in code if (m := _TMA.search(c)) and m["map"] == b_map):
        return None, "B is not loaded by a 2-D TMA"
    return ScaledPair(kind, n, b_map, b_param), ""


def _doubled_m(value: int, kind: str) -> int:
    """The idesc with M = 256: the encoder's M bits for 256 in place of those for 128."""
    d = decode_idesc(value, kind)
    kw = dict(scale_type=d.scale_type) if d.scale_type else {}
    delta = encode_idesc(kind, 256, d.n, d.a_type, d.b_type, **kw) ^ encode_idesc(kind, 128, d.n, d.a_type,
                                                                                  d.b_type, **kw)
    return value ^ delta


def _leader_guard(indent: str, guard: str, tag: int) -> tuple[list[str], str]:
    """Lines computing `guard and (this CTA is the leader)` as one integer comparison (so the verifier's path facts
    see the leader condition, P18), and the new guard."""
    r = REG_PREFIX
    if not guard:
        return [], f"@{r}_isleader "
    g = guard.strip()
    t, p = f"{_P}_t{tag}", f"{_P}_g{tag}"
    on, off = (f"{_P}_lead1", "0") if not g.startswith("@!") else ("0", f"{_P}_lead1")
    src = g.lstrip("@!")
    return [f"{indent}selp.b32 \t{t}, {on}, {off}, {src};", f"{indent}setp.ne.b32 \t{p}, {t}, 0;"], f"@{p} "


_COND_BRA = re.compile(r"^@(?P<pred>%\w+)\s+bra(?P<uni>\.uni)?\s+(?P<target>\$?\w+);$")
_BLOCK_SYNC = re.compile(r"\b(bar\.|barrier\.|mbarrier\.)")


def _mma_block_branches(code: list[str]) -> dict[int, str]:
    """The conditional branch that guards each MMA block (Triton lets only warp 0 reach its MMAs), as line ->
    "skip" (the MMAs are on its fall-through: the peer must take it too) or "enter" (the MMAs are at its target,
    entered only through it: the peer must not take it). Empty when some MMA has no such branch (then each MMA
    gets its own leader guard)."""
    real = [i for i, c in enumerate(code) if c and not c.startswith((".loc", "//"))]
    prev = {j: i for i, j in zip(real, real[1:])}
    found: dict[int, str] = {}
    for i, c in enumerate(code):
        if not _MMA.match(c):
            continue
        j = i - 1
        while j >= 0 and not (code[j].endswith(":") or _COND_BRA.match(code[j]) or _BLOCK_SYNC.search(code[j])):
            j -= 1
        if j >= 0 and _COND_BRA.match(code[j]):
            found[j] = "skip"
            continue
        if j < 0 or not code[j].endswith(":"):
            return {}
        label = code[j][:-1]
        into = [k for k, x in enumerate(code) if (m := re.search(r"\bbra(\.uni)?\s+(\$?\w+);", x))
                and m.group(2) == label]
        before = code[prev.get(j, 0)]
        if len(into) != 1 or not _COND_BRA.match(code[into[0]]) or not re.match(r"^(bra|ret|exit)\b", before):
            return {}
        found[into[0]] = "enter"
    return found


def rewrite(lines: list[str], pair: ScaledPair) -> list[str]:
    """The 1-CTA kernel's lines with the 2-CTA MMA protocol (before the mbarrier handoff)."""
    code = [code_of(ln) for ln in lines]
    r = REG_PREFIX
    consts = {m["reg"]: i for i, c in enumerate(code) if (m := _MOV_CONST.match(c))}
    idesc_regs = {_MMA.match(c)["ops"].split(",")[3].strip() for c in code if _MMA.match(c)}
    skips = _mma_block_branches(code)
    out: list[str] = []
    tag = 0
    for i, line in enumerate(lines):
        c = code[i]
        indent = line[:len(line) - len(line.lstrip())] or "\t"
        if i in skips:  # the branch around an MMA block: the peer does not reach the block either
            tag += 1
            m = _COND_BRA.match(c)
            t, p = f"{_P}_t{tag}", f"{_P}_g{tag}"
            taken = (f"1, {r}_odd" if skips[i] == "skip" else f"{_P}_lead1, 0") + f", {m['pred']}"
            out += [f"{indent}selp.b32 \t{t}, {taken};", f"{indent}setp.ne.b32 \t{p}, {t}, 0;",
                    f"{indent}@{p} bra{m['uni'] or ''} \t{m['target']};"]
            continue
        if _MMA.match(c) and skips:
            out.append(line.replace("cta_group::1", "cta_group::2", 1))
            continue
        if (m := _MMA.match(c)) or (m := _CP.match(c)) or (m := _COMMIT.match(c)):
            tag += 1
            pre, guard = _leader_guard(indent, m["guard"] or "", tag)
            if _COMMIT.match(c):  # arrives on the mbarrier at the same offset in both CTAs of the pair
                body = (f"tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 "
                        f"[{m['bar']}], {_P}_mask;")
            else:
                body = c[len(m["guard"] or ""):].strip().replace("cta_group::1", "cta_group::2", 1)
            out += pre + [f"{indent}{guard}{body}"]
            continue
        if c.startswith(".reqntid"):
            out += [line, ".explicitcluster", ".reqnctapercluster 2"]  # __cluster_dims__(2, 1, 1)'s spelling
            continue
        if (m := _MOV_CONST.match(c)) and m["reg"] in idesc_regs and consts[m["reg"]] == i:
            out.append(f"{indent}mov.b32 \t{m['reg']}, {_doubled_m(int(m['val']) & 0xFFFFFFFF, pair.kind)};")
            continue
        if "tcgen05.dealloc" in c:
            out += [f"{indent}barrier.cluster.arrive.release.aligned;",
                    f"{indent}barrier.cluster.wait.acquire.aligned;"]
        if (m := _TMA.search(c)) and m["map"] == pair.b_map:
            coords = [x.strip() for x in m["coords"].split(",")]
            tag += 1
            shifted = f"{_P}_n{tag}"
            out.append(f"{indent}add.s32 \t{shifted}, {coords[1]}, {_P}_bshift;")
            box = rf"\[{re.escape(m['map'])},\s*\{{[^}}]*\}}\]"
            out.append(re.sub(box, f"[{m['map']}, {{{coords[0]}, {shifted}}}]", line, count=1))
            continue
        out.append(line.replace("cta_group::1", "cta_group::2") if "tcgen05." in c else line)
    return _declare(out)


def _declare(lines: list[str]) -> list[str]:
    """`.reg` declarations of this pass's registers (those the rewritten lines use), before the kernel's first."""
    used = sorted(set(re.findall(rf"{_P}_\w+", "\n".join(lines))))
    preds = [u for u in used if u.startswith(f"{_P}_g")]
    b16 = [u for u in used if u == f"{_P}_mask"]
    b32 = [u for u in used if u not in preds and u not in b16]
    decl = [f"\t.reg .{t} \t{', '.join(regs)};" for t, regs in (("b32", b32), ("pred", preds), ("b16", b16)) if regs]
    first_reg = next(i for i, ln in enumerate(lines) if code_of(ln).startswith(".reg"))
    return lines[:first_reg] + decl + lines[first_reg:]


def setup_values(pair: ScaledPair) -> list[str]:
    """Rank-dependent values this pass's edits read (placed with the handoff's prologue)."""
    r = REG_PREFIX
    return [f"\tmul.lo.u32 \t{_P}_bshift, {r}_odd, {pair.n // 2};",
            f"\txor.b32 \t{_P}_lead1, {r}_odd, 1;",
            f"\tmov.b16 \t{_P}_mask, 3;"]


@register_pass
class PairCtasScaled(Pass):
    name = "pair-ctas-scaled"
    stage = Stage.PTX
    purpose = ("pair a 128-row block-scaled (tl.dot_scaled) kernel into cta_group::2 M=256 MMAs (clusters of 2 "
               "consecutive CTAs)")
    default_enabled = False

    def applies_to(self, target) -> bool:
        return bool(target.has_tcgen05)

    def run(self, ir: str, ctx: PassContext):
        lines = ir.split("\n")
        code = [code_of(ln) for ln in lines]
        pair, why = find_pair(code)
        if pair is None:
            ctx.error(f"cannot pair this kernel's block-scaled MMAs: {why}")
        meta = ctx.metadata.get("tensordesc_meta") if ctx.metadata else None
        params = _tensormap_params(code)
        if meta and pair.b_param in params:
            box = meta[params.index(pair.b_param)].get("block_size")
            if box and box[0] != pair.n:
                ctx.error(f"B's TMA box is {box} but the MMA's N is {pair.n}; pairing needs B stored [N, K] "
                          f"(K-major) with a BLOCK_N x BLOCK_K box")
        try:
            paired = rewrite(lines, pair)
        except ValueError as exc:
            ctx.error(f"cannot pair this kernel's block-scaled MMAs: {exc}")
        plan, why = plan_handoff(paired, replaces_barrier=False)
        if plan is None:
            ctx.error(f"cannot hand the peer's tiles to the leader: {why}")
        out = apply_handoff(paired, plan, extra_setup=setup_values(pair))
        ctx.report.update(paired=True, kind=pair.kind, N=pair.n, b_tensor_map=pair.b_param,
                          mmas=sum(1 for c in code if _MMA.match(c)), tma_loads=len(plan.tma_loads),
                          b_box_checked=bool(meta))
        return "\n".join(out)
