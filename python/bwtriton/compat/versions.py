"""Which Triton releases bwtriton supports, and which one is installed (read from package metadata, so that
`import bwtriton` does not import Triton)."""
from __future__ import annotations

import functools
import os
import re
from importlib import metadata

from ..errors import BwTritonError

#: The Triton releases bwtriton is tested on, oldest first.
SUPPORTED = ("3.6.0", "3.7.1", "3.8.0", "3.9.0")
#: The same range as a requirement (pyproject.toml states it too; tests/compat pins that they agree).
SUPPORTED_RANGE = ">=3.6.0,<3.10"
#: Set to 1 to run on a Triton outside `SUPPORTED` anyway (untested: expect errors).
ENV_ALLOW_UNSUPPORTED = "BWTRITON_ALLOW_UNSUPPORTED_TRITON"

TritonVersion = tuple[int, int, int]


class UnsupportedTritonError(BwTritonError):
    """The installed Triton is not one bwtriton supports."""


def parse_version(text: str) -> TritonVersion:
    """'3.9.0', '3.7.1+git1234', '3.8.0rc1' -> (3, 9, 0); a text with no major.minor is a ValueError."""
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
    if not m:
        raise ValueError(f"not a Triton version: {text!r}")
    return int(m[1]), int(m[2]), int(m[3] or 0)


@functools.lru_cache(maxsize=1)
def installed() -> TritonVersion:
    """The installed Triton's version; `UnsupportedTritonError` when Triton is not installed."""
    try:
        return parse_version(metadata.version("triton"))
    except metadata.PackageNotFoundError:
        raise UnsupportedTritonError(f"Triton is not installed: pip install 'triton{SUPPORTED_RANGE}' "
                                     f"(bwtriton is tested on {', '.join(SUPPORTED)})") from None


def installed_text() -> "str | None":
    """The installed Triton's version string as its package states it, or None when Triton is not installed."""
    try:
        return metadata.version("triton")
    except metadata.PackageNotFoundError:
        return None


def is_supported(version: "TritonVersion | str") -> bool:
    """Whether `version` is a release of a supported minor line (3.6.x - 3.9.x)."""
    version = parse_version(version) if isinstance(version, str) else version
    return any(version[:2] == parse_version(v)[:2] for v in SUPPORTED)


def check_supported() -> TritonVersion:
    """The installed version, or `UnsupportedTritonError` naming the supported range and how to proceed."""
    version = installed()
    if is_supported(version) or os.environ.get(ENV_ALLOW_UNSUPPORTED) == "1":
        return version
    text = ".".join(map(str, version))
    raise UnsupportedTritonError(
        f"Triton {text} is not supported: bwtriton is tested on Triton {', '.join(SUPPORTED)}. Install one of "
        f"those (pip install 'triton{SUPPORTED_RANGE}'), or set {ENV_ALLOW_UNSUPPORTED}=1 to try {text} untested")


def warn_if_unsupported() -> None:
    """At import: a warning (not an error, so that `bwtriton doctor` can still say what is wrong) when the
    installed Triton is outside the supported range; compiling then raises `UnsupportedTritonError`."""
    text = installed_text()
    if text is None or is_supported(text) or os.environ.get(ENV_ALLOW_UNSUPPORTED) == "1":
        return
    import warnings
    warnings.warn(f"bwtriton is tested on Triton {', '.join(SUPPORTED)}, not {text}: compiling will fail with "
                  f"an error until a supported Triton is installed (pip install 'triton{SUPPORTED_RANGE}') or "
                  f"{ENV_ALLOW_UNSUPPORTED}=1 is set; `bwtriton doctor` shows the installation", stacklevel=3)


def at_least(major: int, minor: int) -> bool:
    """Whether the installed Triton is `major.minor` or newer."""
    return installed()[:2] >= (major, minor)
