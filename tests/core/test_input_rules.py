"""The one home of a pipeline's input rules (`model.input_rules`): the names the runners
quarantine under are the names the input gate checks, the skew is in milliseconds, a
future-dated row is judged against a processing time, and which delivery of an event counts
is decided the same way wherever it is shown."""

from __future__ import annotations

from dataflow_core.model.combiners import SumFn
from dataflow_core.model.input_rules import Check, ProcessingTime, first_deliveries, input_of
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import parse_duration
from dataflow_core.model.watermarks import HeuristicWatermark
from dataflow_core.model.windows import FixedWindows
from dataflow_core.pipelines import PipelineSpec, StageSpec, get
from dataflow_core.quality.input_gate import input_rules, passes_column

H = parse_duration("1h")


def shop_orders() -> PipelineSpec:
    """docs/write-your-own-pipeline.md's shape: the table's own column names, a key expression."""
    return PipelineSpec(
        name="t_rules_shop", input_table="shop_orders", key={"region": "upper(country)"}, value="amount",
        event_time="ordered_at", ingest_time="received_at", event_id="order_id", max_skew=parse_duration("30m"),
        watermark=lambda: HeuristicWatermark(bound=0),
        stages=(StageSpec("t_rules_shop_sum", WindowingStrategy(window_fn=FixedWindows(H), combiner=SumFn()),
                          value_type="decimal(20,2)"),),
    )


def test_the_gate_checks_exactly_the_reasons_the_runners_quarantine_under():
    at = ProcessingTime(1_700_000_000_000)
    for spec in (shop_orders(), get("billing"), get("ad_sessions")):
        model = input_of(spec).reason_names(at)
        gate = input_rules(spec, max_bad_share=0.0, at=at)
        row_rules = [r.name for r in gate.row_rules]
        assert [n for n in row_rules if n in model] == list(model)
        for name in model:  # each on the column the runners' predicate fills
            assert gate.rule(name).kwargs["column"] == passes_column(name)
            assert gate.rule(name).expectation_type == "expect_column_values_to_not_be_null"
    names = input_of(shop_orders()).reason_names(at)
    assert names == ("key_region_not_null", "event_id_not_null", "event_time_not_null", "ingest_time_not_null",
                     "event_time_beyond_skew", "future_dated", "value_invalid")


def test_the_skew_is_one_number_of_milliseconds_and_the_future_is_measured_from_the_processing_time():
    desc = input_of(shop_orders())
    at = ProcessingTime(1_700_000_000_000)
    rules = {r.name: r for r in desc.rules(at)}
    assert rules["event_time_beyond_skew"].check is Check.WITHIN_SKEW
    assert rules["event_time_beyond_skew"].limit_ms == 30 * 60_000 == desc.max_skew
    assert rules["future_dated"].limit_ms == at.now + 30 * 60_000
    assert "future_dated" not in desc.reason_names()  # a reader that knows no processing time


def test_the_input_description_names_the_pipelines_own_columns_and_expressions():
    desc = input_of(shop_orders())
    assert desc.key_columns == ("region",)
    assert [(f.column, f.expression) for f in desc.fields] == [
        ("region", "upper(country)"), ("value", "amount"), ("event_ms", "ordered_at"),
        ("ingest_ms", "received_at"), ("event_id", "order_id")]


def test_the_first_delivery_is_the_earliest_ingest_then_event_then_content_whatever_the_row_order():
    rows = [("a", 5, 1, 9), ("a", 5, 1, 3), ("a", 4, 7, 0), ("b", 1, 1, 0), ("b", 1, 1, 1)]
    for order in (rows, rows[::-1]):
        kinds = first_deliveries(order, lambda r: r[0], lambda r: r[1], lambda r: r[2], lambda r: r[3],
                                 refused=lambda r: r == ("b", 1, 1, 0))
        got = dict(zip(order, kinds))
        assert got[("a", 4, 7, 0)] == "accepted"  # earliest ingest wins over an earlier event time
        assert got[("a", 5, 1, 9)] == got[("a", 5, 1, 3)] == "duplicate"
        assert got[("b", 1, 1, 0)] == "quarantined" and got[("b", 1, 1, 1)] == "accepted"


def test_the_duplicate_share_rule_judges_sets_of_its_least_size_only():
    from dataflow_core.model.input_rules import DuplicateShare

    rule = DuplicateShare(0.05)
    assert not rule.broken(9, 1), "one redelivery among nine rows: no sign of broken ids"
    assert rule.broken(20, 19) and not rule.broken(20, 1) and rule.broken(20, 2)
    assert rule.min_unique_share == 0.95
