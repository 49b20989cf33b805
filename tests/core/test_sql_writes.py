"""`dataflow sql` refuses, before any Spark starts, a write to a table a pipeline's runs own
(unless --force); writes to input tables and the user's own tables go ahead."""

from __future__ import annotations

import pytest

from dataflow_core.cli import main
from dataflow_core.cli.sql import refuse_pipeline_writes
from dataflow_core.errors import DataflowError
from dataflow_core.query import write_targets


@pytest.mark.parametrize("sql, targets", [
    ("INSERT INTO billing SELECT 1", ["billing"]),
    ("insert overwrite table db.billing_panes select *", ["billing_panes"]),
    ("MERGE INTO billing t USING s ON t.k = s.k WHEN MATCHED THEN DELETE", ["billing"]),
    ("DELETE FROM `billing__state` WHERE true", ["billing__state"]),
    ("/* fix */ UPDATE dataflow_runs SET status = 'x'", ["dataflow_runs"]),
    ("DROP TABLE IF EXISTS billing__seen_ids", ["billing__seen_ids"]),
    ("VACUUM delta.`/w/billing_panes/`", ["billing_panes"]),
    ("ALTER TABLE billing SET TBLPROPERTIES ('a' = '1')", ["billing"]),
    ("CREATE TABLE mine AS SELECT * FROM billing", []),
])
def test_write_targets_name_the_tables_a_statement_changes(sql, targets):
    assert write_targets(sql) == targets


def test_writes_to_a_pipelines_tables_are_refused_and_the_users_are_not(capsys):
    for sql in ("DELETE FROM billing WHERE ad_id = 'ad-1'", "INSERT INTO billing_panes SELECT * FROM x",
                "UPDATE dataflow_batches SET status = 'finished'"):
        with pytest.raises(DataflowError, match="add --force to write it anyway"):
            refuse_pipeline_writes(sql)
    refuse_pipeline_writes("INSERT INTO video_events SELECT * FROM staged_views")  # input arrives so
    refuse_pipeline_writes("CREATE TABLE my_report AS SELECT * FROM billing")
    assert main(["sql", "DELETE FROM billing WHERE true", "--warehouse", "/nonexistent"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "table billing is written by the runs of pipeline 'billing'" in err[0], err
