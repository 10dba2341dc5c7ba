"""`EmulatedLauncher`: the `driver.active.launcher_cls` of the emulated GPU.

Triton builds one launcher per compiled kernel (`launcher_cls(src, metadata)`) and calls it with the grid, the
stream, the loaded function, the packed metadata, the launch hooks and *every* kernel argument in signature order
(constexprs included). Like Triton's generated C launcher, this one walks the kernel's specialised signature:
constexprs are skipped, tuples flattened, tensor descriptors expanded (tensor map + shape + strides when the
kernel was lowered to TMA, base + shapes + strides + padding otherwise), each value checked against its Triton
type and encoded the way the C launcher encodes it (fp16/bf16 scalars as 16-bit patterns, bf16 truncated).
Global/profile scratch come from the allocators Triton's `set_allocator` installs. The kernel's final PTX is read
from Triton's cache (the metadata's hash names the cache group) and run by `bwtriton.emu.integration.run`.
"""
from __future__ import annotations

import operator
import os
import re
import struct
from typing import Any, Iterator, Optional

from ...compat.launcher import descriptor_passes_tf32_flag, profile_allocator_is_set
from ...errors import InputError
from .arguments import Raw, TmaArg
from .run import run

_INT_RANGES = {
    "i1": (0, 1), "i8": (-2 ** 7, 2 ** 7 - 1), "i16": (-2 ** 15, 2 ** 15 - 1), "i32": (-2 ** 31, 2 ** 31 - 1),
    "i64": (-2 ** 63, 2 ** 63 - 1), "u1": (0, 1), "u8": (0, 2 ** 8 - 1), "u16": (0, 2 ** 16 - 1),
    "u32": (0, 2 ** 32 - 1), "u64": (0, 2 ** 64 - 1),
}
_FLOAT_TYPES = ("fp16", "bf16", "fp32", "f32", "fp64")

#: bytes past each tensor that read as stale memory (0xFF) instead of faulting, as on a GPU; stores there still
#: fault. BWTRITON_EMU_STRICT_BOUNDS=1 makes any access outside a tensor a MemoryFaultError.
READ_SLACK = 64 * 1024


def encode_float(ty: str, value: Any, where: str) -> Raw:
    """The bits Triton's C launcher passes for a float scalar of Triton type `ty`."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{where}: expected a float for a {ty} argument, got {type(value).__name__}") from None
    if ty == "fp16":
        return Raw(struct.unpack("<H", struct.pack("<e", f))[0])
    if ty == "bf16":  # the C launcher truncates fp32 to bf16
        return Raw(struct.unpack("<I", struct.pack("<f", f))[0] >> 16)
    if ty in ("fp32", "f32"):
        return Raw(struct.unpack("<I", struct.pack("<f", f))[0])
    return Raw(struct.unpack("<Q", struct.pack("<d", f))[0])


def encode_int(ty: str, value: Any, where: str) -> Raw:
    """Range-checked two's-complement bits of an integer scalar (Triton's launcher parses with 'i', 'L', ...)."""
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{where}: expected an integer for a {ty} argument, got {type(value).__name__}") from None
    lo, hi = _INT_RANGES[ty]  # i1 is a bool: 0 or 1, like the C launcher's int8 of a Python bool
    if not lo <= v <= hi:
        raise OverflowError(f"{where}: {v} does not fit the kernel's {ty} parameter ({lo}..{hi})")
    return Raw(v & ((1 << 64) - 1))


def check_pointer(value: Any, where: str) -> Any:
    """A CPU-tensor-like pointer argument (or None / 0 for a null pointer), as the runner takes it."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value == 0):
        return None
    if isinstance(value, int):
        raise TypeError(f"{where}: a raw integer address ({value:#x}) cannot be emulated; pass the CPU torch "
                        "tensor itself so the emulator can map its memory")
    if not hasattr(value, "data_ptr"):
        raise TypeError(f"{where}: Pointer argument must be either uint64 or have data_ptr method "
                        f"(got {type(value).__name__})")
    dev = getattr(_underlying_tensor(value), "device", None)
    if dev is not None and dev.type != "cpu":
        raise ValueError(f"{where}: Pointer argument cannot be accessed from the emulated GPU: the tensor is on "
                         f"{dev}; the emulated B200 runs on CPU tensors (create them with device='cpu')")
    return value


