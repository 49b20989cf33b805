"""Quality gates: Great Expectations suites run on every stage of a pipeline run.

- **input** (`expectations/dataflow_input.json` + the pipeline's own input suite): the input
  rows of an event-time range, before a backfill or micro-batch uses them.
- **panes** (`expectations/dataflow_panes.json`): every pane of the windows a run touched.
- **results** (`expectations/dataflow_results.json`): the results table of those windows
  against what the pane log nets to.

Each gate derives the columns its suite checks, validates them through GE (a file-backed
project whose Data Docs HTML site is updated after every gate, once for all the stages
`gate_outputs` checks; see `quality.docs`), copies
the rows that break a row-level rule into a quarantine table with the reasons, and returns a
`GateOutcome`; `GateOutcome.raise_if_failed()` raises `GateFailed` whose one-line message says
which expectations failed on how many rows.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from typing import TYPE_CHECKING, Iterable, Mapping

from dataflow_core.pipelines import layout
from dataflow_core.quality.input_gate import gate_input, input_frame, input_rules
from dataflow_core.quality.outcome import GateFailed, GateOutcome, docs_dir_of, spec_of
from dataflow_core.quality.output_gates import gate_panes, gate_results, pane_checks, results_checks, touched_panes

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from dataflow_core.pipelines import PipelineSpec, StageSpec

_log = logging.getLogger("dataflow")

__all__ = [
    "GateFailed", "GateOutcome", "gate_input", "gate_outputs", "gate_panes", "gate_results", "input_frame",
    "input_rules", "pane_checks", "results_checks", "touched_panes",
]


def gate_outputs(
    spark: "SparkSession",
    pipeline: "str | PipelineSpec",
    run_ids: Iterable[str] | None,
    run_id: str,
    docs_dir: str | os.PathLike[str] | None = None,
    say=None,
    written: "Mapping[str, int] | None" = None,
) -> list[GateOutcome]:
    """The pane gate of every stage, and the results gate of every stage with a results
    table, for the windows the runs `run_ids` touched. Stages without a pane log yet (the
    runs emitted nothing there) are reported and skipped.

    `written`: how many panes and retractions the runs wrote per stage output. A stage that
    the runs wrote to but whose gate checked no pane fails (a gate over nothing is no gate:
    the run ids do not match the pane log's, or the panes are not where they should be).

    The Data Docs site is updated once, after the last validation (`build_data_docs`)."""
    from dataflow_core.quality.validate import build_data_docs
    from dataflow_core.spark.platform.tables import table_exists

    say = say or _log.info
    spec = spec_of(pipeline)
    ids = None if run_ids is None else list(run_ids)
    wrote = dict(written or {})
    outcomes: list[GateOutcome] = []
    for stage in spec.stages:
        expected = int(wrote.get(stage.output, 0) or 0)
        if not table_exists(spark, layout.panes(stage)):
            if expected:
                outcomes.append(_nothing_checked(stage, ids, expected, "its pane log does not exist"))
                say(outcomes[-1].summary())
                continue
            say(f"stage {stage.output}: no pane log ({layout.panes(stage)}) yet, nothing to check")
            continue
        outcome = gate_panes(spark, stage, ids, run_id, spec.name, docs_dir, build_docs=False)
        if expected and outcome.rows == 0:
            outcome = replace(outcome, problem=(
                f"0 panes checked although run(s) {', '.join(sorted(set(ids or []))) or '-'} wrote {expected:,} "
                f"panes and retractions to {layout.panes(stage)}: the gate's run ids do not match the pane log's"))
        outcomes.append(outcome)
        for line in outcomes[-1].lines():
            say(line)
        if stage.keeps_results and table_exists(spark, layout.results(stage)):
            outcomes.append(gate_results(spark, stage, ids, run_id, spec.name, docs_dir, build_docs=False))
            for line in outcomes[-1].lines():
                say(line)
    reports = build_data_docs(docs_dir_of(spark, docs_dir), [o.report for o in outcomes])
    outcomes = [replace(o, report=r) for o, r in zip(outcomes, reports)]
    index = next((r.docs_index for r in reports if r.docs_index), None)
    if index:
        say(f"Data Docs: {index}")
    return outcomes


def _nothing_checked(stage: "StageSpec", ids, expected: int, why: str) -> GateOutcome:
    from dataflow_core.quality.validate import ValidationReport

    empty = ValidationReport(suite=layout.panes(stage), success=True, outcomes=())
    return GateOutcome("panes", layout.panes(stage), empty, 0, 0, None,
                       problem=f"0 panes checked although run(s) {', '.join(sorted(set(ids or []))) or '-'} "
                               f"wrote {expected:,} panes and retractions: {why}")
