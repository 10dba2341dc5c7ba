"""Loading a kernel named on the command line (``FILE.py:KERNEL``) and turning its `BWTRITON_SPECS` entry plus
the command-line flags into `bwtriton.compile` keywords. Shared by `bwtriton compile` and `bwtriton emulate`, so
both read a kernel the same way and report the same errors."""
from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from .errors import InputError, suggest
from .userfiles import read_text

#: Keys a kernel file's ``BWTRITON_SPECS = {"kernel": {...}}`` entry may hold.
SPEC_KEYS = ("signature", "constexprs", "num_warps", "num_stages", "num_ctas", "divisible_by_16", "example")
_LAUNCH_DEFAULTS = {"num_warps": 4, "num_stages": 3, "num_ctas": 1}


def parse_kv(items: Sequence[str], what: str) -> dict[str, str]:
    """['a=1,b=2', 'c=3'] -> {'a': '1', 'b': '2', 'c': '3'}; a part without '=' is an `InputError`."""
    out = {}
    for item in items:
        for part in filter(None, (p.strip() for p in item.split(","))):
            key, sep, value = part.partition("=")
            if not sep or not key.strip() or not value.strip():
                raise InputError(f"{what} entries look like name=value, got {part!r}")
            out[key.strip()] = value.strip()
    return out


