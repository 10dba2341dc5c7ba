"""Tutorial 06: persistent GEMMs with Cluster Launch Control (CLC), static vs CLC, on the CPU.

    python tutorials/06_clc_persistent.py

A static persistent kernel launches one program per SM and program p takes tiles p, p + P, p + 2P, ...; when tiles
differ in cost (a ragged MoE grouped GEMM) or SMs are busy, some programs finish late. With CLC (sm_100a/sm_103a)
the launch has one program per tile; a running program, after its tile, cancels a program that has not started
and takes its tile (`clusterlaunchcontrol.try_cancel`), so tiles flow to whichever SM is free.

What it shows:
1. One kernel source, two targets: the CLC round trip in the sm_100a PTX and SASS (UGETNEXTWORKID), none on sm_90a.
2. The ragged grouped GEMM in the emulator with 3 free SMs, all fast and with one slowed to a quarter: the
   static schedule vs CLC as a picture of which worker ran which tile, the emulated time (scheduling rounds), and
   the results against torch. With equal SMs CLC only adds its round trips; with a slow SM the static schedule
   waits for it while CLC gives it fewer tiles.
3. The verifier's CLC protocol check on the emitted PTX.
"""
from __future__ import annotations

import math
import re

import torch

import bwtriton
import bwtriton.emu as emu
from bwtriton.emu import GridSchedule
from bwtriton.kernels import grouped_matmul as gm
from bwtriton.report import wrap
from bwtriton.verify import verify_ptx

GROUP_ROWS = [300, 20, 0, 140, 60]   # tokens per expert: ragged, one expert empty
N, K = 128, 64
WORKERS = 3                          # SMs free for this launch (the rest busy elsewhere)
SLOW = (1.0, 1.0, 0.25)              # ... and one of them time-shared with another kernel
QUANTUM = 200                        # warp-instructions per emulated scheduling round


def compile_for(target: str):
    return bwtriton.compile(gm.grouped_matmul_kernel, signature=gm.signature("bf16"), target=target,
                            constexprs=gm.constexprs(target))


def show_code(sm100, sm90) -> None:
    print("1. the same grouped_matmul_kernel source")
    ptx = sm100.asm["ptx"]
    for pat in (r"clusterlaunchcontrol\.try_cancel\S*", r"clusterlaunchcontrol\.query_cancel\S*",
                r"mbarrier\.arrive\.expect_tx\S* _, \[bwclc_bar\], \d+", r"tcgen05\.mma\S*"):
        for op in sorted(set(re.findall(pat, ptx))):
            print(f"   sm_100a PTX : {op}")
    sass = sorted(set(re.findall(r"UGETNEXTWORKID\.\w+", sm100.asm["sass"])))
    print(f"   sm_100a SASS: {', '.join(sass)}")
    print(f"   sm_90a  PTX : clusterlaunchcontrol present: {'clusterlaunchcontrol' in sm90.asm['ptx']} "
          "(static persistent loop over tl.num_programs)")


def problem():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(sum(GROUP_ROWS), K, generator=g).bfloat16()
    b = torch.randn(len(GROUP_ROWS), K, N, generator=g).bfloat16()
    return a, b


def emulate(compiled, grid: int, a, b, sched: GridSchedule) -> torch.Tensor:
    rows, tiles = gm.group_offsets(GROUP_ROWS, N)
    c = torch.zeros(a.shape[0], N, dtype=torch.bfloat16)
    emu.run(compiled, grid, a, b, c, rows, tiles, len(GROUP_ROWS), N, K, a.stride(0), b.stride(0), b.stride(1),
            c.stride(0), grid_schedule=sched)
    return c


def tile_labels() -> list[str]:
    """'g<group>' for every tile, in tile order."""
    _, tiles = gm.group_offsets(GROUP_ROWS, N)
    t = tiles.tolist()
    return [f"g{g}" for g in range(len(GROUP_ROWS)) for _ in range(t[g + 1] - t[g])]


def picture(title: str, by_worker: dict[int, list[int]], labels: list[str]) -> None:
    print(f"   {title}")
    for w in sorted(by_worker):
        cells = " ".join(f"t{t:02d}:{labels[t]}" for t in by_worker[w])
        print(f"     worker {w}: {cells}")


def compare(sm100_static, sm100_clc) -> None:
    a, b = problem()
    ref = gm.reference(a, b, GROUP_ROWS)
    labels = tile_labels()
    num_tiles = len(labels)
    print(wrap(f"\n2. {num_tiles} tiles of 128x64 over experts of {GROUP_ROWS} rows, {WORKERS} free SMs "
               f"(emulated; time = scheduling rounds of {QUANTUM} warp-instructions)", indent="   "))
    results = []
    for speeds, what in ((None, "all SMs free"), (SLOW, f"worker 2 shared with another kernel (speed {SLOW[2]})")):
        print(f"   -- {what}")
        # static: WORKERS programs, program p takes tiles p, p + WORKERS, ... whatever its SM's speed
        static = GridSchedule(workers=WORKERS, quantum=QUANTUM, speeds=speeds)
        results.append(("static", emulate(sm100_static, WORKERS, a, b, static)))
        picture(f"static persistent: {static.rounds} rounds", {w: list(range(w, num_tiles, WORKERS))
                                                               for w in range(WORKERS)}, labels)
        # CLC: one program per tile; the workers start some of them and steal the rest as they finish
        clc = GridSchedule(workers=WORKERS, quantum=QUANTUM, speeds=speeds, seed=5)
        results.append(("CLC", emulate(sm100_clc, num_tiles, a, b, clc)))
        picture(f"CLC (launch order shuffled, seed 5): {clc.rounds} rounds, {len(clc.stolen)} tiles stolen",
                {w: [c[0] for c in cs] for w, cs in clc.tiles_of_worker().items()}, labels)
    top = ref.abs().max().item()
    ulp = 2.0 ** (math.floor(math.log2(top)) - 7)  # bf16 spacing at the largest |C|
    worst = max((c.double() - ref).abs().max().item() for _, c in results)
    print(f"   all 4 runs: max |C - torch| = {worst:.3g} (the bf16 output's ulp at max |C| = {top:.1f} is {ulp:.3g})")


def check(sm100) -> None:
    rep = verify_ptx(sm100.asm["ptx"])
    clc = [f for f in rep.findings if f.check.startswith("clc-")]
    print(f"\n3. verifier on the sm_100a PTX: {len(clc)} CLC finding(s) (rules C1-C5, docs/clc.md); "
          f"{rep.counts['error']} error(s) overall")


def main() -> None:
    sm100 = compile_for("sm_100a")
    sm90 = compile_for("sm_90a")
    show_code(sm100, sm90)
    static = bwtriton.compile(gm.grouped_matmul_kernel, signature=gm.signature("bf16"), target="sm_100a",
                              constexprs={**gm.constexprs("sm_100a"), "USE_CLC": False})
    compare(static, sm100)
    check(sm100)


if __name__ == "__main__":
    main()
