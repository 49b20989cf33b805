"""One table layout: every table of a pipeline is named by `pipelines.layout`, a pipeline's
tables are a list that no other pipeline's shares (whatever the names' prefixes), and the code
names no table by an inline f-string outside it."""

from __future__ import annotations

import re
from pathlib import Path

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import SumFn
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.triggers import AfterWatermark
from dataflow_core.model.watermarks import HeuristicWatermark
from dataflow_core.model.windows import FixedWindows
from dataflow_core.pipelines import PipelineSpec, StageSpec, layout

PACKAGE = Path(__file__).resolve().parents[2] / "dataflow_core"


def _spec(name: str, *outputs: str) -> PipelineSpec:
    strategy = WindowingStrategy(FixedWindows(60_000), AfterWatermark(), AccumulationMode.ACCUMULATING, 0, SumFn())
    return PipelineSpec(name=name, input_table="shared_input", key={"k": "k"}, value="v", quality_suite=None,
                        partition_column=None, watermark=lambda: HeuristicWatermark(bound=1000),
                        stages=tuple(StageSpec(o, strategy, ("k",), "bigint", input_type=None if n == 0 else "bigint",
                                               from_upstream=None if n == 0 else (lambda p: [(p.key, p.value)]))
                                     for n, o in enumerate(outputs)))


def test_every_table_of_a_pipeline_is_named_once():
    spec = _spec("billing", "billing", "billing_daily")
    tables = layout.pipeline_tables(spec)
    assert len(tables) == len(set(tables))
    assert set(layout.run_tables(spec)) <= set(tables)
    assert {"billing", "billing_panes", "billing__state", "billing__corrections", "billing_panes_quarantine",
            "billing_results_quarantine", "billing__quarantine", "billing__seen_ids", "billing_daily_panes"} <= set(tables)
    assert spec.input_table not in tables and not set(layout.SHARED) & set(tables)
    assert layout.panes("billing") == layout.panes(spec.stages[0])


def test_a_pipeline_named_with_another_as_prefix_shares_no_table_with_it():
    ours, theirs = _spec("billing", "billing"), _spec("billing_eu", "billing_eu")
    assert all(t.startswith("billing_") for t in layout.pipeline_tables(theirs))  # the prefix rule's trap
    assert not set(layout.pipeline_tables(ours)) & set(layout.pipeline_tables(theirs))


_INLINE = re.compile(r'f["\'][^"\']*\}(_panes|__state|__corrections|__quarantine|__seen_ids|_results|_quarantine)\b')


def test_no_module_but_the_layout_spells_a_table_name():
    """A table's name comes from `layout`; an inline f-string naming one would drift from it."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "layout.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if _INLINE.search(line):
                found.append(f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}")
    assert found == []