def constexpr_value(name: str, text: str, takes_string: bool = False) -> Any:
    """A --constexpr value: an integer, float, True/False or a quoted string; a bare word only where the kernel's
    parameter defaults to a string (FMT=e4m3), since elsewhere it is a typo Triton would fail on obscurely."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return ast.literal_eval(text)
    if takes_string:
        return text
    raise InputError(f"--constexpr {name}={text}: a constexpr value is an integer, a float, True/False or a "
                     f"quoted string (e.g. {name}=128, or {name}='{text}' if the kernel takes a string)")


def int_values(items: Sequence[str], what: str) -> dict[str, int]:
    """--example M=200,N=512 -> {'M': 200, 'N': 512}; a value that is not an integer is an error."""
    out = {}
    for key, value in parse_kv(items, what).items():
        try:
            out[key] = int(value, 0)
        except ValueError:
            raise InputError(f"{what} {key}={value}: the value must be an integer (e.g. {key}=256)") from None
    return out


def import_kernel_file(file: "str | Path") -> Any:
    """Import a kernel file by path: the one loader of `bwtriton compile`, `emulate` and `snapshot`.

    The module is registered in `sys.modules` (Triton's @jit inspects the defining module) under a name derived
    from the path, size and mtime, so importing an unchanged file again returns the same module and an edited one
    is imported afresh. Its folder is on `sys.path` while it runs (kernel files import their neighbours). A
    failing import is an `InputError` quoting the file's own error, without our frames."""
    path = Path(file).resolve()
    stat = path.stat()
    digest = hashlib.sha1(f"{path}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    mod_name = f"_bwtriton_user_{digest}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    module_spec = importlib.util.spec_from_file_location(mod_name, path)
    if module_spec is None or module_spec.loader is None:
        raise InputError(f"{file}: cannot import it (not a Python file; name a .py file)")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[mod_name] = module
    sys.path.insert(0, str(path.parent))
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:  # the user's file failed to import: say where and why, without our frames
        del sys.modules[mod_name]
        first = (str(exc).strip().splitlines() or [""])[0]
        raise InputError(f"{file}: importing it failed: {type(exc).__name__}: {first} (fix the file, or leave "
                         f"it out)") from None
    finally:
        sys.path.remove(str(path.parent))
    return module


#: Decorators that make a function a Triton kernel (`from triton import jit` gives the bare name).
_JIT_DECORATORS = {"jit", "triton.jit", "gluon.jit", "triton.experimental.gluon.jit"}


def _decorator_name(node: ast.expr) -> str:
    """'triton.jit' for `@triton.jit` and `@triton.jit(...)`; '' for anything that is no dotted name."""
    node = node.func if isinstance(node, ast.Call) else node
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    return ".".join([node.id, *reversed(parts)])


def kernel_file_contents(source: str) -> set[str]:
    """What makes Python source a kernel file, read by parsing it, never by running it: a subset of
    {'specs' (a top-level BWTRITON_SPECS), 'jit' (a @triton.jit / @gluon.jit function), 'corpus' (a top-level
    corpus_kernels())}. Source that does not parse has none of them."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    found = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        if any(isinstance(t, ast.Name) and t.id == "BWTRITON_SPECS" for t in targets):
            found.add("specs")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "corpus_kernels":
            found.add("corpus")
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                _decorator_name(d) in _JIT_DECORATORS for d in node.decorator_list):
            found.add("jit")
    return found


def _what(spec: str) -> str:
    """What a command-line input that is no FILE.py:KERNEL is, for the error saying so."""
    if Path(spec).is_dir():
        return "a folder"
    if spec.endswith(".py"):
        return "a Python file without :KERNEL"
    return f"a {Path(spec).suffix} file" if Path(spec).suffix else "no file suffix"


def load_kernel(spec: str) -> tuple[Any, dict[str, Any]]:
    """'path/file.py:kernel' -> (the @triton.jit function, its checked BWTRITON_SPECS entry or {})."""
    path, sep, name = spec.rpartition(":")
    if not sep or not path.endswith(".py") or not name:
        raise InputError(f"expected FILE.py:KERNEL or a .ttir/.ttgir file, got {spec!r} ({_what(spec)}; name the "
                         f"kernel as FILE.py:KERNEL, or pass IR written by `bwtriton compile -o DIR`)")
    file = Path(path)
    if file.is_dir():
        raise InputError(f"{file} is a folder, not a Python file (FILE.py:KERNEL names a kernel in a .py file)")
    if not file.is_file():
        raise InputError(f"{file}: no such file (check the path of FILE.py:KERNEL)")
    read_text(file, "Python")  # binary, empty or unreadable files fail here with their own message
    module = import_kernel_file(file)
    kernels = [n for n, v in vars(module).items() if type(v).__name__.endswith("JITFunction")]
    fn = getattr(module, name, None)
    if fn is None or name not in kernels:
        what = "has no kernel" if fn is None else "is not a @triton.jit kernel:"
        raise InputError(f"{file} {what} {name!r}; kernels there: {', '.join(kernels) or 'none'}")
    specs = getattr(module, "BWTRITON_SPECS", {})
    if not isinstance(specs, Mapping) or not isinstance(specs.get(name, {}), Mapping):
        raise InputError(f"{file}: BWTRITON_SPECS must map kernel names to dicts of {', '.join(SPEC_KEYS)}")
    entry = dict(specs.get(name, {}))
    unknown = [k for k in entry if k not in SPEC_KEYS]
    if unknown:
        raise InputError(f"{file}: BWTRITON_SPECS[{name!r}] has unknown key(s) {', '.join(map(repr, unknown))}."
                         f"{suggest(unknown[0], SPEC_KEYS)} Valid keys: {', '.join(SPEC_KEYS)}.")
    return fn, entry


def add_kernel_arguments(parser: argparse.ArgumentParser, *, launch: Sequence[str] = tuple(_LAUNCH_DEFAULTS)) -> None:
    """The flags that describe a FILE.py:KERNEL compile (types, constexprs, launch numbers, divisibility)."""
    parser.add_argument("--signature", action="append", default=[], metavar="NAME=TYPE,...",
                        help="argument types, e.g. a_ptr=*fp16,M=i32 (repeatable)")
    parser.add_argument("--constexpr", action="append", default=[], metavar="NAME=VALUE,...")
    for key in launch:
        parser.add_argument(f"--{key.replace('_', '-')}", type=int, dest=key)
    parser.add_argument("--example", action="append", default=[], metavar="NAME=INT,...",
                        help="integer argument values of a launch (e.g. M=200,N=512,K=256): arguments are "
                             "specialised as 16-byte divisible as @triton.jit would for them")
    parser.add_argument("--divisible-by-16", metavar="NAME,...",
                        help="exactly these arguments are 16-byte divisible ('' for none); default: all pointers "
                             "and integers, or what --example implies")


def compile_keywords(fn: Any, spec: Mapping[str, Any], args: argparse.Namespace, label: str) -> dict[str, Any]:
    """`bwtriton.compile` keywords for `fn`: the BWTRITON_SPECS entry overridden by the command-line flags."""
    sig = {**spec.get("signature", {}), **parse_kv(args.signature, "--signature")}
    if not sig:
        raise InputError(f"no signature for {label}: pass --signature a_ptr=*fp16,M=i32,... or declare "
                         f"BWTRITON_SPECS = {{'{fn.__name__}': {{'signature': ..., 'constexprs': ...}}}} "
                         f"in the kernel file")
    string_params = {p.name for p in getattr(fn, "params", []) if p.has_default and isinstance(p.default, str)}
    consts = {**spec.get("constexprs", {}),
              **{k: constexpr_value(k, v, k in string_params) for k, v in parse_kv(args.constexpr,
                                                                                  "--constexpr").items()}}
    out: dict[str, Any] = {"signature": sig, "constexprs": consts}
    for key, default in _LAUNCH_DEFAULTS.items():
        value = getattr(args, key, None)
        out[key] = value if value is not None else spec.get(key, default)
    if args.example and args.divisible_by_16 is not None:
        raise InputError("give --example (values to specialise for) or --divisible-by-16 (the names), not both")
    if args.divisible_by_16 is not None:
        out["divisible_by_16"] = [n.strip() for n in args.divisible_by_16.split(",") if n.strip()]
    elif args.example:
        out["example"] = int_values(args.example, "--example")
    else:
        out.update({k: spec[k] for k in ("divisible_by_16", "example") if k in spec})
    return out
