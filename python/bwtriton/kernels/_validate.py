"""Up-front validation of torch tensors handed to bwtriton's kernels, shared by every torch-facing wrapper.

Each check raises `bwtriton.errors.InputError` with a message that names the operation, the argument, what is
wrong and how to fix it. Checks never touch tensor data, so they work on CPU and "meta" tensors; that is what the
CPU test-suite uses to exercise them.

Typical use::

    check = InputChecker("matmul")
    check.tensor("a", a, ndim=2, dtypes=(torch.bfloat16, torch.float16))
    check.same_dtype({"a": a, "b": b})
    check.dims_match("K", a.shape[1], "a.shape[1]", b.shape[0], "b.shape[0]")
    check.tma_compatible("a", a)           # unit inner stride, 16-byte aligned rows and base pointer
    check.scale("a_scale", a_scale, {"per-tensor": (), "per-row": (M,)})
    check.on_cuda({"a": a, "b": b})        # last, so shape/dtype checks are testable on CPU tensors

The order above is the recommended one: structural checks first (testable anywhere), device checks last.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import torch

from ..errors import InputError

#: Alignment (bytes) TMA needs for a tensor's base address and for every stride but the innermost.
TMA_ALIGN_BYTES = 16

FP8_DTYPES = tuple(d for d in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None)) if d)


def dtype_name(dtype: torch.dtype) -> str:
    """'bfloat16' for torch.bfloat16 (short names read better in messages)."""
    return str(dtype).replace("torch.", "")


def _names(dtypes: Iterable[torch.dtype]) -> str:
    return ", ".join(dtype_name(d) for d in dtypes)


class InputChecker:
    """Validation helpers bound to one operation name, used as the prefix of every error message."""

    def __init__(self, op: str):
        self.op = op

    def fail(self, message: str) -> "InputError":
        """An InputError prefixed with the operation name (returned, so callers write `raise check.fail(...)`)."""
        return InputError(f"{self.op}: {message}")

    # ----------------------------------------------------------------------------------------- single tensors
    def tensor(self, name: str, t: object, *, ndim: int | None = None,
               dtypes: Sequence[torch.dtype] | None = None, dtype_hint: str = "") -> torch.Tensor:
        """`t` is a torch.Tensor with `ndim` dims and one of `dtypes`; returns it."""
        if not isinstance(t, torch.Tensor):
            raise self.fail(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if ndim is not None and t.dim() != ndim:
            raise self.fail(f"{name} must be {ndim}-D, got {t.dim()}-D with shape {tuple(t.shape)}; "
                            f"reshape it (e.g. x.reshape(-1, x.shape[-1]) for batched inputs)")
        if dtypes is not None and t.dtype not in tuple(dtypes):
            hint = f"; {dtype_hint}" if dtype_hint else ""
            raise self.fail(f"{name} has dtype {dtype_name(t.dtype)}, expected one of: {_names(dtypes)}{hint}")
        return t

    def inner_contiguous(self, name: str, t: torch.Tensor) -> None:
        """The last dim has unit stride (rows are contiguous), as TMA and vectorised loads require."""
        if t.dim() and t.shape[-1] > 1 and t.stride(-1) != 1:
            raise self.fail(f"{name} must have unit stride on its last dim, got strides {tuple(t.stride())}; "
                            f"pass {name}.contiguous()")

    def aligned(self, name: str, t: torch.Tensor, align: int = TMA_ALIGN_BYTES) -> None:
        """The data pointer is a multiple of `align` bytes (slices at odd offsets are not)."""
        ptr = t.data_ptr()
        if ptr % align:
            raise self.fail(f"{name}.data_ptr() = {ptr:#x} is not {align}-byte aligned (a view at an offset?); "
                            f"pass {name}.clone() to get an aligned copy")

    def strides_aligned(self, name: str, t: torch.Tensor, align: int = TMA_ALIGN_BYTES) -> None:
        """Every stride but the innermost spans a multiple of `align` bytes (TMA descriptor rule)."""
        elem = t.element_size()
        for dim, stride in enumerate(t.stride()[:-1]):
            if t.shape[dim] > 1 and (stride * elem) % align:
                per = align // elem if align % elem == 0 else align
                raise self.fail(
                    f"{name} dim {dim} has stride {stride} elements = {stride * elem} bytes, not a multiple of "
                    f"{align} bytes (TMA needs {align}-byte aligned row pitches); make the inner size a multiple "
                    f"of {per} elements by padding (torch.nn.functional.pad) or copy into a padded buffer")

    def tma_compatible(self, name: str, t: torch.Tensor) -> None:
        """All of: unit inner stride, aligned outer strides, aligned base pointer."""
        self.inner_contiguous(name, t)
        self.strides_aligned(name, t)
        self.aligned(name, t)

    def nonempty(self, name: str, t: torch.Tensor) -> None:
        if t.numel() == 0:
            raise self.fail(f"{name} is empty (shape {tuple(t.shape)}); every dim must be positive")

    # ------------------------------------------------------------------------------------------ relations
    def same_dtype(self, tensors: Mapping[str, torch.Tensor]) -> None:
        dtypes = {n: t.dtype for n, t in tensors.items()}
        if len(set(dtypes.values())) > 1:
            listing = ", ".join(f"{n}: {dtype_name(d)}" for n, d in dtypes.items())
            raise self.fail(f"inputs must share one dtype, got {listing}; cast them, e.g. b.to(a.dtype)")

    def dims_match(self, what: str, x: int, x_name: str, y: int, y_name: str) -> None:
        if x != y:
            raise self.fail(f"{what} mismatch: {x_name} = {x} but {y_name} = {y}; they must be equal")

    def multiple_of(self, what: str, value: int, block: int, fix: str = "") -> None:
        """`value` is a positive multiple of `block` (for kernels without masked tails)."""
        if value <= 0 or value % block:
            pad = (-value) % block or block
            fix = fix or f"pad it with {pad} zeros to {value + pad}"
            raise self.fail(f"{what} = {value} must be a positive multiple of {block}; {fix}")

    def on_cuda(self, tensors: Mapping[str, "torch.Tensor | None"]) -> torch.device:
        """All given tensors (None entries skipped) live on one CUDA device; returns it."""
        present = {n: t for n, t in tensors.items() if t is not None}
        for n, t in present.items():
            if t.device.type != "cuda":
                raise self.fail(f"{n} is on device '{t.device}', but this kernel runs on a CUDA GPU; move it "
                                f"with {n}.cuda()")
        devices = {t.device for t in present.values()}
        if len(devices) > 1:
            listing = ", ".join(f"{n}: {t.device}" for n, t in present.items())
            raise self.fail(f"inputs are on different devices ({listing}); move them to one GPU")
        return next(iter(devices))

    # ----------------------------------------------------------------------------------------------- scales
    def scale(self, name: str, s: "torch.Tensor | None", layouts: Mapping[str, tuple],
              dtypes: Sequence[torch.dtype] = (torch.float32,)) -> str | None:
        """Classify a scale tensor by shape; returns the layout name (a key of `layouts`) or None if `s` is None.

        `layouts` maps names to accepted shapes, e.g. ``{"per-tensor": (), "per-row": (M,)}``. A shape matches
        when the tensor's shape equals it after dropping size-1 dims (so [M], [M, 1] and [1, M] all match (M,),
        and [], [1] and [1, 1] match ()). Matched non-scalar scales must be contiguous (unit stride on their one
        non-trivial dim) so kernels can index them as flat vectors.
        """
        if s is None:
            return None
        self.tensor(name, s, dtypes=dtypes, dtype_hint=f"convert with {name}.float()")
        squeezed = tuple(d for d in s.shape if d != 1)
        for layout, shape in layouts.items():
            want = tuple(d for d in shape if d != 1)
            if squeezed == want or (s.numel() == 1 and not want):
                if s.numel() > 1:
                    big = next(i for i, d in enumerate(s.shape) if d != 1)
                    if s.stride(big) != 1:
                        raise self.fail(f"{name} ({layout}, shape {tuple(s.shape)}) must be contiguous; "
                                        f"pass {name}.contiguous()")
                return layout
        accepted = "; ".join(f"{layout}: {list(shape)}" for layout, shape in layouts.items())
        raise self.fail(f"{name} has shape {tuple(s.shape)}, which matches no supported scale layout "
                        f"({accepted})")


def tma_friendly_empty(rows: int, cols: int, dtype: torch.dtype, device: "torch.device | str") -> torch.Tensor:
    """An uninitialised [rows, cols] tensor whose row pitch is padded to 16 bytes, so a TMA descriptor can cover it.

    When `cols * itemsize` is already a multiple of 16 the result is contiguous; otherwise it is a view of the
    first `cols` columns of a wider buffer (unit inner stride, aligned row stride).
    """
    per_row = TMA_ALIGN_BYTES // dtype.itemsize
    padded = -(-cols // per_row) * per_row
    buf = torch.empty((rows, padded), dtype=dtype, device=device)
    return buf if padded == cols else buf[:, :cols]


def tma_descriptor(t: torch.Tensor, block_shape: Sequence[int]):
    """A host-side TMA descriptor (`triton.tools.tensor_descriptor.TensorDescriptor`) for `t`.

    Strides of size-1 dims are never used for addressing but TMA still requires them 16-byte aligned; torch may
    give them any value (e.g. a [1, K] view), so they are replaced by the next dim's padded extent. Call
    `InputChecker.tma_compatible` first: this function assumes the other rules hold.
    """
    from triton.tools.tensor_descriptor import TensorDescriptor

    elem = t.element_size()
    strides = list(t.stride())
    if t.shape[-1] == 1:
        strides[-1] = 1
    for dim in range(t.dim() - 2, -1, -1):
        if t.shape[dim] == 1:
            extent = t.shape[dim + 1] * strides[dim + 1] * elem
            strides[dim] = -(-extent // TMA_ALIGN_BYTES) * TMA_ALIGN_BYTES // elem
    # Built without TensorDescriptor.__post_init__: its asserts repeat the checks above and cost several
    # microseconds per launch, which shows on small GEMMs (launch overhead is host time the GPU waits for).
    desc = object.__new__(TensorDescriptor)
    desc.base, desc.shape, desc.strides, desc.block_shape, desc.padding = (
        t, list(t.shape), strides, list(block_shape), "zero")
    return desc
