"""bwtriton's B200 timing model: predicted (not measured) kernel times from the emulator's schedule and a
documented cost table. `emu.run(..., timing=True).timing` is a `Prediction`; docs/timing_model.md."""
from .costs import B200, B200Costs, Cost, costs_table_markdown
from .model import LABEL, Prediction, predict, scale_to_grid

__all__ = ["B200", "B200Costs", "Cost", "LABEL", "Prediction", "costs_table_markdown", "predict", "scale_to_grid"]
