"""The emulator as Triton and pytest see it: the Triton driver (driver.py) and launcher (launcher.py), `run` (run.py)
with its argument packer (arguments.py), the pytest plugin (pytest_plugin.py) and the remap of "cuda" devices
onto the emulated GPU (device_remap.py)."""
