"""Great Expectations adapter: validate a Spark DataFrame against a rule set.

Uses a GE context with a Spark datasource that reuses the caller's SparkSession: an
ephemeral one (nothing written to disk), or, given a folder, a file-backed project that
keeps every result and its Data Docs site. The report names every expectation and whether
it failed.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Iterator

from dataflow_core.errors import DataflowError
from dataflow_core.spark.input.expectations import RuleSet, load_rules

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# GE would otherwise try to send usage statistics over a network this platform may not have.
os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
# Its info-level logging (hundreds of lines once Airflow has configured logging) drowns
# the job's own progress lines; warnings and errors still come through.
logging.getLogger("great_expectations").setLevel(logging.WARNING)


@dataclass(frozen=True)
class ExpectationOutcome:
    """One expectation's verdict on the data."""

    rule: str
    expectation_type: str
    columns: tuple[str, ...]
    success: bool
    element_count: int | None
    unexpected_count: int | None
    mostly: float = 1.0
    observed: Any = None

    def line(self) -> str:
        verdict = "PASS" if self.success else "FAIL"
        counts = ""
        if self.unexpected_count is not None:
            counts = f" ({self.unexpected_count:,} of {self.element_count or 0:,} rows unexpected"
            if self.mostly < 1.0:
                counts += f"; at most {100 * (1 - self.mostly):g}% allowed"
            counts += ")"
        elif self.observed is not None:
            counts = f" (observed {self.observed!r})"
        return f"{verdict}  {self.rule:<30} {self.expectation_type}[{', '.join(self.columns)}]{counts}"


@dataclass(frozen=True)
class ValidationReport:
    """The suite's verdict: overall success plus one outcome per expectation, suite order."""

    suite: str
    success: bool
    outcomes: tuple[ExpectationOutcome, ...]
    docs_index: str | None = None  # Data Docs page (file path) when docs were built
    result_id: Any = field(default=None, compare=False)  # GE's id of the stored result (file-backed only)

    @property
    def failed(self) -> tuple[ExpectationOutcome, ...]:
        return tuple(o for o in self.outcomes if not o.success)

    @property
    def failed_rules(self) -> tuple[str, ...]:
        return tuple(o.rule for o in self.failed)

    def lines(self) -> list[str]:
        head = (f"suite {self.suite}: {'PASSED' if self.success else 'FAILED'} "
                f"({len(self.outcomes) - len(self.failed)}/{len(self.outcomes)} expectations met)")
        return [head] + ["  " + o.line() for o in self.outcomes]

    def summary(self) -> str:
        """One line: which expectations failed on how many rows."""
        if self.success:
            return f"suite {self.suite} passed ({len(self.outcomes)} expectations)"
        parts = []
        for o in self.failed:
            if o.unexpected_count is not None:
                parts.append(f"{o.rule} ({o.unexpected_count:,} of {o.element_count or 0:,} rows)")
            else:
                parts.append(f"{o.rule} (observed {o.observed!r})")
        return f"suite {self.suite} failed {len(self.failed)} of {len(self.outcomes)} expectations: " + ", ".join(parts)


RESULT_FORMAT = {"result_format": "BASIC", "partial_unexpected_count": 0}
"""Counts per expectation (what a gate reports: N of M rows), no sample of the unexpected
values: GE fetches a sample with one more Spark query per expectation."""


def build_suite(rules: RuleSet) -> Any:
    """The rules as a `great_expectations.ExpectationSuite` (each expectation's meta.rule
    carries the rule name so results map back)."""
    import great_expectations as gx
    from great_expectations.expectations.expectation_configuration import (
        ExpectationConfiguration,
    )

    expectations = []
    for rule in rules.rules:
        config = ExpectationConfiguration(
            type=rule.expectation_type,
            kwargs=dict(rule.kwargs),
            meta={"rule": rule.name},
            description=rule.description or None,
        )
        try:
            expectations.append(config.to_domain_obj())
        except Exception as exc:  # GE raises several types for a bad configuration
            raise DataflowError(
                f"expectation suite {rules.source}, rule {rule.name!r}: Great Expectations "
                f"rejects it: {exc}"
            ) from exc
    return gx.ExpectationSuite(name=rules.name, expectations=expectations)


