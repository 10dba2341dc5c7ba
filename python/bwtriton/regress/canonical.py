"""Canonical text of compiler stages, for stage hashes that change when the code changes and only then.

Triton 3.6 emits some stages nondeterministically (measured: the TTGIR of a plain `num_ctas=2` matmul had 3
different texts in 3 compiles of one process, and its LLIR/PTX 2): layout propagation creates one copy of an
index computation per layout and visits them in hash-map order, so *the same operations* come out in a different
order with different value names (`%rm_1` holds the #blocked copy in one compile, the #blocked1 copy in the next),
and the shuffle flows down into the LLVM IR and the PTX register numbering.

The canonical form therefore
* names every value by what computes it, not by its spelling: a value's token is a hash of its defining line with
  that line's operands already replaced by their tokens (so data flow is kept: swapping two operands changes it);
* sorts each run of consecutive side-effect-free operations (arithmetic, index and layout ops): their relative
  order is not behaviour. Operations with effects (loads, stores, barriers, fences, MMAs, branches) and lines that
  open or close regions keep their place and split the runs, so moving a barrier past a store still shows.
"""
from __future__ import annotations

import hashlib
import re
from typing import Callable

# --------------------------------------------------------------------------------------------------------------
# Which operations are side-effect-free (their order within a run does not matter)
# --------------------------------------------------------------------------------------------------------------

_MLIR_PURE_PREFIXES = ("arith.", "math.", "ub.poison", "llvm.mlir.constant", "llvm.mlir.undef", "llvm.mlir.zero")
_MLIR_PURE_OPS = {
    "tt.make_range", "tt.splat", "tt.expand_dims", "tt.broadcast", "tt.addptr", "tt.reshape", "tt.trans",
    "tt.join", "tt.split", "tt.bitcast", "tt.fp_to_fp", "tt.int_to_ptr", "tt.ptr_to_int", "tt.get_program_id",
    "tt.get_num_programs", "tt.mulhiui", "tt.clampf", "tt.precise_sqrt", "tt.precise_divf", "tt.unsplat",
    "ttg.convert_layout", "ttg.memdesc_index", "ttg.memdesc_subslice", "ttg.memdesc_trans",
    "ttg.memdesc_reshape", "ttg.memdesc_reinterpret", "ttng.tmem_subslice"}
_LLVM_PURE_OPS = {
    "add", "sub", "mul", "udiv", "sdiv", "urem", "srem", "shl", "lshr", "ashr", "and", "or", "xor", "icmp",
    "fcmp", "select", "getelementptr", "zext", "sext", "trunc", "bitcast", "fadd", "fsub", "fmul", "fdiv", "frem",
    "fneg", "fpext", "fptrunc", "fptoui", "fptosi", "uitofp", "sitofp", "inttoptr", "ptrtoint", "insertelement",
    "extractelement", "shufflevector", "insertvalue", "extractvalue", "addrspacecast", "freeze", "phi"}
_PTX_PURE_OPS = {
    "add", "sub", "mul", "mad", "fma", "div", "rem", "neg", "abs", "min", "max", "shl", "shr", "shf", "and", "or",
    "xor", "not", "lop3", "bfe", "bfi", "prmt", "mov", "cvt", "cvta", "setp", "selp", "set", "slct", "popc",
    "clz", "brev", "sad", "copysign", "ex2", "lg2", "rcp", "sqrt", "rsqrt", "sin", "cos", "tanh", "mul24", "mad24",
    "dp4a", "dp2a", "testp", "isspacep"}
#: PTX instructions whose first operand is read, not written (everything else writes its first operand).
_PTX_NO_DEST = ("st.", "stmatrix", "bar.", "barrier.", "fence.", "bra", "ret", "exit", "red.", "cp.", "prefetch",
                "tcgen05.mma", "tcgen05.commit", "tcgen05.cp", "tcgen05.shift", "tcgen05.st", "tcgen05.wait",
                "tcgen05.dealloc", "tcgen05.relinquish", "tcgen05.fence", "wgmma.fence", "wgmma.commit",
                "wgmma.wait", "mbarrier.init", "mbarrier.inval", "mbarrier.expect_tx", "mbarrier.arrive_drop",
                "elect", "trap", "griddepcontrol", "setmaxnreg", "membar", "call", "@")

# --------------------------------------------------------------------------------------------------------------
# Per-dialect line readers: (names the line defines, the rest of the line, is it side-effect-free)
# --------------------------------------------------------------------------------------------------------------

_MLIR_LHS = re.compile(r"^\s*((?:%[\w.$-]+(?::\d+)?)(?:\s*,\s*%[\w.$-]+(?::\d+)?)*)\s*=\s*(?=\S)")
_MLIR_NAME = re.compile(r"%[\w.$-]+")
_LLVM_LHS = re.compile(r"^\s*(%[\w.$-]+)\s*=\s*")
_PTX_REG = re.compile(r"%(?:r|rd|p|f|fd|rs|h|hh|b|rq)\d+\b")
_PTX_INSTR = re.compile(r"^\s*(@!?%\w+\s+)?([a-z][\w.:]*)\s*(.*)$")


