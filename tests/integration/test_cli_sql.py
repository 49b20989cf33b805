"""`dataflow sql` as users run it: the installed console script, in its own process; and the
fast reader (delta-rs + DataFusion, no JVM) against Spark SQL over every kind of table the
product writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dataflow_core.cli import main
from dataflow_core.cli.sql import fast_rows, format_table

pytestmark = pytest.mark.integration

DATAFLOW = Path(sys.executable).with_name("dataflow")


@pytest.fixture(scope="module")
def cli_warehouse(spark, tmp_path_factory) -> Path:
    """A warehouse of its own with one table, written through Spark."""
    root = tmp_path_factory.mktemp("cli_warehouse")
    rows = [(1, "intro", 3.5), (2, "outro", 1.25), (2, "intro", 2.0)]
    frame = spark.createDataFrame(rows, "user_id long, title string, minutes double")
    frame.write.format("delta").save(str(root / "plays"))
    return root


def _dataflow(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(DATAFLOW), *args], capture_output=True, text=True, timeout=300, check=False
    )


def test_console_script_queries_a_table_by_name(cli_warehouse: Path):
    result = _dataflow(
        "sql", "SELECT user_id, sum(minutes) AS minutes FROM plays GROUP BY user_id ORDER BY user_id",
        "--warehouse", str(cli_warehouse), "--master", "local[1]",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["user_id", "|", "minutes"]
    assert [line.split() for line in lines[2:4]] == [["1", "|", "3.5"], ["2", "|", "3.25"]]
    assert lines[-1] == "(2 rows)"


def test_console_script_missing_table_is_one_line_and_fails(cli_warehouse: Path):
    result = _dataflow("sql", "SELECT * FROM nowhere", "--warehouse", str(cli_warehouse))
    assert result.returncode != 0
    assert "Traceback" not in result.stderr + result.stdout
    errors = [line for line in result.stderr.splitlines() if line.startswith("dataflow sql: error:")]
    assert errors == [
        f"dataflow sql: error: table 'nowhere' not found in warehouse {cli_warehouse} "
        "(its tables: plays)"
    ]


# In-process runs reuse the shared session (the conftest restores its warehouse).


def test_limit_cuts_rows_and_says_so(cli_warehouse: Path, capsys):
    code = main(["sql", "SELECT * FROM plays ORDER BY minutes", "--warehouse", str(cli_warehouse), "-n", "2"])
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert len(out) == 2 + 2 + 1  # header, rule, two rows, note
    assert out[-1] == "(first 2 rows; use --limit to see more)"


@pytest.mark.parametrize(("engine", "start"), [
    ("auto", "dataflow sql: error: SQL failed: SQL error: ParserError"),
    ("spark", "dataflow sql: error: SQL failed: [PARSE_SYNTAX_ERROR]"),
])
def test_sql_error_is_one_readable_line(cli_warehouse: Path, capsys, engine, start):
    code = main(["sql", "SELEC 1", "--warehouse", str(cli_warehouse), "--engine", engine])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith(start), err


@pytest.mark.parametrize("query", [
    "SELECT user_id, m FROM plays LATERAL VIEW explode(array(minutes, minutes * 2)) x AS m WHERE user_id = 1",
    "SELECT user_id, explode(array(minutes, minutes * 2)) AS m FROM plays WHERE user_id = 1",
])
def test_sql_the_fast_reader_does_not_implement_runs_on_spark_with_a_note(cli_warehouse: Path, capsys, query):
    """Spark SQL DataFusion has no implementation of (a LATERAL VIEW, as the demo prints one;
    a Spark-only function) is answered by Spark, and one stderr line says why (issue 66)."""
    code = main(["sql", query + " ORDER BY m", "--warehouse", str(cli_warehouse), "--format", "csv"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.out.splitlines() == ["user_id,m", "1,3.5", "1,7.0"]
    notes = [line for line in captured.err.splitlines() if "running it on Spark instead" in line]
    assert len(notes) == 1 and notes[0].startswith("dataflow sql: the fast reader does not implement "), captured.err
    assert "(2 rows) (Spark, " in captured.err
    assert main(["sql", query, "--warehouse", str(cli_warehouse), "--engine", "fast"]) == 2  # fast only: no Spark
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dataflow sql: error: the fast reader does not implement "), err


def test_negative_limit_is_rejected(capsys):
    assert main(["sql", "SELECT 1", "--limit", "-1"]) == 2
    assert "--limit must be 0 or more, got -1" in capsys.readouterr().err


def test_format_table_aligns_numbers_right_and_marks_nulls():
    text = format_table(["name", "n"], [["a", 5], [None, 12]])
    assert text.splitlines() == ["name |  n", "-----+---", "a    |  5", "NULL | 12"]


def test_long_cells_are_shown_in_full_and_other_formats(cli_warehouse: Path, capsys):
    ledger = '{"read": 1, "accepted": 1, "per_stage": {"billing": {"panes": 3}}, "note": "' + "x" * 200 + '"}'
    query = f"SELECT 'r-1' AS run_id, '{ledger}' AS ledger"
    assert main(["sql", query, "--warehouse", str(cli_warehouse)]) == 0
    out = capsys.readouterr().out
    assert ledger in out and "..." not in out
    assert main(["sql", "SELECT user_id, title, minutes FROM plays ORDER BY minutes", "--warehouse",
                 str(cli_warehouse), "--format", "csv"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["user_id,title,minutes", "2,outro,1.25", "2,intro,2.0", "1,intro,3.5"]
    assert "(3 rows) (fast reader" in captured.err
    assert main(["sql", "SELECT user_id, title FROM plays ORDER BY minutes LIMIT 1", "--warehouse",
                 str(cli_warehouse), "--format", "json"]) == 0
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == [{"user_id": 2, "title": "outro"}]


def test_writes_go_through_spark_and_fast_refuses_them(cli_warehouse: Path, spark, capsys):
    assert main(["sql", "INSERT INTO plays VALUES (3, 'credits', 0.5)", "--warehouse", str(cli_warehouse)]) == 0
    assert "(Spark," in capsys.readouterr().err
    assert main(["sql", "SELECT count(*) AS n FROM plays WHERE user_id = 3", "--warehouse", str(cli_warehouse),
                 "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines() == ["n", "1"]  # the fast reader sees Spark's write
    assert main(["sql", "DELETE FROM plays WHERE user_id = 3", "--engine", "fast", "--warehouse", str(cli_warehouse)]) == 2
    assert "--engine fast only reads" in capsys.readouterr().err
    assert main(["sql", "DELETE FROM plays WHERE user_id = 3", "--warehouse", str(cli_warehouse)]) == 0


def test_runs_shows_each_run_once_with_its_current_status(spark, tmp_path, capsys):
    """`dataflow_runs` holds a row per status a run went through; `dataflow runs` one row per
    run (issue 66): a final status (finished, applied, rejected) once reached, else the latest,
    with who decided a plan and why a run failed; Spark runs the same SQL to the same rows."""
    from dataflow_core.cli.sql import spark_rows
    from dataflow_core.spark.platform.session import WAREHOUSE_CONF
    from dataflow_core.spark.sinks.runs import (
        APPLIED, REJECTED, Ledger, Run, current_runs_sql, fail_run, finish_run, record_decision, record_planned,
        record_started,
    )

    spark.conf.set(WAREHOUSE_CONF, str(tmp_path))  # (restored after the test by the conftest)
    runs = {name: Run(f"backfill-{name}", "p" if name != "other" else "q", "backfill", "{}", 0)
            for name in ("resumed", "failing", "planned", "applied", "rejected", "running", "other")}
    for run in runs.values():
        record_started(spark, run)
    fail_run(spark, runs["resumed"], "killed")
    finish_run(spark, runs["resumed"], Ledger())
    fail_run(spark, runs["failing"], "first")
    fail_run(spark, runs["failing"], "poison row")
    for name in ("planned", "applied", "rejected"):
        record_planned(spark, runs[name], Ledger(), {})
    finish_run(spark, runs["applied"], Ledger())
    record_decision(spark, runs["applied"], APPLIED, "alice")
    record_decision(spark, runs["rejected"], REJECTED, "bob")
    finish_run(spark, runs["other"], Ledger())
    fail_run(spark, runs["other"], "late and stale")  # after a final status: the run stays finished

    assert main(["runs", "--warehouse", str(tmp_path), "--format", "json", "-n", "0"]) == 0
    captured = capsys.readouterr()
    shown = [json.loads(line) for line in captured.out.splitlines()]
    assert "(fast reader, " in captured.err
    assert sorted(r["run_id"] for r in shown) == sorted(r.run_id for r in runs.values()), "each run once"
    assert {r["run_id"].split("-", 1)[1]: (r["status"], r["decided_by"], r["reason"]) for r in shown} == {
        "resumed": ("finished", None, None), "failing": ("failed", None, "poison row"),
        "planned": ("planned", None, None), "applied": ("applied", "alice", None),
        "rejected": ("rejected", "bob", None), "running": ("started", None, None), "other": ("finished", None, None)}
    assert all(r["started_at"] <= r["since"] for r in shown) and shown[0]["run_id"] == "backfill-other"
    assert main(["runs", "--warehouse", str(tmp_path), "--pipeline", "p", "--status", "failed", "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("run_id,pipeline,command,status,since,started_at,decided_by,reason")
    assert len(lines) == 2 and lines[1].startswith("backfill-failing,p,backfill,failed,"), lines
    fast = _normal(fast_rows(current_runs_sql(), str(tmp_path), 0)[1])
    assert fast == _normal(spark_rows(current_runs_sql(), None, str(tmp_path), 0)[1])


# --- the fast reader against Spark SQL on every kind of table the product writes ----------


@pytest.fixture(scope="module")
def product_warehouse(spark, tmp_path_factory) -> Path:
    """Tables written by the product's own commands (in-process, on the shared session): a
    sample (`dataflow generate`), a micro-batch of `ad_sessions` (two stages' pane logs and
    results, live state, seen ids, `dataflow_batches`, input quarantine), an arrival-order
    replay of `billing` (decimal values, watermarks, `dataflow_runs`) and a failed pane gate
    (pane quarantine)."""
    from dataflow_core.pipelines import get
    from dataflow_core.quality.gates import gate_panes

    root = tmp_path_factory.mktemp("product_warehouse")
    wh = ["--warehouse", str(root)]
    assert main(["generate", "--rows", "600", "--seed", "5", "--span-hours", "24", "--malformed-share", "0.02",
                 "--table", "video_events", *wh]) == 0
    assert main(["microbatch", "--pipeline", "ad_sessions", *wh]) == 0
    assert main(["backfill", "--pipeline", "billing", "--start", "2024-05-01", "--end", "2024-05-02",
                 "--replay", "--batch-interval", "30m", *wh]) == 0
    # A pane that breaks a rule (a second ON_TIME pane of a window), so the gate quarantines:
    # a write to a pipeline's own table, refused unless forced.
    duplicate = "INSERT INTO billing_panes SELECT * FROM billing_panes WHERE timing = 'ON_TIME' LIMIT 1"
    assert main(["sql", duplicate, *wh]) == 2
    assert main(["sql", duplicate, "--force", *wh]) == 0
    spark.conf.set("spark.dataflow.warehouse", str(root))
    outcome = gate_panes(spark, get("billing").stages[0], None, "test-gate", "billing", docs_dir=root.parent / "docs")
    assert not outcome.success and outcome.quarantined >= 1
    return root


TABLE_KINDS = {  # kind -> table (and a query that aggregates it)
    "pane log": ("billing_panes", "SELECT timing, count(*) AS n, sum(value) AS total, max(emitted_at) AS last "
                                  "FROM billing_panes GROUP BY timing ORDER BY timing"),
    "second-stage pane log": ("ad_short_sessions_panes", "SELECT count(*) AS n FROM ad_short_sessions_panes"),
    "session results": ("ad_sessions", "SELECT count(*) AS n, sum(value) AS v FROM ad_sessions"),
    "results": ("billing", "SELECT ad_id, count(*) AS windows, sum(value) AS total FROM billing "
                           "GROUP BY ad_id ORDER BY ad_id LIMIT 5"),
    "live state": ("ad_sessions__state", "SELECT count(*) AS n, min(wake_timer) AS w FROM ad_sessions__state"),
    "seen ids": ("ad_sessions__seen_ids", "SELECT count(*) AS n FROM ad_sessions__seen_ids"),
    "input quarantine": ("billing__quarantine", "SELECT quarantine_reason, count(*) AS n FROM "
                                                    "billing__quarantine GROUP BY quarantine_reason ORDER BY 1"),
    "pane quarantine": ("billing_panes_quarantine", "SELECT quarantine_reason, count(*) AS n FROM "
                                                    "billing_panes_quarantine GROUP BY quarantine_reason ORDER BY 1"),
    "runs": ("dataflow_runs", "SELECT pipeline, status, count(*) AS n FROM dataflow_runs GROUP BY pipeline, status "
                              "ORDER BY 1, 2"),
    "batches": ("dataflow_batches", "SELECT pipeline, status, max(batch) AS b FROM dataflow_batches "
                                    "GROUP BY pipeline, status ORDER BY 1, 2"),
    "watermarks": ("dataflow_watermarks", "SELECT stage, count(*) AS n, max(watermark) AS w FROM "
                                          "dataflow_watermarks GROUP BY stage ORDER BY stage"),
    "input": ("video_events", "SELECT event_date, count(*) AS n FROM video_events GROUP BY event_date ORDER BY 1"),
}


def _normal(rows) -> list:
    import datetime as dt
    import decimal

    from dataflow_core.cli.sql import plain

    def one(v):
        v = plain(v)
        if isinstance(v, dt.datetime):
            return round(v.replace(tzinfo=dt.timezone.utc).timestamp(), 6)
        if isinstance(v, decimal.Decimal):
            return str(v.normalize())
        if isinstance(v, float):
            return round(v, 9)
        return v

    return [tuple(one(v) for v in row) for row in rows]


@pytest.mark.parametrize("kind", list(TABLE_KINDS))
def test_fast_reader_returns_what_spark_sql_returns(product_warehouse: Path, spark, kind):
    from dataflow_core.cli.sql import fast_rows, spark_rows

    table, aggregate = TABLE_KINDS[kind]
    assert (product_warehouse / table / "_delta_log").is_dir(), f"no {table} written"
    for query in (f"SELECT * FROM {table}", aggregate):
        f_cols, f_rows, _ = fast_rows(query, str(product_warehouse), 0)
        s_cols, s_rows, _ = spark_rows(query, None, str(product_warehouse), 0)
        assert f_cols == s_cols, query
        fast, slow = _normal(f_rows), _normal(s_rows)
        if "ORDER BY" not in query:
            fast, slow = sorted(fast, key=repr), sorted(slow, key=repr)
        assert fast == slow, query
        assert fast, f"{query}: no rows"


def test_fast_reader_lists_the_tables_spark_lists(product_warehouse: Path, spark):
    from dataflow_core.query import list_tables
    from dataflow_core.spark.platform.tables import list_tables as spark_tables

    spark.conf.set("spark.dataflow.warehouse", str(product_warehouse))
    assert list_tables(str(product_warehouse)) == spark_tables(spark)
    assert {t for t, _ in TABLE_KINDS.values()} <= set(list_tables(str(product_warehouse)))


def test_a_table_with_deletion_vectors_is_read_right_or_by_spark(spark, tmp_path, capsys):
    """Spark's DELETE on a table with deletion vectors: `auto` returns the right rows,
    through delta-rs if it can read them, else through Spark with a note."""
    path = tmp_path / "dv"
    path.mkdir()
    spark.sql(f"CREATE TABLE delta.`{path}/plays` (user_id long, minutes double) USING delta "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.sql(f"INSERT INTO delta.`{path}/plays` VALUES (1, 1.0), (2, 2.0), (3, 3.0)")
    spark.sql(f"DELETE FROM delta.`{path}/plays` WHERE user_id = 2")
    assert main(["sql", "SELECT user_id FROM plays ORDER BY user_id", "--warehouse", str(path), "--format", "csv"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["user_id", "1", "3"], captured.err