def _underlying_tensor(value: Any) -> Any:
    """The torch tensor behind `value` (itself, or `.base` of wrappers such as `triton.reinterpret`'s)."""
    seen = 0
    while type(value).__name__ not in ("Tensor", "Parameter") and hasattr(value, "base") and seen < 8:
        value, seen = value.base, seen + 1
    return value


def _flatten(ty: Any, value: Any, name: str) -> Iterator[tuple[str, Any, Any]]:
    """(name, Triton type, value) leaves of a possibly nested tuple argument."""
    if isinstance(ty, tuple):
        if not isinstance(value, (tuple, list)) or len(value) != len(ty):
            raise TypeError(f"argument {name}: expected a tuple of {len(ty)} values, got {value!r:.60}")
        for i, (t, v) in enumerate(zip(ty, value)):
            yield from _flatten(t, v, f"{name}[{i}]")
    else:
        yield name, ty, value


def _descriptor_leaves(ty: str, desc: Any, meta: Optional[dict], name: str) -> list:
    """A `tensordesc<...>` argument expanded like Triton's make_tensordesc_arg."""
    if not all(hasattr(desc, a) for a in ("base", "shape", "strides", "block_shape")):
        raise TypeError(f"argument {name}: the kernel takes a {ty}; pass a "
                        f"triton.tools.tensor_descriptor.TensorDescriptor, got {type(desc).__name__}")
    ndim = int(re.match(r"tensordesc<[^[>]*\[([^]]*)\]", ty).group(1).count(",")) + 1
    shape, strides = [int(s) for s in desc.shape], [int(s) for s in desc.strides]
    if len(shape) != ndim:
        raise ValueError(f"argument {name}: the kernel's descriptor is {ndim}-D, the TensorDescriptor "
                         f"{len(shape)}-D")
    if meta is None:  # not lowered to TMA: base, shape, strides, padding (and tf32 flag), shape, strides
        out = [check_pointer(desc.base, f"argument {name}.base")]
        out += [encode_int("i64", s, name) for s in shape + strides]
        out.append(encode_int("i1", int(desc.padding == "nan"), name))
        if descriptor_passes_tf32_flag():
            out.append(encode_int("i1", int(bool(getattr(desc, "round_f32_to_tf32", False))), name))
        return out + [encode_int("i32", s, name) for s in shape] + [encode_int("i64", s, name) for s in strides]
    if meta.get("fp4_padded"):
        shape[-1] *= 2
    check_pointer(desc.base, f"argument {name}.base")
    return ([TmaArg(desc, meta)] + [encode_int("i32", s, name) for s in shape]
            + [encode_int("i64", s, name) for s in strides])


def bind_arguments(signature: dict, args: tuple, tensordesc_meta: Optional[list]) -> list:
    """The kernel's PTX parameter values (before the two scratch pointers) for Triton-ordered `args`."""
    names = list(signature)
    if len(args) != len(names):
        raise TypeError(f"the kernel takes {len(names)} arguments ({', '.join(names)}); {len(args)} were given")
    metas = list(tensordesc_meta or [])
    desc_index, out = 0, []
    for name, value in zip(names, args):
        for leaf, ty, v in _flatten(signature[name], value, name):
            where = f"argument {leaf}"
            if ty == "constexpr":
                continue
            if isinstance(ty, str) and ty.startswith("tensordesc"):
                meta = metas[desc_index] if desc_index < len(metas) else None
                desc_index += 1
                out += _descriptor_leaves(ty, v, meta, leaf)
            elif ty.startswith("*"):
                out.append(check_pointer(v, where))
            elif ty in _INT_RANGES:
                out.append(encode_int(ty, v, where))
            elif ty in _FLOAT_TYPES:
                out.append(encode_float(ty, v, where))
            else:
                raise TypeError(f"{where}: Triton type {ty!r} has no emulated launch encoding")
    return out


