"""`dataflow_core.api`, the one way to define a pipeline: its docstring runs as written, a
trigger of one's own needs an accumulation mode (as in Beam), and it exports every trigger and
watermark estimator the Spark runners run, and no other."""

from __future__ import annotations

import doctest
import inspect
import re
from pathlib import Path

import pytest
import yaml

import dataflow_core.api as api
from dataflow_core.errors import DataflowError
from dataflow_core.model import dsl, triggers, watermarks
from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.trigger_machine import Trigger
from dataflow_core.model.watermarks import WatermarkEstimator
from dataflow_core.pipelines import registry

CONFORMANCE = Path(__file__).resolve().parents[1] / "conformance"


@pytest.fixture
def clean_registry():
    """Pipelines a test registers are forgotten after it."""
    before = dict(registry._REGISTRY)
    yield
    registry._REGISTRY.clear()
    registry._REGISTRY.update(before)


def test_the_api_docstring_runs_as_written(clean_registry):
    result = doctest.testmod(api, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 3 and result.failed == 0


# --- accumulation: required with a trigger of one's own ----------------------------------


@pytest.mark.parametrize("trigger", [
    api.AfterWatermark(late=api.AfterCount(1)), api.Repeatedly(api.AfterCount(1)), api.AfterCount(2),
    api.AfterPercentileWatermark(0.5), api.RepeatUntil(api.AfterCount(1), api.AfterWatermark()),
    api.Repeatedly(api.AlignedProcessingTime("1m")), api.Never(),
])
def test_a_trigger_of_ones_own_without_an_accumulation_mode_is_refused_in_one_line(trigger):
    with pytest.raises(DataflowError) as err:
        api.stage("shop_revenue", api.FixedWindows("1h"), api.SumFn(), trigger=trigger)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"stage 'shop_revenue': trigger {trigger.describe()} needs an accumulation mode")
    assert all(f'"{m.value}"' in message for m in AccumulationMode)


def test_with_the_default_trigger_the_mode_is_discarding_as_in_the_model_and_beam():
    assert api.stage("s", api.FixedWindows("1h"), api.SumFn()).strategy.accumulation is AccumulationMode.DISCARDING
    assert api.stage("s", api.FixedWindows("1h"), api.SumFn(), trigger=api.Default()).strategy.accumulation \
        is AccumulationMode.DISCARDING
    assert WindowingStrategy().accumulation is AccumulationMode.DISCARDING


@pytest.mark.parametrize("mode", list(AccumulationMode))
def test_a_named_mode_is_taken_as_given(mode):
    trigger = api.AfterWatermark(late=api.AfterCount(1))
    assert api.stage("s", api.FixedWindows("1h"), api.SumFn(), trigger=trigger,
                     accumulation=mode.value).strategy.accumulation is mode
    assert api.stage("s", api.FixedWindows("1h"), api.SumFn(), trigger=trigger,
                     accumulation=mode).strategy.accumulation is mode


def test_an_unknown_mode_is_one_line_naming_the_stage():
    with pytest.raises(DataflowError, match=r"^stage 's': unknown accumulation mode 'summing' \(expected one of"):
        api.stage("s", api.FixedWindows("1h"), api.SumFn(), accumulation="summing")


# --- exports ------------------------------------------------------------------------------


def _model_triggers() -> set[str]:
    """Every built-in trigger of the model: its public Trigger classes and constructors."""
    names = set()
    for name, obj in vars(triggers).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != triggers.__name__:
            continue
        if inspect.isclass(obj) and issubclass(obj, Trigger) or inspect.isfunction(obj):
            names.add(name)
    return names


def _exported(kind: type) -> set[str]:
    return {n for n in api.__all__ if inspect.isclass(getattr(api, n)) and issubclass(getattr(api, n), kind)
            and getattr(api, n) is not kind}


def test_every_built_in_trigger_is_exported():
    assert _model_triggers() == set(api.TRIGGERS)
    assert set(api.TRIGGERS) <= set(api.__all__)
    assert _exported(Trigger) <= set(api.TRIGGERS)  # no trigger besides them


def _spellings(name: str) -> set[str]:
    """The names the scenario format gives a trigger (Beam's and the paper's)."""
    specs = {**dsl.TRIGGERS, **dsl._VARIADIC}
    return {n for n, spec in specs.items() if spec is specs[name]}


