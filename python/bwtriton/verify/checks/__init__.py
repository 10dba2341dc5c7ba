"""The tcgen05 protocol checks, one module per family. Each check is a function `(ctx) -> None` that appends
`Finding`s to `ctx` (a `Ctx`, see `context`).

Path-based checks use the forward dataflow solver of `bwtriton.ptx.cfg` through `dataflow.run_dataflow` ("may"
analyses: a state element survives a join if it holds on some path). Anything not statically decidable
(register-held values, loops that cannot be unrolled) is skipped or reported as a warning, never as an error.
"""
from __future__ import annotations

from typing import Callable

from .async_copy import check_async_copies, check_barrier_arrivals
from .context import Ctx, cta_group_of, discover_tmem
from .cross_warp import check_cross_warp, check_pair_operands_synced
from .descriptors import check_mma
from .lanes import check_lane_quarter_by_warp
from .launch import check_cluster, check_leader_issue, check_cta_group, check_single_thread_issue, check_sync_aligned, check_trap_only
from .proxy_fence import check_proxy_fence
from .sync import (LdHazard, check_accumulator_sync, check_alloc_result_barrier, check_ld_wait,
                   check_st_wait, ld_wait_hazards)
from .mbarrier_phase import check_arrival_count, check_parity_alternates
from .phase_iterations import check_parity_per_iteration
from .exit_parity import check_exit_wait_parity
from .exit_read import check_exit_read_unwaited
from .loop_refill import check_loop_refill
from .loop_fill import check_loop_fill
from .release_order import check_release_order
from .expect_bytes import check_expect_bytes, check_multicast_mask
from .pair_arrivals import check_pair_tx_balance
from .tma_store import check_tma_store_fence
from .tmem_lifetime import check_alloc_columns, check_alloc_lifetime, check_ld_st_shapes
from .tmem_cross_warp import check_tmem_cross_warp

ALL_CHECKS: tuple[Callable[[Ctx], None], ...] = (
    check_cta_group, check_cluster, check_sync_aligned, check_single_thread_issue, check_alloc_columns,
    check_alloc_lifetime, check_ld_st_shapes, check_mma, check_ld_wait, check_tmem_cross_warp, check_st_wait,
    check_accumulator_sync,
    check_proxy_fence, check_alloc_result_barrier, check_async_copies, check_barrier_arrivals,
    check_lane_quarter_by_warp, check_leader_issue,
    check_cross_warp, check_pair_operands_synced, check_release_order, check_expect_bytes, check_multicast_mask,
    check_pair_tx_balance,
    check_exit_wait_parity, check_exit_read_unwaited, check_loop_refill, check_loop_fill,
)

#: checks of generic async-proxy / mbarrier rules, run on every function whether it uses tcgen05 or not
UNGATED_CHECKS: tuple[Callable[[Ctx], None], ...] = (
    check_tma_store_fence, check_parity_alternates, check_parity_per_iteration, check_arrival_count,
)

__all__ = ["ALL_CHECKS", "UNGATED_CHECKS", "Ctx", "LdHazard", "check_trap_only", "cta_group_of", "discover_tmem", "ld_wait_hazards"]
