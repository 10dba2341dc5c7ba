"""`BWTRITON_EMULATE`, the environment switch for the emulated B200, read in this one place (importing bwtriton
activates the emulator when it is set: bwtriton/__init__.py; the Triton driver validates the target it names:
bwtriton.emu.integration.driver.target_from_env). Kept apart from bwtriton.emu so reading it imports nothing."""
from __future__ import annotations

import os
from typing import Optional

#: environment variable that turns emulation on (value: the target, e.g. sm_100a)
ENV_VAR = "BWTRITON_EMULATE"


def requested_emulation() -> Optional[str]:
    """The value of BWTRITON_EMULATE (stripped), or None when it is unset, empty or 0."""
    value = os.environ.get(ENV_VAR, "").strip()
    return None if value in ("", "0") else value
