"""Two micro-batches of one pipeline at once on an `s3a://` warehouse, each a real
`dataflow microbatch` process (its own driver and JVM): exactly one commits the batch, the
other is refused in one line, and the tables equal one uninterrupted run's on a local folder.

On S3 this rests on the product's log store: the claim of the batch in `dataflow_batches` is a
Delta commit both drivers race for, and only a log store that lets exactly one of them create
the log version makes the loser see the winner's claim (docs/deployment.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from dataflow_core.errors import BUSY_EXIT
from dataflow_core.model.time import format_instant
from tests import s3_server
from tests.integration.test_backfill import to_rows
from tests.integration.test_microbatch import VIEWS, batches_of

REPO = Path(__file__).resolve().parents[2]
PIPELINE, INPUT = "t_s3mb", "t_s3mb_in"
TABLES = tuple(f"{PIPELINE}_{t}" for t in ("s_panes", "s", "short_panes", "short", "s__state"))
ROWS = to_rows(VIEWS)
NOW = format_instant(batches_of(ROWS)[-1][0])


def _rows(uri: str, storage_options: dict | None) -> Counter:
    """A table's rows through delta-rs, without what names a run."""
    from deltalake import DeltaTable

    table = DeltaTable(uri, storage_options=storage_options).to_pyarrow_table()
    keep = [c for c in table.column_names if c not in ("run_id", "pane_id", "state", "batch")]
    return Counter(repr(tuple(row.values())) for row in table.select(keep).to_pylist())


def test_two_micro_batches_at_once_on_s3_one_commits(tmp_path: Path):
    from dataflow_core.objectstore import S3Settings

    server = s3_server.start()
    try:
        server.create_bucket("lake")
        s3, local = "s3a://lake/mb", str(tmp_path / "local")
        env = {**os.environ, **server.env(), "DATAFLOW_SPARK_MASTER": "local[2]"}
        setup = subprocess.run([sys.executable, "-m", "tests.s3_microbatch_setup", local, s3, NOW], env=env,
                               cwd=REPO, capture_output=True, text=True, timeout=600)
        assert setup.returncode == 0, setup.stderr[-4000:]

        (tmp_path / "s3mb_pipelines.py").write_text(
            "from tests.integration.test_backfill import sessions_pipeline\n"
            f"sessions_pipeline({PIPELINE!r}, {INPUT!r})\n")
        race_env = {**env, "DATAFLOW_WAREHOUSE": s3, "PYTHONPATH": f"{tmp_path}:{REPO}",
                    "DATAFLOW_PIPELINES": "s3mb_pipelines"}
        cmd = [sys.executable, "-m", "dataflow_core", "microbatch", "--pipeline", PIPELINE, "--now", NOW]
        procs = [subprocess.Popen(cmd, env=race_env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True) for _ in range(2)]
        outcomes = sorted((p.wait(timeout=600), p.communicate()[0]) for p in procs)
        report = "\n---\n".join(out[-3000:] for _, out in outcomes)
        assert [code for code, _ in outcomes] == [0, BUSY_EXIT], report
        assert outcomes[1][1].strip().splitlines()[-1].startswith(f"dataflow microbatch: pipeline '{PIPELINE}'"), report

        options = S3Settings.from_env(server.env()).storage_options()
        for table in TABLES:
            assert _rows(f"s3://lake/mb/{table}", options) == _rows(f"{local}/{table}", None), table
    finally:
        server.stop()
