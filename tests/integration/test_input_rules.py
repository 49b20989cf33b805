"""Bad rows are quarantined, never fatal and never absorbed (issue 63): a value or key
expression that fails on a row (Spark 4's ANSI overflow, an index out of bounds), a NaN or an
infinite value, a row stamped after the processing time (2099, the year 10000) are each
quarantined with their reason while the rest of the batch counts, in a backfill and in a
micro-batch; the input gate and a backfill refuse the same rows at the skew limit (one home of
the rules, `model.input_rules`); tied deliveries pick the same first one in every run."""

from __future__ import annotations

import itertools
import json
from decimal import Decimal

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import SumFn
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import format_instant, parse_duration
from dataflow_core.model.triggers import AfterWatermark
from dataflow_core.model.watermarks import HeuristicWatermark
from dataflow_core.model.windows import FixedWindows
from dataflow_core.pipelines import PipelineSpec, StageSpec, register
from dataflow_core.spark.jobs.backfill import run_backfill
from dataflow_core.spark.jobs.microbatch import run_microbatch
from dataflow_core.spark.platform.tables import read_table
from tests.integration.test_backfill import DAY0, M

_names = itertools.count()
SKEW = 30 * M
YEAR_2099 = 4_070_908_800_000
YEAR_10000 = 253_402_300_800_000  # 10000-01-01: past what Python's datetime can hold
SCHEMA = "order_id string, shop_path string, w double, e bigint, i bigint"
WHERE = "order_id <> 'badwhere' OR CAST(shop_path AS INT) > 0"  # fails on the row 'badwhere' only


def orders_pipeline(name: str, value: str = "CAST(w AS DECIMAL(18,3))", value_type="decimal(28,3)",
                    quality_suite: str | None = None) -> PipelineSpec:
    """A shop's orders with its own column names; the key an expression that fails on a
    malformed path (ANSI `element_at` out of bounds), the value billing's decimal cast."""
    return register(PipelineSpec(
        name=name, input_table=f"{name}_in", key={"shop": "element_at(split(shop_path, '/'), 2)"},
        value=value, where=WHERE, event_time="ordered_at", ingest_time="received_at", event_id="order_id",
        max_skew=SKEW, watermark=lambda: HeuristicWatermark(bound=M), quality_suite=quality_suite,
        stages=(StageSpec(f"{name}_sum", WindowingStrategy(
            FixedWindows(10 * M), AfterWatermark(), AccumulationMode.ACCUMULATING, parse_duration("1h"), SumFn()),
            value_type=value_type),),
    ))


def write_orders(spark, table: str, rows: list[tuple], mode: str = "overwrite") -> None:
    """Rows (id, shop path, amount, event ms, ingest ms): times given in ms, so that instants
    Python cannot hold (the year 10000) can be written too."""
    from pyspark.sql import functions as F

    from dataflow_core.spark.platform.tables import write_table

    df = spark.createDataFrame(rows, SCHEMA)
    df = df.select("order_id", "shop_path", "w", F.timestamp_millis("e").alias("ordered_at"),
                   F.timestamp_millis("i").alias("received_at"))
    write_table(spark, df, table, mode=mode)


def reasons(spark, spec: PipelineSpec) -> dict[str, str]:
    return {r["order_id"]: r["quarantine_reason"]
            for r in read_table(spark, f"{spec.name}__quarantine").select("order_id", "quarantine_reason").collect()}


def sums(spark, spec: PipelineSpec) -> dict[str, Decimal]:
    """The first stage's results per key, over all its windows."""
    [key] = spec.stages[0].key_columns
    out: dict[str, Decimal] = {}
    for r in read_table(spark, spec.stages[0].output).collect():
        out[r[key]] = out.get(r[key], 0) + r["value"]
    return out


T = DAY0 + 3 * M
GOOD = [("g1", "shop/7", 1.5, T, T + 1000), ("g2", "shop/7", 2.25, T, T + 2000), ("g3", "shop/8", 4.0, T, T + 3000)]
POISON = [
    ("huge", "shop/7", 1e20, T, T + 1000),  # NUMERIC_VALUE_OUT_OF_RANGE under ANSI
    ("big", "shop/7", 1e15, T, T + 1000),
    ("nan", "shop/7", float("nan"), T, T + 1000),
    ("inf", "shop/7", float("inf"), T, T + 1000),
    ("badkey", "broken", 1.0, T, T + 1000),  # element_at(..., 2) out of bounds
    ("badwhere", "shop/7", 1.0, T, T + 1000),  # the pipeline's `where` fails on it
]
FUTURE = [
    ("in2099", "shop/7", 1.0, T, YEAR_2099),  # ingest time in 2099
    ("e10000", "shop/7", 1.0, YEAR_10000, T + 1000),  # event time in the year 10000
    ("i10000", "shop/7", 1.0, T, YEAR_10000),
]