def kernel_ptx(metadata: Any) -> str:
    """The PTX the cubin was built from (the `ptx` stage: bwtriton's passes rewrite it in place), read from the
    Triton cache group that `metadata.hash` names."""
    from triton.runtime.cache import get_cache_manager  # heavy: Triton's runtime, needed only at launch
    manager = get_cache_manager(metadata.hash)
    path = manager.get_file(f"{metadata.name}.ptx")
    if path is not None:
        with open(path) as f:
            return f.read()
    raise InputError(f"kernel {metadata.name}: its PTX is not in Triton's cache ({manager.cache_dir}); the "
                     "emulated launcher needs the compile's cache folder to still exist")


class EmulatedLauncher:
    """Runs a compiled kernel in the emulator with Triton's launcher calling convention."""

    def __init__(self, src: Any, metadata: Any):
        self.name = metadata.name
        self.signature = dict(src.signature) if hasattr(src, "signature") else {}
        self.metadata = metadata
        self.tensordesc_meta = getattr(metadata, "tensordesc_meta", None)
        self.num_ctas = getattr(metadata, "num_ctas", 1)
        self._ptx: Optional[str] = None
        self.last_stats = None

    @property
    def ptx(self) -> str:
        if self._ptx is None:
            self._ptx = kernel_ptx(self.metadata)
        return self._ptx

    def _scratch(self, kind: str, grid_size: int, stream: int) -> Any:
        """Allocate scratch like Triton's CudaLauncher: grid * num_ctas * size bytes from the set allocator."""
        from triton.runtime import _allocation  # heavy: Triton's runtime, loaded at launch
        size = getattr(self.metadata, f"{kind}_scratch_size", 0) or 0
        if size <= 0:
            return None
        align = getattr(self.metadata, f"{kind}_scratch_align", 1)
        nbytes = grid_size * self.num_ctas * size
        if kind == "profile" and not profile_allocator_is_set():  # the driver's own default scratch
            import torch  # heavy: torch, loaded at launch
            return torch.empty(nbytes, dtype=torch.int8)
        allocator = _allocation._allocator if kind == "global" else _allocation._profile_allocator
        buf = allocator.get()(nbytes, align, stream)
        return check_pointer(buf, f"{kind} scratch buffer from the allocator")

    def __call__(self, grid_x: int, grid_y: int, grid_z: int, stream: int, function: Any, packed_metadata: Any,
                 launch_metadata: Any, enter_hook: Any, exit_hook: Any, *args: Any) -> None:
        values = bind_arguments(self.signature, args, self.tensordesc_meta) if self.signature else list(args)
        grid_size = grid_x * grid_y * grid_z
        if grid_size <= 0:  # CUDA launches nothing for an empty grid; neither do we
            return
        global_scratch = self._scratch("global", grid_size, stream)
        profile_scratch = self._scratch("profile", grid_size, stream)
        if enter_hook is not None:
            enter_hook(launch_metadata)
        md = self.metadata
        strict = os.environ.get("BWTRITON_EMU_STRICT_BOUNDS", "") not in ("", "0")
        self.last_stats = run(self.ptx, (grid_x, grid_y, grid_z), *values, num_warps=md.num_warps,
                              num_ctas=self.num_ctas, shared=md.shared, name=self.name,
                              global_scratch=global_scratch, profile_scratch=profile_scratch, triton_abi=True,
                              read_slack=0 if strict else READ_SLACK)
        if exit_hook is not None:
            exit_hook(launch_metadata)
