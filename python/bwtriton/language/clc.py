"""Cluster Launch Control (CLC) for `@triton.jit` kernels on Triton 3.6: persistent kernels that steal the tile of
a cluster that has not started yet (`clusterlaunchcontrol.try_cancel`, sm_100a / sm_103a).

Use (see docs/clc.md)::

    from bwtriton.language import clc

    @triton.jit
    def kernel(..., num_tiles, USE_CLC: tl.constexpr, NUM_CTAS: tl.constexpr):
        tile = tl.program_id(0)
        while tile < num_tiles:
            ...                                   # one output tile
            tile = clc.next_tile(tile, num_tiles, USE_CLC, NUM_CTAS)

    grid, use_clc = clc.launch_grid(num_tiles, target)     # host side

With ``USE_CLC`` the host launches one cluster per tile and every running cluster, after its tile, cancels a
cluster that has not been launched yet and takes that cluster's tile; when the cancel fails (nothing left to
steal) `next_tile` returns ``num_tiles`` and the loop ends. Without CLC (Hopper, Ampere, sm_120a here) the same
source is the static persistent schedule: the host launches ``min(num_tiles, NUM_SMS)`` programs and
`next_tile` strides by ``tl.num_programs(0)``.

`make_persistent` (what ``bwtriton.compile(..., clc=True)`` uses) writes that loop into a one-tile-per-program
kernel; `gluon_next_tile` is `next_tile` for `@gluon.jit` kernels.

Why inline PTX (`tl.inline_asm_elementwise`) and not a marker op lowered by a pass: Triton 3.6 has no user
shared-memory allocation in `tl`, and no op whose lowering we could hook for an mbarrier + a 16-byte response
buffer. PTX lets a `{ }` scope declare `.shared` variables, so one asm block owns its buffer and mbarrier and runs
the whole protocol: init the mbarrier, sync, one elected thread arms it with `expect_tx(16)` and issues the
request, every thread waits on phase 0, reads the response and decodes it with the canonical
`query_cancel.is_canceled` / `get_first_ctaid::x`, then the CTA syncs and the elected thread invalidates the
mbarrier, so the next call starts from a fresh phase 0. The cost is that the request does not overlap the tile's
work (one CLC round trip per tile); what it buys is a protocol that cannot be half-used by a kernel.

Cluster-aware: with ``NUM_CTAS > 1`` (a cluster of CTAs per program, as ``num_ctas=2`` / 2-CTA MMA kernels use)
each CTA arms its own mbarrier, a cluster barrier makes sure all are armed-able (initialised) before CTA rank 0
alone issues the `.multicast::cluster::all` request, and every CTA reads the same response from its own shared
memory, so all CTAs of the cluster agree on the stolen tile. The tile index is ``first_ctaid.x / NUM_CTAS``,
matching Triton 3.6, whose `tl.program_id(0)` is the cluster id when ``num_ctas > 1``.
"""
from __future__ import annotations

from typing import Optional

import triton
import triton.language as tl

from ..errors import InputError
from ..targets import Target, get_target

#: The response bytes the hardware writes; the mbarrier expects exactly this many transaction bytes.
RESPONSE_BYTES = 16


def supported(target: "str | Target") -> bool:
    """Whether `target` has Cluster Launch Control (datacenter Blackwell, sm_100a / sm_103a)."""
    return get_target(target).capability // 10 == 10


def launch_grid(num_tiles: int, target: "str | Target", num_sms: Optional[int] = None) -> tuple[int, bool]:
    """(programs to launch, USE_CLC) for a persistent kernel over `num_tiles` tiles on `target`.

    With CLC every tile gets its own program (running ones steal the rest); otherwise the static persistent
    schedule launches ``min(num_tiles, num_sms)`` programs (`num_sms` is required then)."""
    if num_tiles < 1:
        raise InputError(f"num_tiles must be >= 1, got {num_tiles}")
    if supported(target):
        return num_tiles, True
    if num_sms is None or num_sms < 1:
        raise InputError(f"{get_target(target).name} has no CLC: the static persistent schedule needs num_sms= "
                         "(the GPU's SM count, e.g. torch.cuda.get_device_properties(0).multi_processor_count)")
    return min(num_tiles, num_sms), False


