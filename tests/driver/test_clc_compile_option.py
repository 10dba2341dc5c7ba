"""`bwtriton.compile(..., clc=True)`: one-tile-per-program kernels become CLC persistent loops on sm_100a, stay as
they are elsewhere, and kernels the rewrite would break are refused with the reason."""
from __future__ import annotations

import functools

import pytest
import torch
import triton
import triton.language as tl

import bwtriton
import bwtriton.emu as emu
from bwtriton.emu import GridSchedule
from bwtriton.errors import InputError
from bwtriton.examples.matmul import matmul_constexprs, matmul_kernel, matmul_signature


@triton.jit
def _uses_num_programs(x_ptr, n):
    pid = tl.program_id(0)
    for i in range(pid, n, tl.num_programs(0)):
        tl.store(x_ptr + i, i)


@triton.jit
def _returns_early(x_ptr, n):
    pid = tl.program_id(0)
    if pid >= n:
        return
    tl.store(x_ptr + pid, pid)


@triton.jit
def _three_d(x_ptr):
    tl.store(x_ptr + tl.program_id(2), 1)


@triton.jit
def _pid_helper():
    return tl.program_id(0) * 2


@triton.jit
def _calls_helper(x_ptr):
    tl.store(x_ptr + tl.program_id(0), _pid_helper())


@triton.jit
def _no_pid(x_ptr):
    tl.store(x_ptr, 1)


def test_already_persistent_kernel_is_refused():
    from bwtriton.kernels.clc_schedule import SIGNATURE, clc_schedule_kernel
    with pytest.raises(InputError, match="already a CLC persistent kernel \\(clc.next_tile"):
        bwtriton.compile(clc_schedule_kernel, signature=SIGNATURE, target="sm_100a", clc=True,
                         constexprs={"USE_CLC": True, "NUM_CTAS": 1})


@pytest.mark.parametrize("kernel,reason", [
    (_uses_num_programs, "calls tl.num_programs"), (_returns_early, "returns early"),
    (_three_d, "tl.program_id\\(2\\)"), (_calls_helper, "helper\\(s\\) _pid_helper read program ids"),
    (_no_pid, "never reads tl.program_id"),
])
def test_unsafe_kernels_are_refused_with_the_reason(kernel, reason):
    with pytest.raises(InputError, match=f"clc=True cannot make {kernel.fn.__name__} persistent: .*{reason}"):
        bwtriton.compile(kernel, signature={n: "*i32" if n == "x_ptr" else "i32" for n in kernel.arg_names},
                         target="sm_100a", clc=True)


def test_path_input_is_refused():
    with pytest.raises(InputError, match="needs a @triton.jit kernel"):
        bwtriton.compile("kernel.ttgir", target="sm_100a", clc=True)


@functools.lru_cache(maxsize=None)
def _matmul(target: str):
    return bwtriton.compile(matmul_kernel, signature=matmul_signature("bf16"), target=target, clc=True,
                            constexprs=matmul_constexprs(128, 64, 64))


def test_non_clc_target_keeps_the_kernel():
    assert "clusterlaunchcontrol" not in _matmul("sm_90a").asm["ptx"]


@pytest.mark.emulated
@pytest.mark.parametrize("workers,seed", [(1, None), (3, 4), (148, None)])
def test_rewritten_2d_matmul_matches_torch(workers, seed):
    res = _matmul("sm_100a")
    ptx = res.asm["ptx"]
    assert "clusterlaunchcontrol.query_cancel.get_first_ctaid::y" in ptx  # the 2-D grid's y is decoded too
    M, N, K = 256, 192, 128
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(M, K, generator=g).bfloat16(), torch.randn(K, N, generator=g).bfloat16()
    c = torch.zeros(M, N, dtype=torch.bfloat16)
    sched = GridSchedule(workers=workers, seed=seed)
    emu.run(res, (2, 3), a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0), grid_schedule=sched)
    # one bf16 rounding of an fp32 accumulation: within one bf16 ulp
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=2 ** -7, atol=1e-2)
    assert len(sched.stolen) == max(0, 6 - workers)
