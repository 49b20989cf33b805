"""Which Spark SQL expressions the fast reader evaluates itself (`query.spark_dialect`): those
DataFusion gives Spark's values for, and none it reads otherwise. Pure: text only
(tests/integration/test_input_rules.py compares the two engines' values)."""

from __future__ import annotations

import pytest

from dataflow_core.query.spark_dialect import differs_from_spark

AGREE = [
    "shop_code", "upper(substr(shop_code, 1, 2))", "concat_ws('-', a, b)", "upper(country)", "a || b",
    "substring(shop_code, 2)", "substr(substr(shop_code, 2), 1, 2)", "CAST(shop_id AS STRING)", "lower(trim(a))",
    "coalesce(a, 'none')", "CASE WHEN a IN ('x', 'y') THEN 'xy' ELSE b END", "md5(a)", "ordered_at",
    "replace(path, '/', '-')", "reverse(shop_code)", "ltrim(rtrim(a))", "length(shop_code)", "shop_id = 7 OR a <> 'x'",
]
DIFFER = {
    "substr(shop_code, 0, 2)": "substr",  # one character in DataFusion, two in Spark
    "substr(shop_code, -2)": "-2",  # the whole string in DataFusion, the last two in Spark
    "substr(shop_code, 1, n)": "substr",
    "concat(a, b)": "concat",  # DataFusion leaves a NULL out, Spark's is NULL
    "shop_id / 2": "/",  # an integer in DataFusion, a double in Spark
    "element_at(split(path, '/'), 2)": "element_at",  # neither exists in DataFusion
    "if(n > 3, 'big', 'small')": "if",
    "date_format(ordered_at, 'yyyy')": "ordered_at",
    "CAST(ordered_at AS STRING)": "ordered_at",  # 'T' between date and time in DataFusion
    "CAST(shop_id AS DOUBLE)": "DOUBLE",
    "lower(amount)": "amount",  # a double as text: 1.0E7 in Spark
    '"x"': '"x"',  # a string in Spark, a column in DataFusion
    "`shop code`": "`",
    "'a\\tb'": "backslash",
    "'it''s'": "adjacent",  # Spark joins the two strings: its
    "coalesce(a, 1.5)": ".5",  # a decimal in Spark, a double in DataFusion
}


@pytest.mark.parametrize("expression", AGREE)
def test_expressions_both_engines_evaluate_alike_are_evaluated(expression: str) -> None:
    assert differs_from_spark(expression, inexact=("ordered_at", "amount")) is None


@pytest.mark.parametrize("expression, named", DIFFER.items())
def test_an_expression_datafusion_may_evaluate_otherwise_says_which_part(expression: str, named: str) -> None:
    why = differs_from_spark(expression, inexact=("ordered_at", "amount"))
    assert why is not None and named in why, why