def validate_dataframe(
    df: DataFrame,
    rules: RuleSet | None = None,
    docs_dir: str | os.PathLike[str] | None = None,
    run_name: str | None = None,
    build_docs: bool = True,
) -> ValidationReport:
    """Run the suite on `df` through GE's Spark datasource; never raises for failed
    expectations (the report says which), only for a broken setup.

    With `docs_dir`, the validation runs in a file-backed GE project there (kept across runs)
    through a Checkpoint that stores the result, then updates the Data Docs HTML site with
    its page; the report's `docs_index` is then the site's index page. `build_docs=False` stores the
    result only: a caller validating several frames builds the site once for all of them
    (`build_data_docs`)."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    rules = rules or load_rules()
    rules.check_columns(df.columns)
    if docs_dir is not None:
        return _validate_with_docs(df, rules, docs_dir, run_name, build_docs)
    context = gx.get_context(mode="ephemeral")
    # Our callers print their own progress lines; GE's tqdm bars would garble them.
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    # persist=False: GE must not cache the caller's DataFrame behind its back.
    source = context.data_sources.add_spark(name="dataflow_spark", persist=False)
    asset = source.add_dataframe_asset(name=rules.name)
    batch = asset.add_batch_definition_whole_dataframe("whole_dataframe").get_batch(
        batch_parameters={"dataframe": df}
    )
    result = batch.validate(build_suite(rules), result_format=RESULT_FORMAT)
    return _report(rules, result)


def _validate_with_docs(
    df: DataFrame, rules: RuleSet, docs_dir: str | os.PathLike[str], run_name: str | None, build_docs: bool,
) -> ValidationReport:
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    root = os.fspath(docs_dir)
    with _project(root) as context:
        context.variables.progress_bars = ProgressBarsConfig(globally=False)
        source = context.data_sources.add_or_update_spark(name="dataflow_spark", persist=False)
        asset = next((a for a in source.assets if a.name == rules.name), None) or (
            source.add_dataframe_asset(name=rules.name)
        )
        batch_definition = next(
            (b for b in asset.batch_definitions if b.name == "whole_dataframe"), None
        ) or asset.add_batch_definition_whole_dataframe("whole_dataframe")
        suite = context.suites.add_or_update(build_suite(rules))
        definition = context.validation_definitions.add_or_update(
            gx.ValidationDefinition(name=rules.name, data=batch_definition, suite=suite)
        )
        checkpoint = context.checkpoints.add_or_update(
            gx.Checkpoint(
                name=rules.name,
                validation_definitions=[definition],
                result_format=RESULT_FORMAT,
            )
        )
        outcome = checkpoint.run(
            batch_parameters={"dataframe": df},
            run_id=gx.RunIdentifier(run_name=run_name or rules.name),
        )
        ((result_id, result),) = outcome.run_results.items()
        report = replace(_report(rules, result), result_id=result_id)
        return _update_site(context, [report])[0] if build_docs else report


def build_data_docs(docs_dir: str | os.PathLike[str], reports: list[ValidationReport]) -> list[ValidationReport]:
    """The Data Docs site of the GE project at `docs_dir`, updated once for these reports'
    results (validated with `build_docs=False`): their pages, their suites' pages and the
    index, as each validation's own update would have made them. Returns the reports with
    `docs_index` set. One update instead of one per validation: each renders the whole index
    again, in a project context made afresh."""
    if not any(r.result_id is not None for r in reports):
        return reports
    with _project(os.fspath(docs_dir)) as context:
        return _update_site(context, reports)


def _update_site(context: Any, reports: list[ValidationReport]) -> list[ValidationReport]:
    """The site's pages of these reports' stored results and of their suites, and its index
    (the one way the site is updated, for one validation or many); the reports with
    `docs_index` set (those with no stored result are left as they are)."""
    from great_expectations.data_context.types.resource_identifiers import ExpectationSuiteIdentifier

    stored = [r for r in reports if r.result_id is not None]
    suites = {r.suite: ExpectationSuiteIdentifier(name=r.suite) for r in stored}
    context.build_data_docs(resource_identifiers=[r.result_id for r in stored] + list(suites.values()))
    index = _site(context)
    return [replace(r, docs_index=index) if r.result_id is not None else r for r in reports]


@contextlib.contextmanager
def _project(root: str) -> Iterator[Any]:
    """The file-backed GE project at `root`, held alone (gates of parallel tasks share it)."""
    import great_expectations as gx

    from dataflow_core.quality.docs import docs_lock

    os.makedirs(root, exist_ok=True)
    with docs_lock(root):
        yield gx.get_context(mode="file", project_root_dir=root)


def _site(context: Any) -> str | None:
    """The Data Docs site's index page, made readable without internet (GE's pages take
    their scripts from CDNs)."""
    from dataflow_core.quality.docs import make_offline

    sites = context.get_docs_sites_urls()
    index = sites[0]["site_url"].removeprefix("file://") if sites else None
    if index:
        make_offline(Path(index).parent)
    return index


def _report(rules: RuleSet, result: Any) -> ValidationReport:
    by_rule: dict[str, ExpectationOutcome] = {}
    for item in result.results:
        config = item.expectation_config
        name = (config.meta or {}).get("rule", config.type)
        if item.exception_info and item.exception_info.get("raised_exception"):
            raise DataflowError(
                f"expectation {name!r} could not run: "
                f"{item.exception_info.get('exception_message')}"
            )
        details = item.result or {}
        rule = rules.rule(name)
        by_rule[name] = ExpectationOutcome(
            rule=name,
            expectation_type=config.type,
            columns=rule.columns,
            success=bool(item.success),
            element_count=details.get("element_count"),
            unexpected_count=details.get("unexpected_count"),
            mostly=rule.mostly,
            observed=details.get("observed_value"),
        )
    outcomes = tuple(by_rule[rule.name] for rule in rules.rules if rule.name in by_rule)
    if len(outcomes) != len(rules.rules):
        lost = [r.name for r in rules.rules if r.name not in by_rule]
        raise DataflowError(f"Great Expectations returned no result for rule(s) {', '.join(lost)}")
    return ValidationReport(suite=rules.name, success=bool(result.success), outcomes=outcomes)