def check_poison(got: dict[str, str]) -> None:
    assert set(got) >= {"huge", "big", "nan", "inf", "badkey", "badwhere"}
    for order_id in ("huge", "big", "badkey", "badwhere"):
        assert got[order_id].startswith("value_invalid: ") and "fails on this row" in got[order_id], got[order_id]
    # the expression that failed, and Spark's error on the row
    assert got["huge"].startswith("value_invalid: value (CAST(w AS DECIMAL(18,3))) fails on this row "
                                  "([NUMERIC_VALUE_OUT_OF_RANGE"), got["huge"]
    assert "cannot be represented as Decimal(18, 3)" in got["huge"]
    assert got["badkey"].startswith("value_invalid: key shop (element_at(split(shop_path, '/'), 2)) fails on this "
                                    "row ([INVALID_ARRAY_INDEX_IN_ELEMENT_AT"), got["badkey"]
    assert got["badwhere"].startswith(f"value_invalid: where ({WHERE}) fails on this row ([CAST_INVALID_INPUT]")
    assert got["nan"] in ("value_invalid", "value_invalid: value is NaN")  # Spark casts NaN to a null decimal
    assert got["inf"] in ("value_invalid", "value_invalid: value is infinite")


def test_poison_values_and_failing_keys_are_quarantined_and_the_rest_of_the_backfill_counts(spark, warehouse):
    from dataflow_core.airflow.plugin.app import render_page
    from dataflow_core.airflow.plugin.explorer import key_view, search_keys

    spec = orders_pipeline(f"t_poison_{next(_names)}")
    write_orders(spark, spec.input_table, GOOD + POISON)
    result = run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now="2024-05-01T12:00:00Z")
    check_poison(reasons(spark, spec))
    assert result.ledger_ok and result.ledger["quarantined"] == len(POISON) and result.ledger["accepted"] == 3
    assert sums(spark, spec) == {"7": Decimal("3.750"), "8": Decimal("4.000")}
    # the explorer finds a Spark-only key expression's panes as the runs wrote them, and
    # recomputes no key with DataFusion (which has no `split`): it says so instead
    assert [k["key"] for k in search_keys(spec, None, "", warehouse=str(warehouse))] == ["7", "8"]
    view = key_view(spec.name, None, "7", warehouse=str(warehouse))
    assert view.counts["panes"] == 1 and [str(r["value"]) for r in view.results] == ["3.750"]
    assert view.counts["read"] == 0 and "element_at" in view.note and "dataflow diagram" in view.note, view.note
    page = render_page(spec.name, None, "7", "", "", str(warehouse))
    assert 'id="diagram"' in page and 'id="elements-note"' in page and 'id="error"' not in page


def test_the_expressions_the_explorer_evaluates_give_the_values_spark_gives(spark, warehouse):
    """Each expression `query.spark_dialect` lets DataFusion evaluate gives Spark's value on
    every row (nulls, short strings included); some it refuses give other values silently."""
    from pyspark.sql import functions as F

    from dataflow_core.query import query
    from dataflow_core.spark.platform.tables import write_table
    from tests.core.test_spark_dialect import AGREE

    table = f"t_dialect_{next(_names)}"
    rows = [(0, "abc", "a", "1", "de", 7, 5, "x/y/z", T, 1.5), (1, "d", None, "2", "fr", -3, -7, "p", T + M, None),
            (2, None, "x", None, None, None, None, None, None, 2.5), (3, "", "y", "b", "It", 0, 0, "", T, -0.5)]
    df = spark.createDataFrame(rows, "id int, shop_code string, a string, b string, country string, shop_id bigint, "
                                     "n int, path string, e bigint, amount double")
    write_table(spark, df.withColumn("ordered_at", F.timestamp_millis("e")).drop("e"), table)

    def both(expression: str) -> tuple[list, list]:
        ours = [r[0] for r in spark.sql(f"SELECT CAST(({expression}) AS STRING) FROM {table} ORDER BY id").collect()]
        fast = query(f"SELECT CAST(({expression}) AS VARCHAR) FROM {table} ORDER BY id", str(warehouse))
        return ours, fast.table.column(0).to_pylist()

    for expression in AGREE:
        if expression == "ordered_at":
            continue  # a timestamp agrees as a value, not as text (each engine writes its own)
        ours, fast = both(expression)
        assert ours == fast, (expression, ours, fast)
    for expression in ("substr(shop_code, 0, 2)", "substr(shop_code, -2)", "concat(a, b)", "n / 2"):
        ours, fast = both(expression)
        assert ours != fast, (expression, ours)


