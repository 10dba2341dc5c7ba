"""The emulated B200's state and how it runs: a launch's clusters, CTAs and warps (launch.py, warp.py), their
memories (memory.py, cells.py), the asynchronous engine (async_engine.py), kernel images (image.py) and the
closures they run (program.py), the warp scheduler (scheduler.py), the grid scheduler (grid.py) and gangs of CTAs
run together (gang.py). No instruction family is imported here: their semantics come in through the ISA table
(`bwtriton.emu.isa.dispatch`), and the state they keep as their declarations, from which state.py builds the
Warp, CTA and Cluster classes (`bwtriton.emu.isa.MACHINE`)."""
