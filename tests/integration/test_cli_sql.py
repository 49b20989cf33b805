"""`dataflow sql` as users run it: the installed console script, in its own process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dataflow_core.cli import main
from dataflow_core.cli.sql import format_table

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


def test_sql_error_is_one_readable_line(cli_warehouse: Path, capsys):
    code = main(["sql", "SELEC 1", "--warehouse", str(cli_warehouse)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("dataflow sql: error: SQL failed: [PARSE_SYNTAX_ERROR]")


def test_negative_limit_is_rejected(capsys):
    assert main(["sql", "SELECT 1", "--limit", "-1"]) == 2
    assert "--limit must be 0 or more, got -1" in capsys.readouterr().err


def test_format_table_aligns_numbers_right_and_marks_nulls():
    text = format_table(["name", "n"], [["a", 5], [None, 12]])
    assert text.splitlines() == ["name |  n", "-----+---", "a    |  5", "NULL | 12"]
