"""The verifier's one hard dependency: the z3 SMT solver (`pip install z3-solver`).

Without z3 the path, lane and loop checks cannot prove that two facts exclude each other, so they would keep
infeasible paths and report false errors (a plain pipelined GEMM gets a false P11). The verifier therefore
refuses to run without it, with one error that says what to install, instead of a report that cannot be
trusted."""
from __future__ import annotations

from bwtriton.errors import BwTritonError
from bwtriton.ptx import smt


class SolverMissingError(BwTritonError):
    """The z3 solver the verifier needs is not importable."""


def require_solver() -> None:
    """Raise `SolverMissingError` when z3 cannot be imported."""
    if smt.z3 is None:
        raise SolverMissingError(
            "the tcgen05 verifier needs the z3 SMT solver, which cannot be imported in this Python: install it "
            "with `pip install z3-solver` (without it the verifier cannot rule out infeasible paths and would "
            "report false errors)")


__all__ = ["SolverMissingError", "require_solver"]
