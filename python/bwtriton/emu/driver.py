"""The emulated GPU's public module name: `from bwtriton.emu.driver import emulated_gpu` (the driver lives in
`bwtriton.emu.integration.driver`)."""
from __future__ import annotations

from .integration.driver import (B200_PROPERTIES, ENV_VAR, EmulatedDriver, activate, activate_from_env,
                                 active_driver, deactivate, emulated_gpu, target_from_env)

__all__ = ["B200_PROPERTIES", "ENV_VAR", "EmulatedDriver", "activate", "activate_from_env", "active_driver",
           "deactivate", "emulated_gpu", "target_from_env"]