def try_cancel_asm(num_ctas: int = 1, with_y: bool = False) -> str:
    """The PTX of one CLC round trip (see the module docstring). The last operand (``$1``, or ``$2`` with
    `with_y`) is the value returned when the cancel fails; ``$0`` receives the stolen cluster's x index (first
    CTA id x / cluster size) and, `with_y`, ``$1`` its y index (2-D grids)."""
    if num_ctas < 1:
        raise InputError(f"NUM_CTAS must be >= 1, got {num_ctas}")
    multicast = num_ctas > 1
    issue_pred = "%bwclc_issuer" if multicast else "%bwclc_lead"
    lines = [
        "{",
        ".shared .align 16 .b8 bwclc_resp[16];",
        ".shared .align 8 .b64 bwclc_bar;",
        ".reg .pred %bwclc_lead, %bwclc_rank0, %bwclc_issuer, %bwclc_done, %bwclc_ok;",
        ".reg .b32 %bwclc_tid, %bwclc_t, %bwclc_n;",
        ".reg .b64 %bwclc_lo, %bwclc_hi;",
        ".reg .b128 %bwclc_r;",
        "mov.u32 %bwclc_tid, %tid.x;",
        "setp.eq.u32 %bwclc_lead, %bwclc_tid, 0;",
        "@%bwclc_lead mbarrier.init.shared::cta.b64 [bwclc_bar], 1;",
        "fence.mbarrier_init.release.cluster;",
    ]
    if multicast:
        # every CTA's mbarrier must exist before rank 0's multicast response can complete on it
        lines += ["mov.u32 %bwclc_n, %cluster_ctarank;",
                  "setp.eq.u32 %bwclc_rank0, %bwclc_n, 0;",
                  "and.pred %bwclc_issuer, %bwclc_rank0, %bwclc_lead;",
                  "barrier.cluster.arrive.release.aligned;",
                  "barrier.cluster.wait.acquire.aligned;"]
    else:
        lines += ["bar.sync 0;"]
    form = ("clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes"
            + (".multicast::cluster::all" if multicast else "") + ".b128")
    lines += [
        f"@%bwclc_lead mbarrier.arrive.expect_tx.shared::cta.b64 _, [bwclc_bar], {RESPONSE_BYTES};",
        f"@{issue_pred} {form} [bwclc_resp], [bwclc_bar];",
        "bwclc_wait:",
        "mbarrier.try_wait.parity.shared::cta.b64 %bwclc_done, [bwclc_bar], 0;",
        "@!%bwclc_done bra bwclc_wait;",
        "ld.shared.v2.b64 {%bwclc_lo, %bwclc_hi}, [bwclc_resp];",
        "mov.b128 %bwclc_r, {%bwclc_lo, %bwclc_hi};",
        "clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 %bwclc_ok, %bwclc_r;",
        "clusterlaunchcontrol.query_cancel.get_first_ctaid::x.b32.b128 %bwclc_t, %bwclc_r;",
        "mov.u32 %bwclc_n, %cluster_nctaid.x;",
        "div.u32 %bwclc_t, %bwclc_t, %bwclc_n;",
        "selp.b32 $0, %bwclc_t, $2, %bwclc_ok;" if with_y else "selp.b32 $0, %bwclc_t, $1, %bwclc_ok;",
    ]
    if with_y:
        lines += ["clusterlaunchcontrol.query_cancel.get_first_ctaid::y.b32.b128 %bwclc_t, %bwclc_r;",
                  "selp.b32 $1, %bwclc_t, $2, %bwclc_ok;"]
    lines += [
        # all threads have read the response before the mbarrier is retired and a later call re-arms it
        "bar.sync 0;",
        "@%bwclc_lead mbarrier.inval.shared::cta.b64 [bwclc_bar];",
        "}",
    ]
    return "\n".join(lines)


# The asm text depends only on whether the program is a multi-CTA cluster (the tile index divides by
# %cluster_nctaid.x at run time), so two module-level constexprs serve every kernel.
_ASM_ONE_CTA = tl.constexpr(try_cancel_asm(1))
_ASM_CLUSTER = tl.constexpr(try_cancel_asm(2))
_ASM_ONE_CTA_XY = tl.constexpr(try_cancel_asm(1, with_y=True))
_ASM_CLUSTER_XY = tl.constexpr(try_cancel_asm(2, with_y=True))


