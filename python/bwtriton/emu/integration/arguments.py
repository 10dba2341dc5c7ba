"""Kernel arguments into emulated memory: CPU tensors mapped into global memory (with optional read slack),
scalars and tensor maps stored into param space in the kernel's parameter order, Triton's scratch pointers.
`Raw` and `TmaArg` are how the Triton launcher hands over values it has already encoded."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ...errors import InputError
from ..errors import MemoryFaultError
from ..isa.tensormap import SWIZZLE_CODES, TensorMap
from ..machine.image import KernelImage, ParamSlot
from ..machine.memory import PARAM_BASE, GlobalMemory, ParamSpace


@dataclass
class Raw:
    """A parameter value already encoded as the bit pattern the kernel reads (the runner stores it as is)."""

    bits: int


@dataclass
class TmaArg:
    """A host TensorDescriptor bound to a tensor-map parameter, with the compile's tensordesc_meta entry."""

    desc: Any
    meta: dict


def _is_tensor(x: Any) -> bool:
    return type(x).__name__ in ("Tensor", "Parameter") and hasattr(x, "untyped_storage")


def _is_descriptor(x: Any) -> bool:
    return hasattr(x, "base") and hasattr(x, "block_shape") and hasattr(x, "strides")


def _backing_tensor(x: Any) -> Any:
    """The torch tensor whose storage holds `x` (itself, or `.base` of `triton.reinterpret` wrappers)."""
    for _ in range(8):
        if _is_tensor(x):
            return x
        x = getattr(x, "base", None)
    return None


#: byte pattern of the read slack after launch buffers (0xFF: NaN in every float format, like stale memory)
SLACK_FILL = 0xFF