def test_a_double_value_that_is_nan_or_infinite_is_invalid(spark):
    spec = orders_pipeline(f"t_nan_{next(_names)}", value="w * 2", value_type=float)
    write_orders(spark, spec.input_table, GOOD + POISON[2:4])
    result = run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now="2024-05-01T12:00:00Z")
    got = reasons(spark, spec)
    assert got == {"nan": "value_invalid: value is NaN", "inf": "value_invalid: value is infinite"}
    assert result.ledger["accepted"] == 3 and sums(spark, spec) == {"7": 7.5, "8": 8.0}


def test_future_dated_rows_are_quarantined_and_move_nothing(spark):
    spec = orders_pipeline(f"t_future_rows_{next(_names)}")
    write_orders(spark, spec.input_table, GOOD + FUTURE)
    result = run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now="2024-05-01T12:00:00Z")
    got = reasons(spark, spec)
    assert "future_dated" in got["in2099"] and "future_dated" in got["i10000"]
    assert "event_time_beyond_skew" in got["e10000"] and "future_dated" in got["e10000"]
    assert result.ledger_ok and result.ledger["accepted"] == 3
    assert sums(spark, spec) == {"7": Decimal("3.750"), "8": Decimal("4.000")}


def test_a_micro_batch_quarantines_poison_and_future_rows_and_its_watermark_stays_in_the_present(spark):
    spec = orders_pipeline(f"t_live_poison_{next(_names)}")
    write_orders(spark, spec.input_table, GOOD + POISON + FUTURE)
    now = T + 20 * M
    result = run_microbatch(spark, spec.name, now=format_instant(now))
    got = reasons(spark, spec)
    check_poison(got)
    assert {"in2099", "e10000", "i10000"} <= set(got)
    assert result.ledger_ok and result.ledger["accepted"] == 3
    assert result.ledger["quarantined"] == len(POISON) + len(FUTURE)
    [batch] = read_table(spark, "dataflow_batches").where(f"pipeline = '{spec.name}' AND status = 'finished'").collect()
    marks = json.loads(batch["watermarks"])
    assert marks and all(wm <= now for wm in marks.values()), marks
    # the good rows count: a later row moves the watermark past their window, which fires
    write_orders(spark, spec.input_table, [("later", "shop/9", 1.0, DAY0 + 23 * M, DAY0 + 23 * M + 1000)], "append")
    assert run_microbatch(spark, spec.name, now=format_instant(DAY0 + 25 * M)).ledger_ok
    assert sums(spark, spec) == {"7": Decimal("3.750"), "8": Decimal("4.000")}


def test_the_input_gate_and_a_backfill_refuse_the_same_rows_at_the_skew_limit(spark, tmp_path):
    from pyspark.sql import functions as F

    from dataflow_core.quality.gates import gate_input

    spec = orders_pipeline(f"t_skew_{next(_names)}")
    i = T
    rows = [("at", "shop/7", 1.0, i + SKEW, i), ("past", "shop/7", 2.0, i + SKEW + 1, i),
            ("under", "shop/7", 4.0, i + SKEW - 1, i), ("g", "shop/7", 8.0, i, i)]
    write_orders(spark, spec.input_table, rows)
    # and one 0.5 ms past the limit: equal to it in whole milliseconds, as every edge compares
    from dataflow_core.spark.platform.tables import write_table

    half = read_table(spark, spec.input_table).where("order_id = 'at'").select(
        F.lit("half").alias("order_id"), "shop_path", "w", (F.col("ordered_at") + F.expr("INTERVAL 500 MICROSECONDS"))
        .alias("ordered_at"), "received_at")
    write_table(spark, half, spec.input_table, mode="append")
    gate = gate_input(spark, spec, "2024-05-01", "2024-05-02", "gate-skew", docs_dir=tmp_path / "docs",
                      now=DAY0 + 12 * 3600_000)
    by_gate = reasons(spark, spec)
    assert by_gate == {"past": "event_time_beyond_skew"} and gate.quarantined == 1
    result = run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now="2024-05-01T12:00:00Z")
    assert result.ledger["quarantined"] == 1 and result.ledger["accepted"] == 4
    assert read_table(spark, f"{spec.name}__quarantine").count() == 1, "the backfill refused the gate's row, no other"
    assert sums(spark, spec) == {"7": Decimal("14.000")}  # at, half, under and g; past is refused


