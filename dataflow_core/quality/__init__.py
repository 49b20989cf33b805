"""Data quality: one rule set (expectations/*.json) drives both the Great Expectations
validation report and the row-level accepted/quarantined split."""

from dataflow_core.spark.input.expectations import Rule, RuleSet, load_rules
from dataflow_core.quality.split import REASON_COLUMN, split_valid_rows
from dataflow_core.quality.validate import ValidationReport, validate_dataframe

__all__ = [
    "REASON_COLUMN",
    "Rule",
    "RuleSet",
    "ValidationReport",
    "load_rules",
    "split_valid_rows",
    "validate_dataframe",
]