def _spark_replayed_triggers() -> str:
    """The triggers of every conformance case `tests/conformance/test_spark_runner.py` replays on
    Spark (the shared cases and the extra ones), as text."""
    cases = sorted((CONFORMANCE / "cases").glob("*.yaml")) + sorted((CONFORMANCE / "extra").glob("*.yaml"))
    return " ".join(str((yaml.safe_load(p.read_text(encoding="utf-8"))["pipeline"]).get("trigger", "Default()"))
                    for p in cases)


@pytest.mark.parametrize("name", sorted(api.TRIGGERS))
def test_every_exported_trigger_runs_on_spark_in_a_conformance_case(name):
    used = _spark_replayed_triggers()
    assert any(re.search(rf"\b{spelling}\(", used) for spelling in _spellings(name)), (
        f"{name}: no conformance case the Spark runner replays uses it")


def test_the_exported_estimators_are_those_the_spark_runners_feed():
    assert set(api.ESTIMATORS) == {"HeuristicWatermark", "PercentileWatermark", "PerfectWatermark"}
    assert _exported(WatermarkEstimator) == set(api.ESTIMATORS)
    assert "SourceProgressWatermark" not in api.__all__ and not hasattr(api, "SourceProgressWatermark")
    built_in = {n for n, o in vars(watermarks).items() if inspect.isclass(o) and issubclass(o, WatermarkEstimator)
                and o is not WatermarkEstimator and not n.startswith("_")}
    assert built_in - set(api.ESTIMATORS) == {"SourceProgressWatermark"}


@pytest.mark.parametrize("estimator", [api.HeuristicWatermark("2m"), api.PercentileWatermark(0.01),
                                       api.PerfectWatermark()], ids=lambda e: type(e).__name__)
def test_every_exported_estimator_registers(clean_registry, estimator):
    """Registration refuses an estimator the Spark runners cannot feed; each exported one passes."""
    spec = api.pipeline("shop_watermark", input_table="shop_orders", key="shop_id", value="amount",
                        watermark=estimator, stages=[api.stage("shop_watermark", api.FixedWindows("1h"), api.SumFn())])
    assert type(spec.watermark()) is type(estimator)


def test_the_second_doors_are_not_exported():
    assert "register" not in api.__all__ and "WindowingStrategy" not in api.__all__
    names = {n for n in dir(api) if not n.startswith("_")}
    assert set(api.__all__) <= names


def test_the_shipped_pipelines_use_only_the_api():
    root = Path(__file__).resolve().parents[2]
    for module in sorted((root / "dataflow_core" / "examples" / "pipelines").glob("*.py")):
        imports = [line for line in module.read_text().splitlines() if line.startswith(("import ", "from "))]
        dataflow = [line for line in imports if "dataflow_core" in line]
        assert all(line.startswith("from dataflow_core.api import") for line in dataflow), (module.name, dataflow)
        assert len(dataflow) <= 1, (module.name, dataflow)


def test_the_unit_helpers_give_what_the_same_text_gives():
    assert api.seconds(90) == api.duration("90s") == 90_000
    assert api.minutes(1.5) == api.duration("90s")
    assert api.hours(1) == api.duration("1h") and api.days(1) == api.duration("1d")
    for helper in (api.seconds, api.minutes, api.hours, api.days):
        for bad in (-1, float("nan"), "1", True):
            with pytest.raises(ValueError, match=rf"^{helper.__name__}\({re.escape(repr(bad))}\)"):
                helper(bad)


DOCS = Path(__file__).resolve().parents[2] / "docs"


def _api_examples() -> list[tuple[str, str]]:
    """Every Python block of the docs that defines pipelines or stages with the api."""
    found = []
    for page in ("write-your-own-pipeline.md", "spark-runner.md"):
        for block in re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(encoding="utf-8"), re.S):
            if "dataflow_core.api import" in block:
                found.append((page, block))
    return found


@pytest.mark.parametrize("page, block", _api_examples(), ids=lambda v: v if v.endswith(".md") else "")
def test_the_docs_api_examples_run_as_written(clean_registry, page, block):
    before = set(registry._REGISTRY)
    exec(compile(block, f"{page} example", "exec"), {})  # noqa: S102 - the docs' own code
    defined = re.findall(r'^pipeline\(\n?\s*"(\w+)"', block, re.M)
    assert set(registry._REGISTRY) - before == set(defined)


def test_the_docs_have_api_examples():
    assert {page for page, _ in _api_examples()} == {"write-your-own-pipeline.md", "spark-runner.md"}
