"""`dataflow replay SCENARIO --runner spark`: a conformance scenario through the Spark stage
execution (`keyed_stage.run_stage`), each scenario event one step of the schedule.

Keys and values travel as JSON text, since scenarios may mix types in one column.
"""

from __future__ import annotations

import json

from dataflow_core.model.pane_codec import pane_from_row
from dataflow_core.model.watermarks import advanced
from dataflow_core.runners.schedule import Schedule, Step
from dataflow_core.scenario import ReplayResult, Scenario

SCHEMA = "key string, value string, event_ms bigint, retraction boolean, seq array<bigint>, at_ms bigint"


def replay_spark(scenario: Scenario) -> ReplayResult:
    from pyspark.sql import functions as F

    from dataflow_core.spark.execute.keyed_stage import KeyCodec, run_stage
    from dataflow_core.spark.platform.session import get_spark

    spark = get_spark("dataflow-replay")
    steps, rows, wm = [], [], scenario.start
    for n, event in enumerate(scenario.events):
        if event.watermark is not None:
            wm = advanced(wm, event.watermark)
        steps.append(Step((n,), event.at, wm))
        rows += [(json.dumps(k), json.dumps(v), t, False, [n], event.at) for k, v, t in event.add]
    schedule = Schedule(steps, scenario.start)
    arrivals = spark.createDataFrame(rows, SCHEMA)
    codec = KeyCodec(("key",), decode_value=json.loads, encode_value=json.dumps)
    out = run_stage(arrivals, scenario.strategy, schedule, codec, "string")
    collected = out.where(F.col("kind").isin("pane", "stats")).collect()
    panes, dropped_pairs, elements = [], 0, 0
    for r in collected:
        if r["kind"] == "stats":
            dropped_pairs += r["dropped_pairs"]
            elements += r["elements"]
            continue
        pane = pane_from_row(json.loads(r["key"]), r.asDict(), decode_value=json.loads)
        panes.append((tuple(r["sub"]), r["ordinal"], pane))
    panes.sort(key=lambda p: (p[0], json.dumps(p[2].key, sort_keys=True), p[1]))
    return ReplayResult([p for _, _, p in panes], dropped_pairs, elements)
