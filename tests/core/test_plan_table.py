"""The plan diff's tables (`dataflow plan show`, the approval page, the explorer's plan view)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from dataflow_core.diagram.plan_table import (
    BAR_WIDTH, StageDiff, WindowChange, bar_widths, key_rows, stage_rows, window_text,
)

H = 3_600_000
T0 = int(dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc).timestamp() * 1000)


def test_rows_show_new_deleted_and_changed_windows_and_the_sum_per_key():
    diff = StageDiff("billing", ("ad_id",), [
        WindowChange(("ad1",), T0, T0 + H, None, 5, 1, 0),     # new window
        WindowChange(("ad1",), T0 + H, T0 + 2 * H, 7, 4, 1, 1),  # corrected, retracted first
        WindowChange(("ad2",), T0, T0 + H, 3, None, 0, 1),     # deleted
    ])
    columns, rows = stage_rows(diff)
    assert columns == ["ad_id", "window", "old", "new", "change", "panes", "retractions"]
    assert rows == [["ad1", "2024-05-01 00:00-01:00", "(none)", 5, "+5", 1, 0],
                    ["ad1", "2024-05-01 01:00-02:00", 7, 4, "-3", 1, 1],
                    ["ad2", "2024-05-01 00:00-01:00", 3, "(deleted)", "-3", 0, 1]]
    assert key_rows(diff) == (["ad_id", "sum of changes"], [["ad1", "+2"], ["ad2", "-3"]])
    assert stage_rows(diff, limit=1)[1] == rows[:1]


def test_windows_read_as_dates_and_the_global_window_by_name():
    assert window_text(T0 + 23 * H, T0 + 24 * H) == "2024-05-01 23:00-00:00"
    assert window_text(T0, T0 + 48 * H) == "2024-05-01 00:00-2024-05-03 00:00"
    assert window_text(None, None) == "global"
    assert WindowChange(("a",), None, None, "x", "y", 1, 0).change is None  # not numbers: no sum


def test_bars_scale_every_numeric_type_to_the_stage_largest_value():
    """Money is Decimal (billing's watch seconds): its bars must not be zero wide (issue 66)."""
    money = StageDiff("billing", ("ad_id",), [
        WindowChange(("ad1",), T0, T0 + H, Decimal("12.50"), Decimal("25.00"), 1, 1),
        WindowChange(("ad2",), T0, T0 + H, None, Decimal("-5.00"), 1, 0),
        WindowChange(("ad3",), T0, T0 + H, Decimal("10"), None, 0, 1)])
    assert bar_widths(money) == [(BAR_WIDTH / 2, BAR_WIDTH), (0.0, BAR_WIDTH / 5), (BAR_WIDTH * 2 / 5, 0.0)]
    mixed = StageDiff("s", ("k",), [WindowChange(("a",), T0, T0 + H, 3, 4.0, 1, 0),
                                    WindowChange(("b",), T0, T0 + H, float("nan"), True, 1, 0),
                                    WindowChange(("c",), T0, T0 + H, "x", [1, 2], 1, 0)])
    assert bar_widths(mixed) == [(BAR_WIDTH * 3 / 4, BAR_WIDTH), (0.0, 0.0), (0.0, 0.0)]
    assert bar_widths(StageDiff("s", ("k",), [WindowChange(("a",), T0, T0 + H, 0, 0, 1, 0)])) == [(0.0, 0.0)]
