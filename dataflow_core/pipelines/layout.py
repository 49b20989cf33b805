"""Every table of a pipeline, named in one place.

Sinks, gates, diagrams, the plugin and maintenance ask this module for a table's name instead
of spelling it, and a pipeline's tables are a list (`pipeline_tables`), never a name prefix:
pipeline `billing` and a pipeline `billing_eu` share no table, although every one of
`billing_eu`'s names starts with `billing_`.

Per stage (named after its output): the current results `<output>`, the pane log
`<output>_panes`, the live state `<output>__state`, a backfill's plan of corrections
`<output>__corrections`, and the output gates' quarantines `<output>_panes_quarantine` and
`<output>_results_quarantine`. Per pipeline: the refused input rows `<pipeline>__quarantine`
and the micro-batches' seen event ids `<pipeline>__seen_ids`. Shared by every pipeline (each
row names its pipeline): `dataflow_runs`, `dataflow_watermarks`, `dataflow_batches`. The
input table is the user's, named by the pipeline (`PipelineSpec.input_table`).

Pure: no Spark, so the CLI, the plugin and tests name tables without starting one.
"""

from __future__ import annotations

from typing import Protocol, Sequence


class StageSpec(Protocol):
    """What names a stage's tables (`pipelines.spec.StageSpec` has it): its output."""

    @property
    def output(self) -> str: ...


class PipelineSpec(Protocol):
    """What names a pipeline's tables (`pipelines.spec.PipelineSpec` has it). (Protocols, not
    imports: `spec` names tables through this module.)"""

    name: str
    stages: Sequence[StageSpec]

RUNS = "dataflow_runs"
"""Every run's start, end, ledger and decisions (`spark.sinks.runs`)."""
WATERMARKS = "dataflow_watermarks"
"""The watermark of each stage at each step of a run (`spark.sinks.runs`)."""
BATCHES = "dataflow_batches"
"""The batch log: micro-batches, locks and their versions (`spark.sinks.batches`)."""
SHARED = (BATCHES, RUNS, WATERMARKS)
"""The control tables every pipeline shares (one row names its pipeline)."""

Stage = StageSpec | str
"""A stage, or its output's name (what the plugin has from a URL)."""

GATE_QUARANTINE = "_quarantine"
"""What an output gate's quarantine adds to the name of what it checked (`gate_quarantine`)."""


def results(stage: Stage) -> str:
    """A stage's current results: a row per key and window."""
    return _output(stage)


def panes(stage: Stage) -> str:
    """A stage's pane log: every pane and retraction, append-only."""
    return f"{_output(stage)}_panes"


def state(stage: Stage) -> str:
    """A stage's live state per key (micro-batches)."""
    return f"{_output(stage)}__state"


def plan(stage: Stage) -> str:
    """A stage's plans of corrections (backfills)."""
    return f"{_output(stage)}__corrections"


def results_check(stage: Stage) -> str:
    """What the results gate names its validation of a stage (and its quarantine after)."""
    return f"{_output(stage)}_results"


def gate_quarantine(checked: str) -> str:
    """The quarantine of an output gate's rows that broke a rule, for what it checked
    (`panes(stage)` or `results_check(stage)`)."""
    return f"{checked}{GATE_QUARANTINE}"


def quarantine(spec: "PipelineSpec") -> str:
    """The input rows the pipeline refused, with their reasons."""
    return f"{spec.name}__quarantine"


def seen_ids(spec: "PipelineSpec") -> str:
    """The event ids the pipeline has counted (duplicate detection)."""
    return f"{spec.name}__seen_ids"


def stage_tables(stage: Stage) -> list[str]:
    """Every table of one stage: results, pane log, live state, plans, gate quarantines."""
    return [results(stage), panes(stage), state(stage), plan(stage),
            gate_quarantine(panes(stage)), gate_quarantine(results_check(stage))]


def run_tables(spec: "PipelineSpec") -> list[str]:
    """Every table a run of the pipeline writes besides the shared control tables (the
    gates' quarantines are written by the gates, not by runs)."""
    names = [seen_ids(spec), quarantine(spec)]
    for stage in spec.stages:
        names += [results(stage), panes(stage), state(stage), plan(stage)]
    return names


def pipeline_tables(spec: "PipelineSpec") -> list[str]:
    """Every table that belongs to the pipeline alone (not its input, not `SHARED`): what
    maintenance compacts and vacuums for it, and no other pipeline's."""
    names = [seen_ids(spec), quarantine(spec)]
    for stage in spec.stages:
        names += stage_tables(stage)
    return names


def _output(stage: Stage) -> str:
    return stage if isinstance(stage, str) else stage.output