def test_tied_deliveries_pick_the_same_first_one_whatever_the_order_rows_are_read_in(spark):
    from dataflow_core.model.input_rules import ProcessingTime
    from dataflow_core.spark.input.rows import elements, tag_rows

    spec = orders_pipeline(f"t_ties_{next(_names)}")
    rows = [("dup", "shop/7", float(n), T, T + 1000) for n in range(1, 7)]
    picked = set()
    for ordering in (rows, rows[::-1], rows[2:] + rows[:2]):
        from pyspark.sql import functions as F

        df = spark.createDataFrame(ordering, SCHEMA).repartition(3).select(
            "order_id", "shop_path", "w", F.timestamp_millis("e").alias("ordered_at"),
            F.timestamp_millis("i").alias("received_at"))
        [el] = elements(spec, tag_rows(spark, spec, df, ProcessingTime(T + M))).collect()
        picked.add(el["value"])
    assert len(picked) == 1


# --- the explorer and `dataflow diagram --pipeline` on a pipeline of its own columns --------------------


def shop_orders(name: str) -> PipelineSpec:
    """docs/write-your-own-pipeline.md's orders: `order_id`, `country`, `amount decimal(10,2)`,
    `ordered_at`, `received_at`, keyed by an expression."""
    return register(PipelineSpec(
        name=name, input_table=f"{name}_in", key={"region": "upper(country)"}, value="amount",
        event_time="ordered_at", ingest_time="received_at", event_id="order_id", max_skew=SKEW,
        watermark=lambda: HeuristicWatermark(bound=M),
        stages=(StageSpec(f"{name}_sum", WindowingStrategy(
            FixedWindows(10 * M), AfterWatermark(), AccumulationMode.ACCUMULATING, parse_duration("1h"), SumFn()),
            value_type="decimal(20,2)"),),
    ))


def write_shop_orders(spark, spec: PipelineSpec) -> None:
    from pyspark.sql import functions as F

    from dataflow_core.spark.platform.tables import write_table

    rows = [("o1", "de", Decimal("10.25"), T, T + 1000), ("o1", "de", Decimal("10.25"), T, T + 5000),  # a duplicate
            ("o2", "de", Decimal("1.10"), T + M, T + M + 1000), ("o3", "fr", Decimal("3.00"), T, T + 1000),
            ("o4", "de", None, T, T + 1000)]  # no amount: value_invalid
    df = spark.createDataFrame(rows, "order_id string, country string, amount decimal(10,2), e bigint, i bigint")
    write_table(spark, df.select("order_id", "country", "amount", F.timestamp_millis("e").alias("ordered_at"),
                                 F.timestamp_millis("i").alias("received_at")), spec.input_table)


def test_the_explorer_reads_a_pipeline_of_its_own_columns_and_a_key_expression(spark, warehouse):
    from dataflow_core.airflow.plugin.explorer import key_view, search_keys

    spec = shop_orders(f"t_shop_{next(_names)}")
    write_shop_orders(spark, spec)
    run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now="2024-05-01T12:00:00Z")
    assert sums(spark, spec) == {"DE": Decimal("11.35"), "FR": Decimal("3.00")}
    assert [k["key"] for k in search_keys(spec, None, "", warehouse=str(warehouse))] == ["DE", "FR"]
    view = key_view(spec.name, None, "DE", warehouse=str(warehouse))
    assert view.counts["read"] == 4 and view.counts["accepted"] == 2
    assert view.counts["duplicates"] == 1 and view.counts["quarantined"] == 1
    assert view.counts["panes"] == 1 and [str(r["value"]) for r in view.results] == ["11.35"]