@triton.jit
def steal(if_none, NUM_CTAS: tl.constexpr = 1):
    """One CLC round trip (every thread of the program must call it): the index of a cluster that had not
    started and is now this program's to process, or `if_none` when the cancel failed. sm_100a/sm_103a only."""
    if NUM_CTAS == 1:
        res = tl.inline_asm_elementwise(_ASM_ONE_CTA, "=r,r", [if_none.to(tl.int32)], dtype=tl.int32,
                                        is_pure=False, pack=1)
    else:
        res = tl.inline_asm_elementwise(_ASM_CLUSTER, "=r,r", [if_none.to(tl.int32)], dtype=tl.int32,
                                        is_pure=False, pack=1)
    return res


@triton.jit
def steal_xy(if_none, NUM_CTAS: tl.constexpr = 1):
    """`steal` for 2-D grids: (x, y) program ids of the stolen cluster, (if_none, if_none) when none."""
    if NUM_CTAS == 1:
        x, y = tl.inline_asm_elementwise(_ASM_ONE_CTA_XY, "=r,=r,r", [if_none.to(tl.int32)],
                                         dtype=(tl.int32, tl.int32), is_pure=False, pack=1)
    else:
        x, y = tl.inline_asm_elementwise(_ASM_CLUSTER_XY, "=r,=r,r", [if_none.to(tl.int32)],
                                         dtype=(tl.int32, tl.int32), is_pure=False, pack=1)
    return x, y


@triton.jit
def next_tile(tile, num_tiles, USE_CLC: tl.constexpr, NUM_CTAS: tl.constexpr = 1):
    """The next tile of a persistent loop ``while tile < num_tiles``: a stolen tile (``num_tiles`` when none is
    left) with CLC, else ``tile + tl.num_programs(0)`` (the static persistent schedule)."""
    if USE_CLC:
        nxt = steal(num_tiles, NUM_CTAS)
    else:
        nxt = tile + tl.num_programs(0)
    return nxt


# --- clc=True: a one-tile-per-program kernel rewritten into a CLC persistent loop -------------------------------
# Triton 3.6's Python bindings cannot restructure TTIR regions, so the rewrite is done on the kernel's source
# (Python AST) before Triton sees it: `tl.program_id(0/1)` become loop variables, the body runs in
# ``while x >= 0`` and ends with `steal_xy` (x = -1 once nothing is left). The grid the host launches is unchanged
# (one program per tile), which is exactly what CLC wants.
_TILE_NAMES = ("_bwclc_x", "_bwclc_y")


def _refuse(fn_name: str, why: str) -> InputError:
    return InputError(f"clc=True cannot make {fn_name} persistent: {why}. Write the persistent loop yourself "
                      "with bwtriton.language.clc.next_tile (docs/clc.md), or compile without clc=True")


class _ProgramIdRewriter:
    """Finds and replaces `<anything>.program_id(axis)` calls; refuses what the loop would change."""

    def __init__(self, fn_name: str):
        import ast
        self.ast = ast
        self.fn_name = fn_name
        self.axes: set[int] = set()

    def _axis(self, call) -> int:
        ast = self.ast
        args = list(call.args) + [k.value for k in call.keywords if k.arg == "axis"]
        if len(args) != 1 or not isinstance(args[0], ast.Constant) or args[0].value not in (0, 1, 2):
            raise _refuse(self.fn_name, f"tl.program_id at line {call.lineno} has a non-literal axis")
        if args[0].value == 2:
            raise _refuse(self.fn_name, "it uses tl.program_id(2); CLC persistence supports 1-D and 2-D grids")
        return args[0].value

    def check(self, tree) -> None:
        ast = self.ast
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "num_programs":
                raise _refuse(self.fn_name, f"it calls tl.num_programs (line {node.lineno}); in a persistent "
                                            "kernel the number of programs running is not the grid any more")
            called = getattr(node.func, "attr", getattr(node.func, "id", None)) if isinstance(node, ast.Call) else None
            if called in ("next_tile", "steal", "steal_xy"):
                raise _refuse(self.fn_name, f"it is already a CLC persistent kernel (clc.{called} at line "
                                            f"{node.lineno})")
            if isinstance(node, ast.Return):
                raise _refuse(self.fn_name, f"it returns early (line {node.lineno}); a return would end the "
                                            "persistent loop, not just this tile")

    def rewrite(self, tree):
        ast = self.ast
        outer = self

        class T(ast.NodeTransformer):
            def visit_Call(self, node):
                self.generic_visit(node)
                if isinstance(node.func, ast.Attribute) and node.func.attr == "program_id":
                    axis = outer._axis(node)
                    outer.axes.add(axis)
                    return ast.copy_location(ast.Name(_TILE_NAMES[axis], ast.Load()), node)
                return node
        return T().visit(tree)


