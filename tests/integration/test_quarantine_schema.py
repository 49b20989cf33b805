"""The quarantine survives a change of its input's column types: `amount` bigint -> string
(an overwrite with overwriteSchema) no longer fails the next write of bad rows on Delta's
schema merge, which failed every batch after it. The column keeps the table's type, with the
values it holds exactly, and `input_row` has each row whole as JSON; a quarantine written
before `input_row` existed takes the new rows, and its own rows read as before."""

from __future__ import annotations

import datetime as dt
import json

from dataflow_core.pipelines import register
from dataflow_core.spark.input.rows import REASON
from dataflow_core.spark.jobs.backfill import run_backfill
from dataflow_core.spark.platform.tables import read_table, table_path, write_table
from dataflow_core.spark.sinks.quarantine import INPUT_ROW, quarantine_table, write_quarantine
from tests.integration.test_definitions import DAY0, H, orders_pipeline

COLUMNS = "order_no string, shop string, amount {}, placed_at timestamp, arrived_at timestamp"


def _orders(spark, rows, amount_type: str):
    at = [(o, s, a, DAY0 + dt.timedelta(minutes=m), DAY0 + dt.timedelta(minutes=m, seconds=5)) for o, s, a, m in rows]
    return spark.createDataFrame(at, COLUMNS.format(amount_type))


def test_a_backfill_after_the_input_column_changes_type_quarantines_and_counts_its_rows(spark):
    spec = register(orders_pipeline("t_qtype", H))
    write_table(spark, _orders(spark, [("o1", "s1", 11, 5), ("o2", None, 12, 6)], "bigint"), spec.input_table,
                mode="append")
    run_backfill(spark, spec.name, DAY0.isoformat(), (DAY0 + dt.timedelta(hours=1)).isoformat())
    assert read_table(spark, quarantine_table(spec)).schema["amount"].dataType.simpleString() == "bigint"

    changed = _orders(spark, [("o1", "s1", "11", 5), ("o2", None, "12", 6), ("o3", "s1", "20", 65),
                              ("o4", None, "13", 66), ("o5", None, "13.5x", 67)], "string")
    changed.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(
        table_path(spark, spec.input_table))
    result = run_backfill(spark, spec.name, (DAY0 + dt.timedelta(hours=1)).isoformat(),
                          (DAY0 + dt.timedelta(hours=2)).isoformat())
    assert result.ledger_ok and (result.ledger["accepted"], result.ledger["quarantined"]) == (1, 2), result.ledger
    revenue = sorted(int(r["value"]) for r in read_table(spark, spec.stages[0].output).collect())
    assert revenue == [11, 20], "o1's hour, and o3's with its amount read from the new string column"

    quarantine = read_table(spark, quarantine_table(spec))
    assert quarantine.schema["amount"].dataType.simpleString() == "bigint", "the table keeps its type"
    rows = {r["order_no"]: r for r in quarantine.collect()}
    assert set(rows) == {"o2", "o4", "o5"}
    assert rows["o4"]["amount"] == 13 and rows["o5"]["amount"] is None, "a value bigint holds exactly, else null"
    assert json.loads(rows["o5"][INPUT_ROW])["amount"] == "13.5x", "the row whole, as read"
    assert json.loads(rows["o2"][INPUT_ROW])["amount"] == 12, "written before the change: its own type"
    assert all("key_shop_not_null" in r[REASON] for r in rows.values())


def test_a_quarantine_written_before_input_row_takes_rows_of_a_changed_type(spark):
    spec = register(orders_pipeline("t_qtype_old", H))
    name = quarantine_table(spec)
    # the layout every version before `input_row` wrote: the input's columns, the reason, the run, the row id
    old = _orders(spark, [("o1", None, 12, 5)], "bigint").selectExpr(
        "*", "'key_shop_not_null' AS quarantine_reason", f"'{spec.name}' AS pipeline", "'run-old' AS run_id",
        "current_timestamp() AS quarantined_at", "sha2('old', 256) AS row_id")
    write_table(spark, old, name, mode="append")

    def bad(rows):
        return _orders(spark, rows, "string").selectExpr("*", "'key_shop_not_null' AS quarantine_reason")

    write_quarantine(spark, spec, bad([("o2", None, "7", 6), ("o3", None, "x", 7)]), "batch-1", per_delivery=True)
    write_quarantine(spark, spec, bad([("o3", None, "x", 7), ("o4", None, "9", 8)]), "run-2")  # MERGEd on row_id
    table = read_table(spark, name)
    assert table.schema["amount"].dataType.simpleString() == "bigint"
    rows = {r["order_no"]: r for r in table.collect()}
    assert len(table.collect()) == 4, "o3 once"
    assert rows["o1"]["amount"] == 12 and rows["o1"][INPUT_ROW] is None, "the old row as it was"
    assert (rows["o2"]["amount"], rows["o3"]["amount"], rows["o4"]["amount"]) == (7, None, 9)
    assert json.loads(rows["o3"][INPUT_ROW]) == {"order_no": "o3", "amount": "x", "placed_at": json.loads(
        rows["o3"][INPUT_ROW])["placed_at"], "arrived_at": json.loads(rows["o3"][INPUT_ROW])["arrived_at"]}
