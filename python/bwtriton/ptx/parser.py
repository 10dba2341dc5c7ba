"""PTX text -> `bwtriton.ptx.ir.Module`. One pass of regex statement splitting, then per-statement parsing;
a 10k-line kernel parses in well under a second.

Handles what Triton/LLVM emit: `.loc`/`.file` lines (no `;`), DWARF `.section` blocks (skipped),
inline-asm `{ }` scopes with scoped `.reg` and labels (`waitLoop:` appears many times per kernel),
`.branchtargets` tables for `brx.idx`, `%r|%p` destination pairs, vector and tensor-coordinate operands.
"""
from __future__ import annotations

import bisect
import re
import struct
from typing import Optional

from bwtriton.errors import InputError

from .cfg import build_cfg
from .ir import Directive, Function, Guard, Instruction, Label, Module, Operand, Param, RegDecl

PTX_TYPES = frozenset(
    "b8 b16 b32 b64 b128 u8 u16 u32 u64 s8 s16 s32 s64 f16 f16x2 bf16 bf16x2 f32 f64 tf32 pred "
    "e4m3 e5m2 e4m3x2 e5m2x2 e2m3x2 e3m2x2 e2m1x2 ue8m0x2 e4m3x4 e5m2x4 e2m1x4 e2m3x4 e3m2x4 f32x2 s2f6x2".split())

# Opcodes made of several dotted components (longest match wins). Families listed with a count take
# that many components ("tcgen05.mma"); explicit tuples are matched literally.
_FAMILY_PARTS = {"tcgen05": 2, "mbarrier": 2, "wgmma": 2, "multimem": 2, "tensormap": 2, "griddepcontrol": 2,
                 "clusterlaunchcontrol": 2}
_COMPOUND = sorted((tuple(s.split(".")) for s in (
    "cp.async", "cp.async.bulk", "cp.async.bulk.tensor", "cp.async.bulk.prefetch", "cp.async.bulk.prefetch.tensor",
    "cp.async.commit_group", "cp.async.wait_group", "cp.async.wait_all", "cp.async.bulk.commit_group",
    "cp.async.bulk.wait_group", "cp.async.mbarrier.arrive", "cp.reduce.async.bulk", "cp.reduce.async.bulk.tensor",
    "fence.proxy.async", "fence.proxy.tensormap", "fence.proxy.alias", "barrier.cluster", "bar.warp",
    "st.async", "red.async", "ld.global.nc")), key=len, reverse=True)

# Instructions whose first operand is NOT a register destination.
_NO_DEF = frozenset(
    "st st.async red red.async stmatrix bar bar.warp barrier barrier.cluster fence fence.proxy.async "
    "fence.proxy.tensormap fence.proxy.alias membar bra brx ret exit trap prefetch prefetchu setmaxnreg "
    "griddepcontrol.launch_dependents griddepcontrol.wait mbarrier.init mbarrier.inval mbarrier.expect_tx "
    "mbarrier.complete_tx pmevent nanosleep call discard applypriority cp.async cp.async.bulk "
    "cp.async.bulk.tensor cp.async.bulk.prefetch cp.async.bulk.prefetch.tensor cp.async.commit_group "
    "cp.async.wait_group cp.async.wait_all cp.async.bulk.commit_group cp.async.bulk.wait_group "
    "cp.async.mbarrier.arrive cp.reduce.async.bulk cp.reduce.async.bulk.tensor multimem.st multimem.red "
    "tensormap.replace trap brkpt".split())

_SREGS = frozenset(
    "%tid %ntid %laneid %warpid %nwarpid %ctaid %nctaid %smid %nsmid %gridid %clock %clock_hi %clock64 "
    "%lanemask_eq %lanemask_le %lanemask_lt %lanemask_ge %lanemask_gt %cluster_ctarank %cluster_nctarank "
    "%clusterid %nclusterid %cluster_ctaid %cluster_nctaid %is_explicit_cluster %globaltimer %globaltimer_lo "
    "%globaltimer_hi %dynamic_smem_size %total_smem_size %aggr_smem_size %reserved_smem_offset_begin "
    "%reserved_smem_offset_end %reserved_smem_offset_cap %current_graph_exec".split())