class ArgPacker:
    """Binds `run()`'s arguments, one `add` each, to the kernel's parameters; `finish` fills the scratch pointers,
    `write_back` copies padded buffers back after the launch."""

    def __init__(self, image: KernelImage, gmem: GlobalMemory, params: ParamSpace, meta: dict,
                 read_slack: int = 0):
        self.image, self.gmem, self.params = image, gmem, params
        self.storages: dict[int, int] = {}
        self.read_slack = read_slack
        self.copies: list[tuple[np.ndarray, np.ndarray, str]] = []  # (tensor bytes, padded copy, name)
        self.i = 0
        self.desc_meta = list(meta.get("tensordesc_meta") or [])
        self.desc_index = 0

    def _next(self, what: str) -> ParamSlot:
        if self.i >= len(self.image.params):
            raise InputError(f"too many kernel arguments: the kernel takes {len(self.image.params)} parameters "
                             f"(after expanding tensor descriptors); {what} has no parameter left")
        slot = self.image.params[self.i]
        self.i += 1
        return slot

    def _store(self, slot: ParamSlot, value: Any) -> None:
        t = slot.type
        if t.startswith("b8["):
            raise InputError(f"parameter {slot.name} is a {t} blob (a TMA tensor map): pass a TensorDescriptor")
        if t in ("f32", "f64") and not isinstance(value, Raw):
            raw = np.array([value], dtype=np.float32 if t == "f32" else np.float64).view(np.uint8)
        else:
            v = value.bits if isinstance(value, Raw) else int(value)
            raw = np.array([v & ((1 << (8 * slot.size)) - 1)], dtype=np.uint64).view(np.uint8)[:slot.size]
        self.params.data[slot.offset:slot.offset + slot.size] = raw

    def tensor_address(self, t) -> int:
        """Emulated global address of a CPU tensor (or a wrapper with `.base` and `data_ptr()`): its storage is
        mapped once per launch, so views and aliases share memory as on the GPU."""
        base = _backing_tensor(t)
        if base is None:
            raise InputError(f"cannot map a {type(t).__name__} into emulated memory: pass a CPU torch tensor")
        if base.device.type != "cpu":
            raise InputError(f"the emulator needs CPU tensors, got a tensor on {base.device}; pass t.cpu() "
                             "(and copy results back)")
        st = base.untyped_storage()
        key = st.data_ptr()
        if key not in self.storages:
            import torch  # heavy; only tensors reach here, so torch is already loaded
            u8 = torch.empty(0, dtype=torch.uint8).set_(st).numpy()
            self.storages[key] = self.gmem.add(self._with_slack(u8, f"arg{self.i}"), f"arg{self.i}")
        return self.storages[key] + (t.data_ptr() - key)

    def _with_slack(self, u8: np.ndarray, name: str) -> np.ndarray:
        """The tensor's bytes as mapped: the storage itself, or (read_slack > 0) a copy followed by read_slack
        bytes of SLACK_FILL, written back by `write_back`. A GPU reads a little past an allocation without
        faulting (torch's caching allocator keeps the rest of its segment mapped); kernels whose unmasked loads
        only feed masked-off outputs (upstream's scale loads with N < BLOCK_N) rely on that."""
        if not self.read_slack:
            return u8
        padded = np.full(u8.size + self.read_slack, SLACK_FILL, dtype=np.uint8)
        padded[:u8.size] = u8
        self.copies.append((u8, padded, name))
        return padded

    def write_back(self) -> None:
        """Copy padded buffers back into their tensors; a store into the slack is a fault (it would have
        overwritten another allocation on the GPU)."""
        for u8, padded, name in self.copies:
            u8[:] = padded[:u8.size]
        for u8, padded, name in self.copies:
            tail = padded[u8.size:]
            if not (tail == SLACK_FILL).all():
                first = int(np.flatnonzero(tail != SLACK_FILL)[0])
                raise MemoryFaultError(f"the kernel wrote past the end of launch buffer {name} ({u8.size} bytes): "
                                       f"first modified byte at offset {u8.size + first}")

    def add(self, arg: Any) -> None:
        if isinstance(arg, TmaArg):
            return self._tensor_map(self._next("a TensorDescriptor"), arg.desc, arg.meta)
        if _is_descriptor(arg) and not isinstance(arg, Raw):
            return self._descriptor(arg)
        slot = self._next(repr(arg)[:40])
        if arg is None:
            return self._store(slot, 0)
        if isinstance(arg, Raw):
            return self._store(slot, arg)
        if _backing_tensor(arg) is not None and hasattr(arg, "data_ptr"):
            return self._store(slot, self.tensor_address(arg))
        if isinstance(arg, (bool, int, np.integer)):
            return self._store(slot, int(arg))
        if isinstance(arg, (float, np.floating)):
            return self._store(slot, float(arg))
        raise InputError(f"unsupported kernel argument of type {type(arg).__name__}: pass CPU torch tensors, "
                         "Python ints/floats, None or TensorDescriptors")

    def _tensor_map(self, slot: ParamSlot, d, meta: Optional[dict]) -> None:
        """Bind a host TensorDescriptor to a tensor-map parameter (box/swizzle/element size from the compile's
        tensordesc_meta, as Triton's launcher fills the CUtensorMap)."""
        if not slot.type.startswith("b8["):
            raise InputError(f"a TensorDescriptor was passed for parameter {slot.name} ({slot.type}), but the "
                             "kernel was not lowered to TMA here (no tensor-map parameter)")
        shape = [int(s) for s in d.shape]
        strides = [int(s) for s in d.strides]
        eb = d.base.element_size()
        block = list(meta["block_size"]) if meta else [int(b) for b in d.block_shape]
        swz = SWIZZLE_CODES.get(int(meta["swizzle"]), 0) if meta else 0
        elem = int(meta["elem_size"]) if meta else eb
        if meta and meta.get("fp4_padded"):  # packed fp4 bytes; Triton's launcher doubles the inner extent
            tmap = TensorMap.fp4_padded(self.tensor_address(d.base), shape[:-1] + [2 * shape[-1]],
                                        [s * eb for s in strides[:-1]], block, swz)
        else:
            # Triton's tensordesc_meta elem_type is already the CUtensorMapDataType enum a TMA reduce needs
            tmap = TensorMap(base=self.tensor_address(d.base), shape=tuple(shape),
                             strides=tuple(s * eb for s in strides), box=tuple(block), elem_bytes=elem,
                             swizzle=swz, elem_type=int(meta.get("elem_type", -1)) if meta else -1,
                             round_tf32=bool(getattr(d, "round_f32_to_tf32", False)))
        self.params.tensormaps[PARAM_BASE + slot.offset] = tmap
        # a recognisable blob in param space: the map's base address (the emulator keys maps by address)
        self.params.data[slot.offset:slot.offset + 8] = np.array([tmap.base], dtype=np.uint64).view(np.uint8)

    def _descriptor(self, d) -> None:
        """`run()`'s own convention: a TensorDescriptor stands for tensor map + shape + strides."""
        meta = self.desc_meta[self.desc_index] if self.desc_index < len(self.desc_meta) else None
        self.desc_index += 1
        self._tensor_map(self._next("a TensorDescriptor"), d, meta)
        for s in d.shape:
            self._store(self._next("descriptor shape"), int(s))
        for s in d.strides:
            self._store(self._next("descriptor stride"), int(s))

    def finish(self, global_scratch: int, profile_scratch: int, triton_abi: Optional[bool]) -> None:
        """Fill Triton's two trailing scratch pointers. `triton_abi` True: the kernel comes from Triton and must
        have exactly those two parameters left (otherwise arguments are missing); None (raw PTX): two or none."""
        left = len(self.image.params) - self.i
        if left == 0 and not triton_abi:
            return
        if left != 2:
            raise InputError(self._count_mismatch(left, triton_abi))
        self._store(self._next("global scratch"), global_scratch)
        self._store(self._next("profile scratch"), profile_scratch)

    def _count_mismatch(self, left: int, triton_abi: Optional[bool]) -> str:
        """The wrong-argument-count message: too few when more than Triton's 2 scratch slots are left, too many
        when a Triton kernel has fewer left; raw PTX with 1 left may be either (it says both)."""
        total, have = len(self.image.params), self.i
        takes = f"the kernel takes {total - 2} parameter(s) (after expanding tensor descriptors, plus Triton's 2 " \
                f"scratch pointers), {have} were given"
        if left > 2:
            return f"too few kernel arguments: {takes}; next unbound parameter: {self.image.params[self.i].name}"
        if triton_abi:
            return f"too many kernel arguments: {takes}; drop the last {have - (total - 2)}"
        return (f"{have} kernel arguments for a PTX kernel with {total} parameters: too many if its last 2 are "
                f"Triton's scratch pointers (it then takes {total - 2}), too few otherwise (next unbound "
                f"parameter: {self.image.params[self.i].name})")


def dtype_mismatches(compiled: Any, args: Any) -> list[str]:
    """Tensors of another dtype than their pointer argument was compiled for, as 'argument NAME was compiled as
    *fp32 but got a float16 tensor (*fp16)' (only for compile results that carry a signature). Not an error by
    itself: a placeholder tensor for a pointer the kernel never dereferences is common."""
    sig = getattr(getattr(getattr(compiled, "kernel", compiled), "src", None), "signature", None)
    if not isinstance(sig, dict):
        return []
    from triton.runtime.jit import mangle_type  # heavy: Triton's runtime; its own torch dtype -> '*fp16' naming
    runtime = [(n, t) for n, t in sig.items() if t != "constexpr"]
    return [f"argument {n!r} was compiled as {t} but got a {str(a.dtype)[6:]} tensor ({mangle_type(a)}); pass a "
            f"{t[1:]} tensor, or compile with {n}: '{mangle_type(a)}'"
            for (n, t), a in zip(runtime, args)
            if isinstance(t, str) and t.startswith("*") and _is_tensor(a) and mangle_type(a) != t]