def _mlir_line(line: str) -> tuple[list[str], str, bool]:
    m = _MLIR_LHS.match(line)
    if not m:
        return [], line.strip(), False
    names = [n.split(":")[0].strip() for n in m[1].split(",")]
    rest = line[m.end():].strip()
    op = rest.split(" ", 1)[0].split("(", 1)[0].strip('"')
    pure = (op.startswith(_MLIR_PURE_PREFIXES) or op in _MLIR_PURE_OPS) and not rest.endswith("{")
    return names, rest, pure


def _llvm_line(line: str) -> tuple[list[str], str, bool]:
    line = re.sub(r",\s*!dbg\s+!\d+", "", line.split(";", 1)[0]).rstrip()
    m = _LLVM_LHS.match(line)
    if not m:
        return [], line.strip(), False
    rest = line[m.end():].strip()
    op = rest.replace("tail ", "").split(" ", 1)[0]
    return [m[1]], rest, op in _LLVM_PURE_OPS


def _ptx_line(line: str) -> tuple[list[str], str, bool]:
    text = line.strip()
    m = _PTX_INSTR.match(text)
    if not m or text.startswith(("//", ".", "$", "{", "}")) or not text.endswith(";"):
        return [], text, False
    opcode, operands = m[2], m[3]
    if opcode.startswith(_PTX_NO_DEST):
        return [], text, False
    first = operands[:operands.find("}") + 1] if operands.startswith("{") else operands.split(",", 1)[0]
    dests = _PTX_REG.findall(first)
    rest = (m[1] or "") + opcode + " " + operands[len(first):].lstrip(", \t")
    return dests, rest, opcode.split(".", 1)[0] in _PTX_PURE_OPS


# --------------------------------------------------------------------------------------------------------------
# The canonical form
# --------------------------------------------------------------------------------------------------------------

def _token(*parts: object) -> str:
    return hashlib.sha1("|".join(map(str, parts)).encode()).hexdigest()[:10]


def canonical_text(text: str, reader: Callable[[str], tuple[list[str], str, bool]], names: re.Pattern,
                   unseen: str) -> str:
    """`text` with every value named by its computation and each run of side-effect-free lines sorted.
    `reader` splits a line, `names` finds value names, `unseen` says what a name used before any definition
    becomes: 'arg' (MLIR block/loop/function arguments: defined where first seen) or a fixed token."""
    parsed = [reader(line) for line in text.splitlines()]
    defined_later = {n for defs, _, _ in parsed for n in defs}
    tokens: dict[str, str] = {}
    out: list[tuple[str, bool]] = []
    for defs, rest, pure in parsed:
        args: list[str] = []

        def use(m: re.Match) -> str:
            name = m[0]
            if name in tokens:
                return tokens[name]
            if unseen != "arg" or name in defined_later:
                return unseen if unseen != "arg" else "%fwd"  # used before its definition (a loop back edge)
            args.append(name) if name not in args else None
            return f"$arg{args.index(name)}"

        canon = names.sub(use, rest)
        line_token = _token(canon)
        for k, name in enumerate(defs):
            tokens[name] = f"%{_token(line_token, k)}"
        for k, name in enumerate(args):
            tokens[name] = f"%{_token(line_token, 'arg', k)}"
        out.append((f"{len(defs)} = {canon}" if defs else canon, pure))
    return "\n".join(_sorted_pure_runs(out))


def _sorted_pure_runs(lines: list[tuple[str, bool]]) -> list[str]:
    result, run = [], []
    for text, pure in lines:
        if pure:
            run.append(text)
            continue
        result += sorted(run) + [text]
        run = []
    return result + sorted(run)


def canonical_mlir(text: str) -> str:
    """TTIR/TTGIR (locations already removed) in canonical form."""
    return canonical_text(text, _mlir_line, _MLIR_NAME, "arg")


def canonical_llvm(text: str) -> str:
    """LLVM IR in canonical form; basic-block labels become their position (`%L3`), which no reordering within
    a block changes."""
    labels = re.findall(r"^([\w.$-]+):", text, flags=re.M)
    for k, label in enumerate(labels):
        text = re.sub(rf"(?<![\w.$-])%{re.escape(label)}(?![\w.$-])", f"%L{k}", text)
        text = re.sub(rf"^{re.escape(label)}:", f"L{k}:", text, flags=re.M)
    return canonical_text(text, _llvm_line, re.compile(r"%(?!L\d+\b)[\w.$-]+"), "arg")


def canonical_ptx(text: str) -> str:
    """PTX in canonical form: registers named by the instruction that last wrote them (PTX registers are not
    SSA; a read binds to the textually latest write), register declarations without their counts."""
    text = re.sub(r"(%\w+)<\d+>", r"\1<>", text)
    return canonical_text(text, _ptx_line, _PTX_REG, "%fwd")
