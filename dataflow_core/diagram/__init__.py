"""`dataflow diagram`: the Dataflow paper's pane diagrams, drawn from scenarios or real runs.

- `History` (`history.py`): elements, the watermark's steps and the panes, in memory;
  `history_from_scenario` builds one by replaying a scenario on the reference runner.
- `render` / `save` (`draw.py`): the diagram as deterministic SVG or PNG bytes.
- `tables.py`: a history from the Delta tables of a real run (input, pane log, watermarks).
"""

from dataflow_core.diagram.draw import render, save
from dataflow_core.diagram.history import ElementRecord, History, WatermarkStep, history_from_scenario

__all__ = ["ElementRecord", "History", "WatermarkStep", "history_from_scenario", "render", "save"]