def _helpers_using_program_ids(fn) -> list[str]:
    """Names of @jit functions the kernel references whose source calls program_id / num_programs."""
    from triton.runtime.jit import JITFunction
    out = []
    for name, val in fn.fn.__globals__.items():
        if isinstance(val, JITFunction) and val is not fn and name in fn.src and val.__module__ != __name__:
            if "program_id" in val.src or "num_programs" in val.src:
                out.append(name)
    return out


def make_persistent(fn, num_ctas: int = 1):
    """A new @triton.jit kernel: `fn` (one tile per program, 1-D or 2-D grid) as a CLC persistent loop.

    Same arguments and grid; on sm_100a/sm_103a each program, after its tile, steals the tile of a program that
    has not started. Raises `InputError` naming the reason when the rewrite would change the kernel's meaning:
    `tl.num_programs`, an early `return`, `tl.program_id(2)` or a non-literal axis, or a @jit helper that reads
    program ids itself."""
    import ast
    import linecache
    import sys
    import textwrap

    from triton.runtime.jit import JITFunction
    if not isinstance(fn, JITFunction):
        raise InputError(f"clc=True needs a @triton.jit kernel, got {fn!r}")
    name = fn.fn.__name__
    helpers = _helpers_using_program_ids(fn)
    if helpers:
        raise _refuse(name, f"the @jit helper(s) {', '.join(helpers)} read program ids themselves")
    tree = ast.parse(textwrap.dedent(fn.src))
    fdef = tree.body[0]
    rw = _ProgramIdRewriter(name)
    rw.check(fdef)
    fdef.decorator_list = []
    body = fdef.body
    doc = body[:1] if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else []
    rest = [rw.rewrite(stmt) for stmt in body[len(doc):]]
    if not rw.axes:
        raise _refuse(name, "it never reads tl.program_id, so every program would compute the same tile")
    fdef.name = f"{name}__clc"
    x, y = _TILE_NAMES
    prologue = (f"{x} = _bwclc_tl.program_id(0)\n{y} = _bwclc_tl.program_id(1)\n")
    steal = f"{x}, {y} = _bwclc.steal_xy({x} * 0 - 1, {int(num_ctas)})\n"
    loop = ast.parse(f"while {x} >= 0:\n    pass\n").body[0]
    loop.body = rest + ast.parse(steal).body
    fdef.body = doc + ast.parse(prologue).body + [loop]
    src = ast.unparse(ast.fix_missing_locations(tree)) + "\n"
    filename = f"<bwtriton clc=True: {name}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)  # inspect.getsource reads it
    scope = dict(fn.fn.__globals__)
    scope.update(_bwclc_tl=tl, _bwclc=sys.modules[__name__])
    exec(compile(src, filename, "exec"), scope)  # noqa: S102 - the user's own kernel, rewritten
    new = scope[fdef.name]
    new.__module__ = fn.fn.__module__
    return triton.jit(new)


# --- Gluon ------------------------------------------------------------------------------------------------------
# Gluon kernels cannot call @triton.jit functions; the same asm serves them through gl.inline_asm_elementwise.
try:
    from triton.experimental import gluon as _gluon
    from triton.experimental.gluon import language as _gl
except ImportError:  # pragma: no cover - a Triton without Gluon
    _gluon = None

if _gluon is not None:
    @_gluon.jit
    def gluon_next_tile(tile, num_tiles, USE_CLC: _gl.constexpr, NUM_CTAS: _gl.constexpr = 1):
        """`next_tile` for @gluon.jit kernels (same protocol, same static fallback)."""
        if USE_CLC:
            if NUM_CTAS == 1:
                nxt = _gl.inline_asm_elementwise(_ASM_ONE_CTA, "=r,r", [num_tiles], dtype=_gl.int32,
                                                 is_pure=False, pack=1)
            else:
                nxt = _gl.inline_asm_elementwise(_ASM_CLUSTER, "=r,r", [num_tiles], dtype=_gl.int32,
                                                 is_pure=False, pack=1)
        else:
            nxt = tile + _gl.num_programs(0)
        return nxt
