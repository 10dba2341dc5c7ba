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

from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

import torch

from ..errors import InputError
from ..formats import QuantizedTensor
from ..formats.layout import blocked_shape

if TYPE_CHECKING:
    from triton.tools.tensor_descriptor import TensorDescriptor

#: Alignment (bytes) TMA needs for a tensor's base address and for every stride but the innermost.
TMA_ALIGN_BYTES = 16

#: Output dtypes every block-scaled entry point can store.
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)

def _emulated_target() -> "str | None":
    """The target of the active emulated GPU (bwtriton.emu.driver), or None; never imports the emulator when it
    was not loaded (then it cannot be active)."""
    import sys
    drv_mod = sys.modules.get("bwtriton.emu.driver")
    drv = drv_mod.active_driver() if drv_mod is not None else None
    return drv.target.name if drv is not None else None


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
        """`t` has at least one element."""
        if t.numel() == 0:
            raise self.fail(f"{name} is empty (shape {tuple(t.shape)}); every dim must be positive")

    # ------------------------------------------------------------------------------------------ relations
    def same_dtype(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """All `tensors` (name -> tensor) share one dtype."""
        dtypes = {n: t.dtype for n, t in tensors.items()}
        if len(set(dtypes.values())) > 1:
            listing = ", ".join(f"{n}: {dtype_name(d)}" for n, d in dtypes.items())
            raise self.fail(f"inputs must share one dtype, got {listing}; cast them, e.g. b.to(a.dtype)")

    def dims_match(self, what: str, x: int, x_name: str, y: int, y_name: str) -> None:
        """Two sizes that must agree (e.g. the K of both operands) are equal."""
        if x != y:
            raise self.fail(f"{what} mismatch: {x_name} = {x} but {y_name} = {y}; they must be equal")

    def multiple_of(self, what: str, value: int, block: int, fix: str = "") -> None:
        """`value` is a positive multiple of `block` (for kernels without masked tails)."""
        if value <= 0 or value % block:
            pad = (-value) % block or block
            fix = fix or f"pad it with {pad} zeros to {value + pad}"
            raise self.fail(f"{what} = {value} must be a positive multiple of {block}; {fix}")

    def on_cuda(self, tensors: Mapping[str, "torch.Tensor | None"], hint: str = "",
                emulable: bool = True) -> torch.device:
        """All given tensors (None entries skipped) live on one CUDA device; returns it. `hint` is appended to
        the error for a tensor off the GPU (e.g. where to find a CPU reference).

        While bwtriton's emulated B200 is active (`bwtriton.emu.emulated_gpu`, `--emulate sm_100a`), CPU tensors
        are that GPU's memory: they are accepted and `cpu` is returned, for kernels with an sm_100a path
        (`emulable`; a kernel without one says so instead of running a path the emulator does not model)."""
        present = {n: t for n, t in tensors.items() if t is not None}
        emulated = _emulated_target()
        for n, t in present.items():
            if t.device.type == "cpu" and emulated is not None:
                if not emulable:
                    raise self.fail(f"{n} is a CPU tensor on the emulated {emulated}, but this kernel has no "
                                    f"sm_100a path for the emulator to run; use a CUDA GPU")
                continue
            if t.device.type != "cuda":
                extra = f"; {hint}" if hint else ""
                if t.device.type == "cpu" and emulable:
                    extra += ("; or run it on the CPU as a Blackwell GPU: "
                              "`with bwtriton.emu.emulated_gpu(\"sm_100a\"): ...`")
                raise self.fail(f"{n} is on device '{t.device}', but this kernel runs on a CUDA GPU; move it "
                                f"with {n}.cuda(){f' ({extra[2:]})' if extra else ''}")
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


# ------------------------------------------------------------------------------- block-scaled operands
_FP4_FORMATS = ("nvfp4", "mxfp4")


def check_quantized(op: str, name: str, q: object, formats: tuple[str, ...]) -> "QuantizedTensor":
    """`q` is a 2-D QuantizedTensor of one of `formats`, with data and scales of the expected dtypes and shapes."""
    if not isinstance(q, QuantizedTensor):
        raise InputError(f"{op}: {name} must be a bwtriton.formats.QuantizedTensor (e.g. from "
                         f"bwtriton.formats.quantize_{formats[0].split('_')[0]}(x)), got {type(q).__name__}")
    if q.format not in formats:
        raise InputError(f"{op}: {name} is {q.format}, this op takes {' or '.join(formats)}; quantize it with the "
                         f"matching bwtriton.formats.quantize_* function or call the {q.format.split('_')[0]}_matmul "
                         f"variant")
    if len(q.shape) != 2:
        raise InputError(f"{op}: {name} must be a 2-D matrix [rows, K], got logical shape {tuple(q.shape)}; "
                         f"reshape the input to 2-D before quantizing")
    rows, k = q.shape
    packed_k = k // 2 if q.format in _FP4_FORMATS else k
    want_data = torch.uint8 if q.format in _FP4_FORMATS else (
        torch.float8_e4m3fn if q.format == "mxfp8_e4m3" else torch.float8_e5m2)
    if q.data.dtype != want_data or tuple(q.data.shape) != (rows, packed_k):
        raise InputError(f"{op}: {name}.data must be {want_data} of shape {(rows, packed_k)}, got {q.data.dtype} "
                         f"{tuple(q.data.shape)}")
    if q.data.stride(-1) != 1 or q.data.stride(0) != packed_k:
        raise InputError(f"{op}: {name}.data must be contiguous; call .contiguous() on it")
    want_scale = torch.float8_e4m3fn if q.format == "nvfp4" else torch.float8_e8m0fnu
    if q.scales.dtype != want_scale:
        raise InputError(f"{op}: {name}.scales must be {want_scale} for {q.format}, got {q.scales.dtype}")
    n_kb = k // q.block_size
    want = (rows, n_kb) if q.scale_layout == "plain" else blocked_shape(rows, n_kb)
    if tuple(q.scales.shape) != tuple(want) or not q.scales.is_contiguous():
        raise InputError(f"{op}: {name}.scales ({q.scale_layout}) must be a contiguous tensor of shape {want}, "
                         f"got {tuple(q.scales.shape)}")
    if q.format == "nvfp4" and q.global_scale is None:
        raise InputError(f"{op}: {name} is nvfp4 but has no global_scale; quantize with bwtriton.formats."
                         f"quantize_nvfp4")
    return q


def check_bf16_activations(op: str, x: object, w_q: "QuantizedTensor") -> tuple[int, int, int]:
    """`x` is a bf16 [M, K] matrix with unit stride along K whose K matches the [N, K] weight `w_q` (checked
    first with `check_quantized`); returns (M, N, K)."""
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise InputError(f"{op}: x must be a 2-D torch.Tensor [M, K]; reshape batched activations with "
                         f"x.reshape(-1, x.shape[-1])")
    if x.dtype != torch.bfloat16:
        raise InputError(f"{op}: x must be bfloat16, got {x.dtype}; convert with x.to(torch.bfloat16)")
    if x.stride(1) != 1:
        raise InputError(f"{op}: x must have unit stride along K; call x.contiguous()")
    m, k = x.shape
    n, kw = w_q.shape
    if k != kw:
        raise InputError(f"{op}: K mismatch: x is [{m}, {k}] but w_q is [{n}, {kw}] (the weight is [N, K])")
    return m, n, k


def check_out_dtype(op: str, out_dtype: torch.dtype) -> None:
    """`out_dtype` is one of `OUT_DTYPES`."""
    if out_dtype not in OUT_DTYPES:
        raise InputError(f"{op}: out_dtype must be one of {_names(OUT_DTYPES)}, got {out_dtype}")


#: Appended to "move it with .cuda()" errors of the block-scaled ops.
CPU_REFERENCE_HINT = "for a CPU reference use QuantizedTensor.dequantize() and torch.matmul"


def tma_friendly_empty(rows: int, cols: int, dtype: torch.dtype, device: "torch.device | str") -> torch.Tensor:
    """An uninitialised [rows, cols] tensor whose row pitch is padded to 16 bytes, so a TMA descriptor can cover it.

    When `cols * itemsize` is already a multiple of 16 the result is contiguous; otherwise it is a view of the
    first `cols` columns of a wider buffer (unit inner stride, aligned row stride).
    """
    per_row = TMA_ALIGN_BYTES // dtype.itemsize
    padded = -(-cols // per_row) * per_row
    buf = torch.empty((rows, padded), dtype=dtype, device=device)
    return buf if padded == cols else buf[:, :cols]


_TensorDescriptor = None  # triton.tools.tensor_descriptor.TensorDescriptor, imported on first use


def tma_descriptor(t: torch.Tensor, block_shape: Sequence[int]) -> "TensorDescriptor":
    """A host-side TMA descriptor (`triton.tools.tensor_descriptor.TensorDescriptor`) for `t`.

    Strides of size-1 dims are never used for addressing but TMA still requires them 16-byte aligned; torch may
    give them any value (e.g. a [1, K] view), so they are replaced by the next dim's padded extent. Call
    `InputChecker.tma_compatible` first: this function assumes the other rules hold.
    """
    global _TensorDescriptor
    if _TensorDescriptor is None:
        from triton.tools.tensor_descriptor import TensorDescriptor as _TensorDescriptor
    TensorDescriptor = _TensorDescriptor

    shape = list(t.shape)
    strides = list(t.stride())
    if 1 in shape:  # rare: only then do size-1 dims need their strides replaced
        elem = t.element_size()
        if shape[-1] == 1:
            strides[-1] = 1
        for dim in range(len(shape) - 2, -1, -1):
            if shape[dim] == 1:
                extent = shape[dim + 1] * strides[dim + 1] * elem
                strides[dim] = -(-extent // TMA_ALIGN_BYTES) * TMA_ALIGN_BYTES // elem
    # Built without TensorDescriptor.__post_init__: its asserts repeat the checks above and cost several
    # microseconds per launch, which shows on small GEMMs (launch overhead is host time the GPU waits for).
    desc = object.__new__(TensorDescriptor)
    desc.base, desc.shape, desc.strides, desc.block_shape, desc.padding = (t, shape, strides, list(block_shape), "zero")
    return desc


def rebased_descriptor(template: "TensorDescriptor", t: torch.Tensor) -> "TensorDescriptor":
    """`template` (a `tma_descriptor`) over `t` instead, for a `t` of the template's shape, strides and dtype (a
    plan whose key fixes them): the shape, stride and block lists are shared with the template (the launcher only
    reads them), so a call pays one object instead of `tma_descriptor`'s list building and size-1 checks."""
    desc = object.__new__(type(template))
    desc.__dict__.update(template.__dict__)
    desc.base = t
    return desc
