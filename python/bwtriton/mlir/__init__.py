"""The one reader of printed MLIR (TTIR/TTGIR text), beside `bwtriton.ptx` for PTX.

Triton 3.6's Python bindings cannot compare values or erase ops, so passes and reports read the printed module:
- `syntax`: balanced splitting, attribute parameters, aliases (`#name = ...`), trailing `loc(...)`;
- `types`: `!ttg.memdesc<...>`, `tensor<...>`, element bit widths (the one type parser);
- `encodings`: CGA splits and TMEM encoding fields;
- `ops`: the op tree (results, operands, regions, walk order, source locations);
- `mma`: tcgen05 MMA ops (`MMA_OPS`) and their operand types; `dot_scaled`: one `tt.dot_scaled` op;
- `module`: MLIR contexts, loading files, and the print/edit/re-parse round trip (`reparse`).
Everything except `module` is pure text and needs no MLIR context.
"""
from __future__ import annotations

from .module import load_module, module_attr_int, new_context, reparse, walk_ops
from .syntax import matching_close, parse_aliases, parse_attr_params, resolve_alias, split_top_level, strip_loc
from .types import MemDesc, TensorType, element_bits, parse_memdesc, parse_type

__all__ = ["load_module", "module_attr_int", "new_context", "reparse", "walk_ops", "matching_close",
           "parse_aliases", "parse_attr_params", "resolve_alias", "split_top_level", "strip_loc", "MemDesc",
           "TensorType", "element_bits", "parse_memdesc", "parse_type"]