def test_a_hostile_key_renders_escaped_in_the_explorer_and_the_key_search_counts_once_per_version(
        spark, warehouse, monkeypatch):
    """Issue 64, finding 9: a key with markup and unbalanced math text is drawn and listed as
    text (it was a 500); the key search counts the pane log once per table version, not on
    every page load and keystroke."""
    from pyspark.sql import functions as F

    import dataflow_core.airflow.plugin.explorer as explorer
    from dataflow_core.airflow.plugin.app import render_page
    from dataflow_core.spark.platform.tables import write_table

    spec = shop_orders(f"t_shop_hostile_{next(_names)}")
    hostile = "<img src=x onerror=alert(1)>ad-$\\frac$"
    rows = [("o1", hostile, Decimal("2.50"), T, T + 1000), ("o2", "fr", Decimal("3.00"), T, T + 1000)]
    df = spark.createDataFrame(rows, "order_id string, country string, amount decimal(10,2), e bigint, i bigint")
    write_table(spark, df.select("order_id", "country", "amount", F.timestamp_millis("e").alias("ordered_at"),
                                 F.timestamp_millis("i").alias("received_at")), spec.input_table)
    run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now="2024-05-01T12:00:00Z")
    key = hostile.upper()  # the pipeline's key is upper(country)

    page = render_page(spec.name, None, key, "", "", str(warehouse))
    assert 'id="diagram"' in page and 'id="error"' not in page, page[-2000:]
    assert "<IMG" not in page and "&lt;IMG SRC=X ONERROR=ALERT(1)&gt;AD-$\\FRAC$" in page

    queries: list[str] = []
    counted = explorer.query

    def query(sql, *args, **kwargs):
        queries.append(sql)
        return counted(sql, *args, **kwargs)

    monkeypatch.setattr(explorer, "query", query)  # counts the reads, still reads the table
    for text in ("", "f", "fr", "<img", "nothing"):
        found = explorer.search_keys(spec, None, text, warehouse=str(warehouse))
        assert [k["key"] for k in found] == [k for k in (key, "FR") if text.lower() in k.lower()], (text, found)
    assert sum("GROUP BY" in q for q in queries) <= 1, queries  # none if the page above counted already
    spark.sql(f"DELETE FROM `{spec.stages[0].output}_panes` WHERE region = 'FR'")  # a new version
    assert [k["key"] for k in explorer.search_keys(spec, None, "", warehouse=str(warehouse))] == [key]


def test_dataflow_diagram_from_tables_reads_the_warehouse_and_the_pipelines_own_columns(spark, warehouse, tmp_path,
                                                                                        capsys):
    from dataflow_core.cli import main as cli

    spec = shop_orders(f"t_shop_diagram_{next(_names)}")
    write_shop_orders(spark, spec)
    run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now="2024-05-01T12:00:00Z")
    for table in (spec.input_table, f"{spec.stages[0].output}_panes", "dataflow_watermarks"):
        spark.sql(f"DROP TABLE IF EXISTS `{table}`")  # as a fresh command finds them: in the warehouse only
    out = tmp_path / "de.svg"
    rc = cli(["diagram", "--pipeline", spec.name, "--key", "DE", "--from", "2024-05-01T00:00:00Z",
              "--to", "2024-05-01T01:00:00Z", "-o", str(out), "--warehouse", str(warehouse)])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "(1 key(s), 4 elements, 1 panes, 0 retractions)" in err
    assert out.read_text().count("<svg") == 1


def test_a_rule_of_the_pipelines_own_suite_that_fails_on_a_row_quarantines_that_row_only(spark, tmp_path):
    """The suite compares a text column with a number: under ANSI, Spark casts the text and
    raises on 'three'. That row is quarantined naming the rule; the job and the rest count."""
    import json

    from pyspark.sql import functions as F

    from dataflow_core.spark.platform.tables import write_table

    suite = tmp_path / "orders_qty.json"
    suite.write_text(json.dumps({"name": "orders_qty", "expectations": [{
        "type": "expect_column_values_to_be_between", "kwargs": {"column": "qty", "min_value": 0},
        "meta": {"rule": "qty_not_negative"}}]}))
    spec = orders_pipeline(f"t_suite_{next(_names)}", quality_suite=str(suite))
    write_orders(spark, spec.input_table, GOOD + [("worded", "shop/7", 1.0, T, T + 1000)])
    rows = read_table(spark, spec.input_table)
    write_table(spark, rows.withColumn("qty", F.when(F.col("order_id") == "worded", "three").otherwise("3")),
                spec.input_table, mode="overwrite")
    result = run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now="2024-05-01T12:00:00Z")
    assert reasons(spark, spec) == {"worded": "qty_not_negative: the rule's check fails on this row"}
    assert result.ledger_ok and result.ledger["quarantined"] == 1 and result.ledger["accepted"] == 3
    assert sums(spark, spec) == {"7": Decimal("3.750"), "8": Decimal("4.000")}


def test_a_backfill_called_from_python_infers_the_value_types_the_cli_would(spark):
    """No `value_type` given and no CLI preflight: the job infers it from the input table."""
    spec = orders_pipeline(f"t_untyped_{next(_names)}", value_type=None)
    write_orders(spark, spec.input_table, GOOD)
    result = run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now="2024-05-01T12:00:00Z")
    assert result.ledger_ok and sums(spark, spec) == {"7": Decimal("3.750"), "8": Decimal("4.000")}
