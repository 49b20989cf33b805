"""`make docs`: the paper's figures, regenerated from the scenarios in docs/figures/scenarios/.

`python -m dataflow_core.diagram.figures [SCENARIO_DIR [OUTPUT_DIR]]` replays each scenario on
the reference runner and writes its diagram as OUTPUT_DIR/<scenario file stem>.svg.
"""

from __future__ import annotations

import sys
from pathlib import Path

from dataflow_core.diagram.draw import render
from dataflow_core.diagram.history import history_from_scenario
from dataflow_core.errors import DataflowError
from dataflow_core.paths import checkout_root
from dataflow_core.scenario import load_scenario

# The figures are the repository's docs: by default the checkout's, installed the current
# directory's (a clone's root), never a path computed into site-packages.
REPO = checkout_root() or Path(".")
SCENARIOS = REPO / "docs" / "figures" / "scenarios"
FIGURES = REPO / "docs" / "figures"


def figure_svg(scenario_path: Path) -> bytes:
    return render(history_from_scenario(load_scenario(scenario_path)), "svg")


def generate(scenarios: Path = SCENARIOS, out: Path = FIGURES) -> list[Path]:
    paths = sorted(Path(scenarios).glob("*.yaml"))
    if not paths:
        raise DataflowError(f"{scenarios}: no scenario files (*.yaml)")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in paths:
        target = out / f"{path.stem}.svg"
        target.write_bytes(figure_svg(path))
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    scenarios = Path(args[0]) if args else SCENARIOS
    out = Path(args[1]) if len(args) > 1 else FIGURES
    try:
        written = generate(scenarios, out)
    except DataflowError as exc:
        print(f"make docs: error: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
