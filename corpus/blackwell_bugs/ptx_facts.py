"""Text-level facts about a kernel's PTX that the corpus table and tests state: which tcgen05.mma / TMA stores
follow a generic-proxy `st.shared` with no `fence.proxy.async` in between, in the order the instructions are
written (inside a loop the walk wraps around the back edge, as the next iteration would run). This is a plain
reading of the text, not a proof: the verifier decides whether the bytes are the same (rule P15)."""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

_LABEL = re.compile(r"^\s*(\$L__BB\d+_\d+):")
_BRANCH = re.compile(r"\bbra(?:\.uni)?\s+(\$L__BB\d+_\d+)\s*;")
_MMA = re.compile(r"\btcgen05\.mma\b")
_TMA_STORE = re.compile(r"\bcp(?:\.reduce)?\.async\.bulk\.tensor\.\w+\.global\.shared")
_ST_SHARED = re.compile(r"\bst\.shared\b")
_FENCE = re.compile(r"\bfence\.proxy\.async\b")


@dataclass
class PtxFacts:
    """Counts of the instructions the corpus cases turn on, and the unfenced async-proxy readers."""

    mma: int = 0
    mma_sync: int = 0
    #: distinct `mma.sync` forms (shape, kind, types) -> count: which tensor-core path a consumer GPU takes
    mma_sync_forms: dict[str, int] = field(default_factory=dict)
    fence_proxy_async: int = 0
    bar_sync: int = 0
    mbarrier_arrive: int = 0
    tma_store: int = 0
    loops: int = 0
    #: tcgen05.mma lines inside a loop reached from a st.shared with no fence.proxy.async between (text order)
    unfenced_mma_in_loop: list[int] = field(default_factory=list)
    #: TMA stores reached from a st.shared with no fence.proxy.async between (text order)
    unfenced_tma_store: list[int] = field(default_factory=list)
    #: (tcgen05.ld line, tcgen05.st line): a TMEM store follows a TMEM load with no CTA barrier or mbarrier wait
    #: between. Harmless when one warp does both (its tcgen05.wait::ld orders them); with 8 warps, two warps share
    #: each lane quarter, and the store of one can overwrite what the other has not read yet.
    tmem_st_after_ld_unsynced: list[tuple[int, int]] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def _loops(lines: list[str]) -> list[tuple[int, int]]:
    """(header index, back-edge index) for every backward branch to a label."""
    labels = {}
    out = []
    for i, line in enumerate(lines):
        m = _LABEL.match(line)
        if m:
            labels[m.group(1)] = i
        b = _BRANCH.search(line)
        if b and b.group(1) in labels and labels[b.group(1)] < i:
            out.append((labels[b.group(1)], i))
    return out


def _unfenced(lines: list[str], at: int, start: int, end: int, wrap: bool) -> bool:
    """Walking back from `at` to `start` (then from `end`, once, when `wrap`): a st.shared before any fence."""
    order = list(range(at - 1, start - 1, -1))
    if wrap:
        order += list(range(end, at, -1))
    for i in order:
        if _FENCE.search(lines[i]):
            return False
        if _ST_SHARED.search(lines[i]):
            return True
    return False


_SYNC = re.compile(r"\b(?:bar|barrier)\.(?:cta\.)?sync\b|\bmbarrier\.try_wait\b")


def _st_after_ld(lines: list[str]) -> list[tuple[int, int]]:
    """(ld, st) line pairs, 1-based: each tcgen05.st and the latest tcgen05.ld before it with no sync between."""
    out, last_ld = [], None
    for i, line in enumerate(lines):
        code = line.split("//", 1)[0]
        if _SYNC.search(code):
            last_ld = None
        elif re.search(r"\btcgen05\.ld\b", code):
            last_ld = i + 1
        elif re.search(r"\btcgen05\.st\b", code) and last_ld is not None:
            out.append((last_ld, i + 1))
    return out


def ptx_facts(ptx: str) -> PtxFacts:
    """The facts of one PTX text (line numbers are 1-based, as in the verifier's findings)."""
    lines = ptx.splitlines()
    loops = _loops(lines)
    facts = PtxFacts(loops=len(loops), tmem_st_after_ld_unsynced=_st_after_ld(lines))
    for i, line in enumerate(lines):
        code = line.split("//", 1)[0]
        facts.fence_proxy_async += bool(_FENCE.search(code))
        facts.bar_sync += bool(re.search(r"\b(?:bar|barrier)\.sync\b", code))
        facts.mbarrier_arrive += bool(re.search(r"\bmbarrier\.arrive\b", code))
        form = re.search(r"\bmma\.sync\.aligned\.([\w.:]+)", code)
        if form:
            facts.mma_sync += 1
            facts.mma_sync_forms[form.group(1)] = facts.mma_sync_forms.get(form.group(1), 0) + 1
        if _TMA_STORE.search(code):
            facts.tma_store += 1
            if _unfenced(lines, i, 0, i, wrap=False):
                facts.unfenced_tma_store.append(i + 1)
        if _MMA.search(code):
            facts.mma += 1
            inner = [lp for lp in loops if lp[0] < i < lp[1]]
            if inner:
                start, end = max(inner)  # the innermost loop holding it
                if _unfenced(lines, i, start, end, wrap=True):
                    facts.unfenced_mma_in_loop.append(i + 1)
    return facts
