"""A later stage's elements: the upstream stage's panes (pane-log rows, or results rows as
standing panes) turned into (key, value) elements by the stage's `from_upstream`, in
executors.

Each pane is rebuilt with the pane codec, metadata included, so a mapper sees on Spark the
`Pane` it sees under the reference runner. Each element carries the pane's timestamp as
its event time and the pane's retraction flag; `passthrough` columns (a replay's sub-step
and emission time) ride along."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Sequence

from dataflow_core.model.pane_codec import PANE_FIELDS, pane_from_row
from dataflow_core.model.pipeline import pane_elements
from dataflow_core.pipelines.spec import StageSpec
from dataflow_core.spark.platform.arrow import arrow_schema_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def elements_from_panes(
    panes: "DataFrame", upstream: StageSpec, stage: StageSpec, passthrough: Sequence[str] = ()
) -> "DataFrame":
    import pyarrow as pa

    up_keys = upstream.key_columns
    mapper = stage.from_upstream
    if mapper is None:
        raise ValueError(f"stage {stage.output!r} has no from_upstream mapper")
    key_types = {c: (panes.schema[c].dataType.simpleString() if c in panes.columns else "string")
                 for c in stage.key_columns}
    out_cols = [f"`{c}` {t}" for c, t in key_types.items()]
    out_cols += [f"value {stage.input_type}", "event_ms bigint", "retraction boolean"]
    out_cols += [f"`{c}` {panes.schema[c].dataType.simpleString()}" for c in passthrough]
    arrow_schema = arrow_schema_of(", ".join(out_cols))
    names = [*stage.key_columns, "value", "event_ms", "retraction", *passthrough]
    columns = [*up_keys, *PANE_FIELDS, *passthrough]

    def mapped(batches: Iterator["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
        for batch in batches:
            data = {c: batch.column(c).to_pylist() for c in columns}
            rows = []
            for i in range(batch.num_rows):
                key = tuple(data[c][i] for c in up_keys)
                pane = pane_from_row(key[0] if len(key) == 1 else key, {f: data[f][i] for f in PANE_FIELDS})
                extra = [data[c][i] for c in passthrough]
                for out_key, el in pane_elements(pane, mapper):
                    key_cols = list(out_key) if len(stage.key_columns) > 1 else [out_key]
                    rows.append(dict(zip(names, [*key_cols, el.value, el.timestamp, el.retraction, *extra])))
            yield pa.RecordBatch.from_pylist(rows, schema=arrow_schema)

    return panes.select(*columns).mapInArrow(mapped, ", ".join(out_cols))