_COMMENT_RE = re.compile(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*|/\*.*?\*/', re.S)
_LINE_DIRECTIVE_RE = re.compile(r"^[ \t]*\.(loc|file|version|target|address_size)\b([^\n]*)", re.M)
_SPLIT_RE = re.compile(r"[{};]")
_LABEL_RE = re.compile(r"\s*([A-Za-z_$%][\w$]*)\s*:(?!:)")
_INT_RE = re.compile(r"^[-+]?(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9]\d*)U?$")
_FLOAT_RE = re.compile(r"^0([fFdD])([0-9a-fA-F]+)$")
_REGDECL_RE = re.compile(r"^\.reg\s+((?:\.\w+\s+)*)\.(\w+)\s+(.*)$", re.S)
_PARAM_RE = re.compile(r"^\s*\.param\s+(.*?)\s*([\w$]+)\s*(\[\d*\])?\s*$", re.S)
_FUNC_HEAD_RE = re.compile(r"\.(entry|func)\s+(?:\((.*?)\)\s*)?([\w$]+)\s*(?:\((.*)\))?\s*(.*)$", re.S)


def parse_ptx(text: str) -> Module:
    """Parse PTX source text. Raises `InputError` for text that is not PTX (no .version/.target/function)."""
    if not isinstance(text, str):
        raise InputError(f"parse_ptx expects PTX text (str), got {type(text).__name__}; read the file first")
    return _Parser(text).parse()


def parse_ptx_file(path: str) -> Module:
    """Read and parse a .ptx file (errors name the path)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError as exc:
        raise InputError(f"cannot read PTX file {path!r}: {exc.strerror}") from exc
    return parse_ptx(text)


def _blank(m: re.Match) -> str:
    """Replace a match with spaces, keeping its newlines so offsets and line numbers survive."""
    s = m.group(0)
    return "".join("\n" if c == "\n" else " " for c in s)


def split_top_level(s: str, sep: str = ",") -> list[str]:
    """Split at `sep` outside brackets/braces/parentheses."""
    out, depth, start = [], 0, 0
    for i, c in enumerate(s):
        if c in "[{(":
            depth += 1
        elif c in "]})":
            depth -= 1
        elif c == sep and depth == 0:
            out.append(s[start:i])
            start = i + 1
    out.append(s[start:])
    return [p.strip() for p in out if p.strip()]


def parse_int(tok: str) -> Optional[int]:
    """PTX integer literal (decimal, hex, octal, optional U suffix) -> int, else None."""
    tok = tok.strip()
    if not _INT_RE.match(tok):
        return None
    t = tok.rstrip("U")
    neg = t.startswith("-")
    t = t.lstrip("+-")
    if t.lower().startswith("0x"):
        v = int(t, 16)
    elif len(t) > 1 and t.startswith("0"):
        v = int(t, 8)
    else:
        v = int(t)
    return -v if neg else v


class _Parser:
    def __init__(self, text: str):
        self.src = text
        self.module = Module(source=text)

    # -- helpers --------------------------------------------------------------------------------------
    def _line_of(self, offset: int) -> int:
        return bisect.bisect_right(self._nl, offset) + 1

    def _split_opcode(self, tok: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
        parts = tok.split(".")
        head = parts[0]
        n = _FAMILY_PARTS.get(head)
        extra: list[str] = []
        if n is not None:
            op_parts = parts[:n]
            rest = parts[n:]
            if head == "tcgen05" and len(op_parts) > 1 and "::" in op_parts[1]:
                # tcgen05.wait::ld / tcgen05.fence::after_thread_sync: the `::` part is a modifier.
                name, _, mod = op_parts[1].partition("::")
                op_parts = [head, name]
                extra = [mod]
        else:
            op_parts, rest = [head], parts[1:]
            for comp in _COMPOUND:
                if tuple(parts[:len(comp)]) == comp:
                    op_parts, rest = list(comp), parts[len(comp):]
                    break
        mods = tuple(extra + [p for p in rest if p not in PTX_TYPES])
        types = tuple(p for p in rest if p in PTX_TYPES)
        return ".".join(op_parts), mods, types

    def _operand(self, tok: str, reg_names: set[str]) -> Operand:
        tok = tok.strip()
        if tok.startswith("["):
            inner = tok[1:tok.rindex("]")].strip() if "]" in tok else tok[1:]
            parts = split_top_level(inner)
            if len(parts) > 1:  # [tensormap, {coords}] or [addr, imm]
                base = self._operand(parts[0], reg_names)
                return Operand("addr", tok, base=base, items=tuple(self._operand(p, reg_names) for p in parts[1:]))
            return self._address(tok, inner, reg_names)
        if tok.startswith("{"):
            inner = tok[1:tok.rindex("}")] if "}" in tok else tok[1:]
            return Operand("vec", tok, items=tuple(self._operand(p, reg_names) for p in split_top_level(inner)))
        if tok.startswith("("):
            inner = tok[1:tok.rindex(")")] if ")" in tok else tok[1:]
            return Operand("list", tok, items=tuple(self._operand(p, reg_names) for p in split_top_level(inner)))
        if "|" in tok:
            a, b = tok.split("|", 1)
            return Operand("pair", tok, items=(self._operand(a, reg_names), self._operand(b, reg_names)))
        if tok == "_":
            return Operand("sink", tok)
        neg = False
        name = tok
        if name.startswith("!"):
            neg, name = True, name[1:].strip()
        if name.startswith("%"):
            root = name.split(".", 1)[0]
            if root in _SREGS or root.startswith("%envreg") or root.startswith("%pm"):
                return Operand("sreg", tok, name=name)
            return Operand("reg", tok, name=name, negated=neg)
        iv = parse_int(name)
        if iv is not None:
            return Operand("imm", tok, value=iv)
        fm = _FLOAT_RE.match(name)
        if fm:
            raw = int(fm.group(2), 16)
            val = struct.unpack(">f", raw.to_bytes(4, "big"))[0] if fm.group(1) in "fF" else \
                struct.unpack(">d", raw.to_bytes(8, "big"))[0]
            return Operand("imm", tok, value=val)
        if name in reg_names:
            return Operand("reg", tok, name=name, negated=neg)
        return Operand("sym", tok, name=name)

    def _address(self, tok: str, inner: str, reg_names: set[str]) -> Operand:
        # [base], [base+off], [base + -off], [off]
        m = re.match(r"^([^+\-]+?)\s*(?:([+-])\s*(.+))?$", inner)
        if m:
            base_tok, sign, off_tok = m.group(1).strip(), m.group(2), m.group(3)
            off = 0
            if off_tok is not None:
                v = parse_int(off_tok.replace(" ", ""))
                if v is None:
                    return Operand("addr", tok, base=self._operand(inner, reg_names))
                off = -v if sign == "-" else v
            base = self._operand(base_tok, reg_names)
            if base.kind == "imm" and isinstance(base.value, int):
                return Operand("addr", tok, base=None, offset=base.value + off)
            return Operand("addr", tok, base=base, offset=off)
        iv = parse_int(inner.replace(" ", ""))
        if iv is not None:
            return Operand("addr", tok, base=None, offset=iv)
        return Operand("addr", tok, base=self._operand(inner, reg_names))

    # -- main loop ------------------------------------------------------------------------------------
    def parse(self) -> Module:
        mod = self.module

        def line_directive(m: re.Match) -> str:
            name, rest = m.group(1), m.group(2).strip()
            if name == "version":
                mod.version = rest
            elif name == "target":
                mod.target = rest.split(",")[0].strip()
            elif name == "address_size":
                mod.address_size = parse_int(rest)
            return _blank(m)

        text = _COMMENT_RE.sub(lambda m: m.group(0) if m.group(0).startswith('"') else _blank(m), self.src)
        text = _LINE_DIRECTIVE_RE.sub(line_directive, text)
        self._nl = [i for i, c in enumerate(text) if c == "\n"] if len(text) < 1 << 16 else \
            [m.start() for m in re.finditer("\n", text)]
        if mod.version is None and mod.target is None and ".entry" not in text and ".func" not in text:
            raise InputError("input is not PTX: no .version/.target directive and no .entry/.func; "
                             "pass the .ptx text that Triton emits (compiled.asm['ptx'])")

        func: Optional[Function] = None
        scope_stack: list[int] = []
        scope_counter = 0
        reg_names: set[str] = set()
        operand_depth = 0
        buf_start = 0
        skip_until_close = False
        n = len(text)
        for m in _SPLIT_RE.finditer(text):
            ch = m.group()
            if skip_until_close:
                if ch == "}":
                    skip_until_close = False
                    buf_start = m.end()
                continue
            if ch == "{":
                if operand_depth:
                    operand_depth += 1
                    continue
                piece = text[buf_start:m.start()]
                labels, rest, rest_off = self._strip_labels(piece, buf_start)
                body = rest.strip()
                if body == "" or (body.startswith(".") and "=" not in body):
                    if body.startswith(".section"):
                        skip_until_close = True
                        continue
                    if body:  # a function header
                        func = self._function_header(body, self._line_of(rest_off + len(rest) - len(rest.lstrip())))
                        mod.functions.append(func)
                        scope_stack = [0]
                        scope_counter = 0
                        reg_names = set()
                    else:
                        if func is not None:
                            for name, off in labels:
                                self._add_label(func, name, off, scope_stack)
                        scope_counter += 1
                        scope_stack.append(scope_counter)
                    buf_start = m.end()
                else:
                    operand_depth = 1
                continue
            if ch == "}":
                if operand_depth:
                    operand_depth -= 1
                    continue
                piece = text[buf_start:m.start()]
                if func is not None:
                    labels, rest, _ = self._strip_labels(piece, buf_start)
                    for name, off in labels:
                        self._add_label(func, name, off, scope_stack)
                    if rest.strip():
                        self._statement(func, rest, buf_start + (len(piece) - len(rest)), scope_stack, reg_names)
                if len(scope_stack) > 1:
                    scope_stack.pop()
                elif func is not None:
                    func.end_line = self._line_of(m.start())
                    self._finish(func)
                    func = None
                buf_start = m.end()
                continue
            # ';'
            if operand_depth:
                continue
            piece = text[buf_start:m.start()]
            buf_start = m.end()
            if func is None:
                s = piece.strip()
                if s:
                    if _FUNC_HEAD_RE.search(s) and (".entry" in s or ".func" in s):
                        continue  # prototype / extern declaration without a body
                    mod.globals.append(Directive(s.split()[0], s, self._line_of(m.start())))
                continue
            labels, rest, rest_off = self._strip_labels(piece, m.start() - len(piece))
            lbl_key = None
            for name, off in labels:
                lbl_key = self._add_label(func, name, off, scope_stack)
            if rest.strip():
                self._statement(func, rest, rest_off, scope_stack, reg_names, label_key=lbl_key)
        if func is not None:  # unterminated body: keep what we have
            func.end_line = self._line_of(n)
            self._finish(func)
        if not mod.functions and mod.version is None:
            raise InputError("input is not PTX: found no .entry or .func")
        return mod

    def _strip_labels(self, piece: str, offset: int) -> tuple[list[tuple[str, int]], str, int]:
        labels = []
        pos = 0
        while True:
            m = _LABEL_RE.match(piece, pos)
            if not m:
                break
            labels.append((m.group(1), offset + m.start(1)))
            pos = m.end()
        return labels, piece[pos:], offset + pos

    def _add_label(self, func: Function, name: str, offset: int, scope_stack: list[int]) -> str:
        scope = scope_stack[-1] if scope_stack else 0
        key = name if scope == 0 else f"{name}#{scope}"
        lab = Label(name, key, self._line_of(offset), scope)
        func.labels[key] = lab
        func.statements.append(lab)
        return key

    def _function_header(self, body: str, line: int) -> Function:
        m = _FUNC_HEAD_RE.search(body)
        if not m:
            raise InputError(f"line {line}: cannot parse function header {body[:80]!r}")
        kind, _ret, name, params, tail = m.groups()
        func = Function(name=name, is_entry=(kind == "entry"), line=line)
        for p in split_top_level(params or ""):
            pm = _PARAM_RE.match(p)
            if pm:
                attrs = tuple(a for a in pm.group(1).split() if a)
                ty = next((a[1:] for a in attrs if a[1:] in PTX_TYPES), "")
                count = int(pm.group(3)[1:-1] or 0) if pm.group(3) else 1
                func.params.append(Param(pm.group(2), ty, attrs, count=count))
        for dm in re.finditer(r"\.(\w+)((?:\s+[\d,\s]+)?)", tail or ""):
            dname, args = dm.group(1), dm.group(2).strip()
            if dname == "explicitcluster" or dname == "noreturn":
                func.directives[dname] = True
            else:
                func.directives[dname] = tuple(int(x) for x in re.findall(r"\d+", args))
        return func

    def _statement(self, func: Function, rest: str, offset: int, scope_stack: list[int], reg_names: set[str],
                   label_key: Optional[str] = None) -> None:
        lead = len(rest) - len(rest.lstrip())
        line = self._line_of(offset + lead)
        s = rest.strip()
        scope = scope_stack[-1] if scope_stack else 0
        if s.startswith("."):
            name = re.match(r"\.[\w:]+", s).group(0) if re.match(r"\.[\w:]+", s) else s.split()[0]
            args = s[len(name):].strip()
            if name == ".reg":
                self._reg_decl(func, s, line, scope, reg_names)
            elif name == ".branchtargets" and label_key is not None:
                func.branch_tables[label_key] = tuple(t.strip() for t in args.split(",") if t.strip())
            elif name in (".maxnreg", ".reqntid", ".maxntid", ".reqnctapercluster", ".minnctapersm",
                          ".maxclusterrank", ".explicitcluster"):
                func.directives[name[1:]] = True if name == ".explicitcluster" else \
                    tuple(int(x) for x in re.findall(r"\d+", args))
            func.statements.append(Directive(name[1:], args, line, scope, label_key))
            return
        guard = None
        if s.startswith("@"):
            gm = re.match(r"@\s*(!?)\s*(%?[\w$]+)\s*", s)
            if gm:
                guard = Guard(gm.group(2), bool(gm.group(1)))
                s = s[gm.end():]
        parts = s.split(None, 1)
        tok = parts[0]
        ops_text = parts[1] if len(parts) > 1 else ""
        opcode, mods, types = self._split_opcode(tok)
        operands = tuple(self._operand(o, reg_names) for o in split_top_level(ops_text))
        ins = Instruction(opcode, mods, types, operands, guard, line, " ".join(rest.split()), tok, scope)
        func.statements.append(ins)

    def _reg_decl(self, func: Function, s: str, line: int, scope: int, reg_names: set[str]) -> None:
        m = _REGDECL_RE.match(s)
        if not m:
            return
        ty = m.group(2)
        for item in split_top_level(m.group(3)):
            im = re.match(r"^([%\w$]+)\s*(?:<\s*(\d+)\s*>)?", item)
            if im:
                cnt = int(im.group(2)) if im.group(2) else None
                func.registers.append(RegDecl(ty, im.group(1), cnt, line, scope))
                if cnt is None:
                    reg_names.add(im.group(1))
                elif not im.group(1).startswith("%"):  # `a<14>` declares a0 .. a13 (%-names are registers anyway)
                    reg_names.update(f"{im.group(1)}{i}" for i in range(cnt))

    def _finish(self, func: Function) -> None:
        """Resolve labels (innermost scope first), compute defs/uses, build basic blocks and the CFG."""
        # scope parents: scopes are numbered in order of opening; record parent chain from statements
        parents: dict[int, int] = {0: 0}
        # Recover nesting from the order of scope ids seen: a scoped label/instruction's chain is its scope
        # then function scope. Inline-asm scopes in LLVM output are never nested, so depth 2 suffices; for
        # nested scopes we fall back to the function scope, which still resolves uniquely named labels.
        label_names: dict[str, list[Label]] = {}
        for lab in func.labels.values():
            label_names.setdefault(lab.name, []).append(lab)
        instrs = [s for s in func.statements if isinstance(s, Instruction)]
        table_keys = set(func.branch_tables)

        def resolve(name: str, scope: int) -> Optional[str]:
            cands = label_names.get(name)
            if not cands:
                return None
            for lab in cands:
                if lab.scope == scope:
                    return lab.key
            for lab in cands:
                if lab.scope == parents.get(scope, 0) or lab.scope == 0:
                    return lab.key
            return cands[0].key

        for i, ins in enumerate(instrs):
            ins.index = i
            # operands naming labels become kind="label" with the resolved key
            if ins.opcode in ("bra", "brx") or any(o.kind == "sym" and o.name in label_names for o in ins.operands):
                new_ops = []
                for o in ins.operands:
                    if o.kind == "sym" and o.name in label_names:
                        key = resolve(o.name, ins.scope)
                        o = Operand("label", o.text, name=key)
                    new_ops.append(o)
                ins.operands = tuple(new_ops)
            if ins.opcode == "bra":
                ins.targets = tuple(o.name for o in ins.operands if o.kind == "label")
            elif ins.opcode == "brx":
                tabs = [o.name for o in ins.operands if o.kind == "label" and o.name in table_keys]
                if tabs:
                    tab = func.branch_tables[tabs[0]]
                    ins.targets = tuple(k for k in (resolve(t, ins.scope) for t in tab) if k)
            ins.defs, ins.uses = _defs_uses(ins)
        func.instructions = instrs
        build_cfg(func)


def _defs_uses(ins: Instruction) -> tuple[tuple[str, ...], tuple[str, ...]]:
    ops = ins.operands
    defs: list[str] = []
    uses: list[str] = []
    if ops and ins.opcode not in _NO_DEF and not (ins.is_tcgen05 and ins.opcode != "tcgen05.ld") \
            and ops[0].kind in ("reg", "vec", "pair"):
        first = ops[0]
        defs = [r for r in first.regs()]
        rest = ops[1:]
    else:
        rest = ops
    for o in rest:
        uses.extend(o.regs())
    if ins.guard is not None:
        uses.append(ins.guard.reg)
    return tuple(defs), tuple(uses)
