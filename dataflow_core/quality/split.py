"""Row-level quality split: every row ends up accepted or quarantined, never dropped."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from dataflow_core.spark.input.expectations import RuleSet, load_rules
from dataflow_core.spark.input.rows import broken

REASON_COLUMN = "quarantine_reason"
REASON_SEPARATOR = "; "
_FAILED = "_failed_rules"


def failed_rules(rules: RuleSet) -> Column:
    """Array of the names of the rules a row breaks (empty when it passes all), gathered as
    the input layer gathers a pipeline's reasons (`spark.input.rows.broken`)."""
    return broken([(rule.passes(), F.lit(rule.name)) for rule in rules.row_rules])


def split_valid_rows(
    df: DataFrame, rules: RuleSet | None = None
) -> tuple[DataFrame, DataFrame]:
    """(accepted, quarantined). Quarantined rows keep every input column plus
    `quarantine_reason`: the broken rules' names in suite order, joined by '; '."""
    rules = rules or load_rules()
    rules.check_columns(df.columns)
    tagged = df.withColumn(_FAILED, failed_rules(rules))
    accepted = tagged.where(F.size(_FAILED) == 0).drop(_FAILED)
    quarantined = (
        tagged.where(F.size(_FAILED) > 0)
        .withColumn(REASON_COLUMN, F.array_join(F.col(_FAILED), REASON_SEPARATOR))
        .drop(_FAILED)
    )
    return accepted, quarantined
