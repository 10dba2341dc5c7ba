"""`clc_matmul`: a persistent GEMM whose schedule is Cluster Launch Control on sm_100a/sm_103a and the static
persistent loop elsewhere, from one kernel source (`bwtriton.language.clc`).

C[M, N] = A[M, K] @ B[K, N] (fp16/bf16 in, fp32 accumulation, C in A's dtype). Output tiles are walked in grouped
order (GROUP_M tiles down M share a column of B in L2). On sm_100a `tl.dot` lowers to `tcgen05.mma`; each
program, after its tile, steals the tile of a cluster that has not started yet, so when SMs are busy with other
work (or tiles differ in cost) the launched-but-waiting programs' tiles flow to the SMs that are free.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
import triton
import triton.language as tl

from bwtriton.kernels._device import device_info
from bwtriton.kernels._tiles import grouped_tile_coords
from bwtriton.kernels._validate import InputChecker
from bwtriton.language import clc
from bwtriton.targets import target_for_capability

_DTYPES = (torch.float16, torch.bfloat16)
#: Kernel constexprs of the default configuration (also what the lit tests and the emulator compile).
DEFAULT_BLOCKS = {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 4}


@triton.jit
def _gemm_tile(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, pid_m, pid_n,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """One BLOCK_M x BLOCK_N tile of C = A @ B (row-major A, B, C; masked tails)."""
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * stride_am + (k + rk)[None, :],
                    mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * stride_bk + rn[None, :],
                    mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def clc_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                      USE_CLC: tl.constexpr, NUM_CTAS: tl.constexpr):
    """Persistent C = A @ B: CLC work stealing when USE_CLC (launch one program per tile), else the static
    persistent schedule (launch min(tiles, SMs) programs)."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    tile = tl.program_id(0)
    while tile < num_tiles:
        pid_m, pid_n = grouped_tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        _gemm_tile(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, pid_m, pid_n,
                   BLOCK_M, BLOCK_N, BLOCK_K)
        tile = clc.next_tile(tile, num_tiles, USE_CLC, NUM_CTAS)


def signature(dtype: str = "bf16") -> dict[str, str]:
    """The kernel's argument types for `bwtriton.compile` (dtype: 'bf16' or 'fp16')."""
    p = f"*{dtype}"
    return {"a_ptr": p, "b_ptr": p, "c_ptr": p, "M": "i32", "N": "i32", "K": "i32",
            "stride_am": "i32", "stride_bk": "i32", "stride_cm": "i32"}


def constexprs(target: str, num_ctas: int = 1, **blocks: int) -> dict[str, Any]:
    """Constexprs for `target`: USE_CLC from the target, tile sizes from DEFAULT_BLOCKS overridden by `blocks`."""
    return {**DEFAULT_BLOCKS, **blocks, "USE_CLC": clc.supported(target), "NUM_CTAS": num_ctas}


def num_tiles(M: int, N: int, block_m: int = DEFAULT_BLOCKS["BLOCK_M"],
              block_n: int = DEFAULT_BLOCKS["BLOCK_N"]) -> int:
    """Output tiles of an M x N problem."""
    return triton.cdiv(M, block_m) * triton.cdiv(N, block_n)


def clc_matmul(a: torch.Tensor, b: torch.Tensor, *, num_sms: Optional[int] = None) -> torch.Tensor:
    """C = A @ B on a CUDA GPU with the CLC schedule on sm_100a/sm_103a, the static persistent one elsewhere."""
    chk = InputChecker("clc_matmul")
    chk.tensor("a", a, ndim=2)
    chk.tensor("b", b, ndim=2)
    chk.same_dtype({"a": a, "b": b})
    if a.dtype not in _DTYPES:
        raise chk.fail(f"a has dtype {a.dtype}; clc_matmul takes float16 or bfloat16 (cast with .to(torch.bfloat16))")
    chk.dims_match("K", a.shape[1], "a.shape[1]", b.shape[0], "b.shape[0]")
    device = chk.on_cuda({"a": a, "b": b})
    cap, sms = device_info(device)
    target = target_for_capability(cap)
    a, b = a.contiguous(), b.contiguous()
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, dtype=a.dtype, device=device)
    grid, use_clc = clc.launch_grid(num_tiles(M, N), target, num_sms or sms)
    clc_matmul_kernel[(grid,)](a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0), **DEFAULT_BLOCKS,
                               USE_CLC=use_clc, NUM_CTAS=1, num_warps=4)
    return c


#: `bwtriton compile clc_matmul.py:clc_matmul_kernel` defaults (CLC on; pass --constexpr USE_CLC=false for
#: targets without it).
BWTRITON_SPECS = {"clc_matmul_kernel": {"signature": signature("bf16"), "constexprs": constexprs("sm_100a"),
                                        "num_warps": 4}}
