"""TMA reduce (`cp.reduce.async.bulk.tensor`, what Triton's `desc.atomic_add/min/max/...` lowers to on sm_100a):
the element-wise combine per tensor-map element type, and whole kernels on the emulated B200."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from bwtriton.emu.isa import tma  # noqa: E402
from bwtriton.emu.errors import EmulationError, UnsupportedInstructionError  # noqa: E402
from bwtriton.emu.isa.tensormap import TensorMap  # noqa: E402

# PTX tensormap elemtype codes
U32, S32, F16, F32, BF16 = 2, 3, 6, 7, 10


class _W:  # the bits of a warp `_reduction` uses for error context
    @staticmethod
    def where() -> str:
        return "test"


def _combine(op: str, elem_type: int, old: np.ndarray, new: np.ndarray) -> np.ndarray:
    tmap = TensorMap(base=0, shape=(len(old),), strides=(old.itemsize,), box=(len(old),), elem_bytes=old.itemsize,
                     elem_type=elem_type)
    fn = tma._reduction(op, tmap, _W(), 1, "cp.reduce.async.bulk.tensor")
    raw = fn(old.view(np.uint8).reshape(len(old), -1), new.view(np.uint8).reshape(len(old), -1))
    return raw.reshape(-1).view(old.dtype)


def test_float_add_rounds_once_to_the_element_format():
    gen = torch.Generator().manual_seed(0)
    for elem, tdt in ((BF16, torch.bfloat16), (F16, torch.float16)):
        a = (torch.randn(4096, generator=gen) * torch.exp2(torch.randint(-12, 12, (4096,), generator=gen))).to(tdt)
        b = torch.randn(4096, generator=gen).to(tdt)
        got = _combine("add", elem, a.view(torch.int16).numpy().view(np.uint16), b.view(torch.int16).numpy()
                       .view(np.uint16))
        # the exact sum of two 8/11-bit values fits float32, so float32 add + one RNE rounding is the reference
        want = (a.float() + b.float()).to(tdt).view(torch.int16).numpy().view(np.uint16)
        assert np.array_equal(got, want), f"{tdt}: {np.count_nonzero(got != want)} of 4096 differ"
    x, y = np.array([1.0, 1e30, -2.5], np.float32), np.array([2 ** -30, 1e30, 2.5], np.float32)
    assert np.array_equal(_combine("add", F32, x, y), x + y)


def test_float_min_max_skip_nan_like_ptx():
    x = np.array([1.0, np.nan, -3.0], np.float32)
    y = np.array([2.0, 5.0, np.nan], np.float32)
    bits = lambda v: torch.from_numpy(v).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)  # noqa: E731
    got = torch.from_numpy(_combine("min", BF16, bits(x), bits(y)).view(np.int16)).view(torch.bfloat16).float()
    assert got.tolist() == [1.0, 5.0, -3.0]
    got = torch.from_numpy(_combine("max", BF16, bits(x), bits(y)).view(np.int16)).view(torch.bfloat16).float()
    assert got.tolist() == [2.0, 5.0, -3.0]


def test_integer_ops_wrap_and_follow_ptx_inc_dec():
    a = np.array([2 ** 31 - 1, -5, 7], np.int32)
    assert _combine("add", S32, a, np.array([1, 5, -8], np.int32)).tolist() == [-2 ** 31, 0, -1]
    assert _combine("max", S32, a, np.array([0, -1, 9], np.int32)).tolist() == [2 ** 31 - 1, -1, 9]
    u = np.array([0, 3, 9, 4], np.uint32)
    bound = np.array([5, 3, 5, 5], np.uint32)
    assert _combine("inc", U32, u, bound).tolist() == [1, 0, 0, 5]   # old >= b ? 0 : old + 1
    assert _combine("dec", U32, u, bound).tolist() == [5, 2, 5, 3]   # old == 0 or old > b ? b : old - 1
    assert _combine("xor", U32, u, bound).tolist() == [5, 0, 12, 1]


def test_undefined_type_and_unknown_type_are_clear_errors():
    f = np.zeros(2, np.float32)
    with pytest.raises(EmulationError, match=r"\.inc is not defined for f32 elements"):
        _combine("inc", F32, f, f)
    with pytest.raises(UnsupportedInstructionError, match="does not record its element type"):
        _combine("add", -1, f, f)


# ------------------------------------------------------------------------------------ kernels, emulated

@pytest.fixture
def emulated_b200():
    import triton

    from bwtriton.emu.driver import emulated_gpu
    with emulated_gpu("sm_100a") as drv:
        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8))
        try:
            yield drv
        finally:
            from triton.runtime._allocation import NullAllocator
            triton.set_allocator(NullAllocator())


def _reduce_tiles_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def reduce_tiles(out_ptr, x_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr, MAX: tl.constexpr):
        # every program reduces its own x tile into the SAME output rows 0..BM-1 (and rows past M are clipped)
        desc = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
        pid = tl.program_id(0)
        r = pid * BM * BN + tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
        if MAX:
            desc.atomic_max([0, 0], tl.load(x_ptr + r))
        else:
            desc.atomic_add([0, 0], tl.load(x_ptr + r))
    return reduce_tiles


@pytest.mark.emulated
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_device_descriptor_atomic_add_accumulates_and_clips(emulated_b200, dtype):
    reduce_tiles = _reduce_tiles_kernel()
    bm, bn, m, n, progs = 16, 32, 12, 32, 3  # M < BM: the box's last 4 rows are out of bounds
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(-8, 9, (progs, bm, bn), generator=gen).to(dtype)  # small integers: every sum is exact
    out = torch.randint(-8, 9, (m, n), generator=gen).to(dtype)
    want = out.double() + x.double().sum(0)[:m]
    k = reduce_tiles[(progs,)](out, x, m, n, BM=bm, BN=bn, MAX=False)
    assert "cp.reduce.async.bulk.tensor" in k.asm["ptx"]
    assert torch.equal(out.double(), want)


@pytest.mark.emulated
@pytest.mark.parametrize("dtype", [torch.int32, torch.bfloat16])  # Triton's atomic_max takes no fp32
def test_device_descriptor_atomic_max(emulated_b200, dtype):
    reduce_tiles = _reduce_tiles_kernel()
    gen = torch.Generator().manual_seed(2)
    x = torch.randint(-50, 50, (2, 16, 32), generator=gen).to(dtype)
    out = torch.full((16, 32), 7).to(dtype)
    k = reduce_tiles[(2,)](out, x, 16, 32, BM=16, BN=32, MAX=True)
    assert ".max" in next(ln for ln in k.asm["ptx"].splitlines() if "cp.reduce.async.bulk.tensor" in ln)
    assert torch.equal(out, torch.maximum(x.amax(0), torch.tensor(7).to(dtype)))


@pytest.mark.emulated
def test_host_descriptor_atomic_add(emulated_b200):
    """A host TensorDescriptor's map gets its element type from the compile's tensordesc_meta (the runner)."""
    import triton
    import triton.language as tl
    from triton.tools.tensor_descriptor import TensorDescriptor

    @triton.jit
    def add_tiles_host(desc, x_ptr, BM: tl.constexpr, BN: tl.constexpr):
        r = tl.program_id(0) * BM * BN + tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
        desc.atomic_add([0, 0], tl.load(x_ptr + r))

    gen = torch.Generator().manual_seed(3)
    x = torch.randint(-8, 9, (3, 16, 32), generator=gen).to(torch.float32)
    out = torch.randint(-8, 9, (16, 32), generator=gen).to(torch.float32)
    want = out.double() + x.double().sum(0)
    k = add_tiles_host[(3,)](TensorDescriptor.from_tensor(out, [16, 32]), x, BM=16, BN=32)
    assert "cp.reduce.async.bulk.tensor" in k.asm["ptx"]
    assert torch.equal(out.double(), want)
