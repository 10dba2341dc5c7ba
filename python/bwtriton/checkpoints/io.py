"""Reading tensors from safetensors files (the `safetensors` package is an optional dependency: the `models`
extra)."""
from __future__ import annotations

import os
from typing import Iterable, Union

import torch

from ..errors import InputError

PathLike = Union[str, "os.PathLike[str]"]


def read_safetensors(paths: "PathLike | Iterable[PathLike]", device: str = "cpu") -> dict[str, torch.Tensor]:
    """All tensors of one safetensors file (or of several shards, merged) as a name -> tensor dict."""
    try:
        from safetensors.torch import load_file  # optional dependency (the `models` extra)
    except ImportError as exc:
        raise InputError("reading checkpoints needs the safetensors package: pip install 'bwtriton[models]' "
                         "(or pip install safetensors)") from exc
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    out: dict[str, torch.Tensor] = {}
    for path in paths:
        if not os.path.isfile(path):
            raise InputError(f"checkpoint file '{path}' does not exist; pass the path of a .safetensors file")
        for name, t in load_file(os.fspath(path), device=device).items():
            if name in out:
                raise InputError(f"tensor '{name}' appears in more than one shard ({path}); the shards overlap")
            out[name] = t
    return out
