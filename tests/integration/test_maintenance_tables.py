"""Maintenance selects a pipeline's tables by their list (`pipelines.layout`), not by a name
prefix: of two pipelines `<name>` and `<name>_eu`, maintaining the first OPTIMIZEs and VACUUMs
its own tables and none of the second's, although all of those start with `<name>_`."""

from __future__ import annotations

import itertools

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import SumFn
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.triggers import AfterWatermark
from dataflow_core.model.watermarks import HeuristicWatermark
from dataflow_core.model.windows import FixedWindows
from dataflow_core.pipelines import PipelineSpec, StageSpec, layout, register
from dataflow_core.spark.platform.tables import table_path, write_table
from tests.integration.test_microbatch import in_warehouse

_names = itertools.count()


def _pipeline(name: str) -> PipelineSpec:
    return register(PipelineSpec(
        name=name, input_table=f"{name}_in", key={"ad_id": "ad_id"}, value="v", quality_suite=None,
        partition_column=None, watermark=lambda: HeuristicWatermark(bound=60_000),
        stages=(StageSpec(name, WindowingStrategy(
            FixedWindows(600_000), AfterWatermark(), AccumulationMode.ACCUMULATING, 0, SumFn()), ("ad_id",), "bigint"),),
    ))


def _operations(spark, table: str) -> list[str]:
    from delta.tables import DeltaTable

    return [r["operation"] for r in DeltaTable.forPath(spark, table_path(spark, table)).history().collect()]


def test_maintaining_a_pipeline_touches_none_of_a_pipeline_named_with_its_name_as_prefix(spark, monkeypatch, tmp_path):
    """In a warehouse of its own: maintenance also compacts the warehouse's shared tables
    (`layout.SHARED`), which in the worker's warehouse hold every earlier test's runs."""
    with in_warehouse(spark, tmp_path / "wh"):
        _maintain_one_of_two(spark, monkeypatch)


def _maintain_one_of_two(spark, monkeypatch) -> None:
    from dataflow_core.airflow.maintenance import maintain_in

    base = f"t_maint_{next(_names)}"
    ours, theirs = _pipeline(base), _pipeline(f"{base}_eu")  # stages `<base>` and `<base>_eu`
    for spec in (ours, theirs):  # every table of each but the seen ids (maintenance expires those by their horizon)
        for table in [t for t in layout.pipeline_tables(spec) if t != layout.seen_ids(spec)] + [spec.input_table]:
            write_table(spark, spark.range(2).repartition(2), table, mode="append")  # two files: something to compact
    monkeypatch.setenv("DATAFLOW_VACUUM_RETENTION_HOURS", "0")
    # the test's own session (`maintain` would take the process's active one, which an earlier
    # test in this worker may have left on another session, and so another warehouse)
    done = maintain_in(spark, ours.name, lambda _m: None, None)
    mine = {t for t in layout.pipeline_tables(ours) if t != layout.seen_ids(ours)}
    assert set(done["tables"]) - set(layout.SHARED) == mine
    assert all(t.startswith(f"{base}_") or t == base for t in mine)
    for table in mine:
        assert "OPTIMIZE" in _operations(spark, table), table
    for table in [*layout.pipeline_tables(theirs), theirs.input_table, ours.input_table]:
        if table != layout.seen_ids(theirs):
            touched = [op for op in _operations(spark, table) if op.startswith(("OPTIMIZE", "VACUUM"))]
            assert touched == [], (table, touched)
