"""Airflow's tasks hand on every count a run's ledger has (the change feed's included), and
their log lines show the change feed's counts only where a run had changes."""

from __future__ import annotations

import dataclasses

from dataflow_core.airflow.tasks import LEDGER_KEYS, ledger_counts, shown_counts, summarize
from dataflow_core.spark.sinks.runs import CHANGE_COUNTS, Ledger


def test_every_count_of_a_ledger_is_handed_on():
    fields = [f.name for f in dataclasses.fields(Ledger) if f.type in ("int", int)]
    assert list(LEDGER_KEYS) == fields
    ledger = Ledger(read=5, accepted=5, aggregated=5, panes=2, deletes=2, updates=1, retracted=2, left_for_backfill=1)
    counts = ledger_counts(ledger.as_dict())
    assert ledger.balanced
    assert {k: counts[k] for k in CHANGE_COUNTS} == {"inserts": 0, "deletes": 2, "updates": 1, "withdrawn": 0,
                                                      "retracted": 2, "deletes_never_counted": 0, "left_for_backfill": 1}


def test_a_log_line_shows_the_change_feeds_counts_only_where_there_were_changes():
    plain = ledger_counts(Ledger(read=3, accepted=3, aggregated=3).as_dict())
    assert set(shown_counts(plain)) == set(LEDGER_KEYS) - set(CHANGE_COUNTS)
    changed = ledger_counts(Ledger(read=3, accepted=3, aggregated=3, deletes=1, retracted=1).as_dict())
    assert set(shown_counts(changed)) == set(LEDGER_KEYS) - set(CHANGE_COUNTS) | {"deletes", "retracted"}


def test_the_backfill_summary_adds_up_each_days_change_counts():
    days = [{"day": d, "run_id": f"backfill-{d}", "ledger_ok": True,
             "ledger": ledger_counts(Ledger(read=2, accepted=2, aggregated=2, deletes=n, retracted=n).as_dict())}
            for d, n in (("2024-05-01", 1), ("2024-05-02", 2))]
    lines: list[str] = []
    summarize({"pipeline": "p", "start": "2024-05-01", "end": "2024-05-03", "days": ["2024-05-01", "2024-05-02"]},
              days, say=lines.append)
    assert any(line.split() == ["deletes", "3"] for line in lines), lines
    assert not any(line.split()[:1] == ["inserts"] for line in lines), lines
