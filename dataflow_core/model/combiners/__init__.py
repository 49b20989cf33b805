"""What is computed: associative combiners, optionally retractable (the paper's uncombine).

A combiner also declares what runners need to keep and add up its results:

- `encode_accumulator` / `decode_accumulator`: its accumulator as a JSON value, so live
  state is data (never pickled code) and survives a renamed class;
- `output_merge`: how the outputs of a window's discarding panes add up to the window's
  total ("sum", "min" or "max", the name of an associative SQL aggregate), with
  `merge_outputs` its meaning in Python; None when outputs do not add up;
- `output_difference`: the discarding pane that takes a window from one total to another
  (a backfill's correction of a discarding stage);
- `sql_partial` / `from_partial` / `retract_accumulator`: its partial aggregate as Spark
  SQL aggregates over a column `value`, the accumulator that partial stands for, and how
  to take a partial's accumulator back out (combiner lifting: a runner may reduce a
  step's elements per window in SQL and hand the model one accumulator; see
  `model.lifting`). A combiner without `sql_partial` is fed element by element;
- `output_type` / `accepts` / `empty_output`: the Spark SQL type of its output for an input
  type, whether it can take inputs of a type at all (`model.value_types` names them), and
  the value of a pane with nothing in it. `dataflow check`, type inference and the pane
  gate ask these rather than guess from the combiner's class.
"""

from __future__ import annotations

from typing import Callable

from dataflow_core.model.combiners.arithmetic import CountFn, MeanFn, SumFn
from dataflow_core.model.combiners.base import Acc, CombineFn, value_present
from dataflow_core.model.combiners.multiset import DistinctCountFn, MaxFn, MinFn, ToListFn

__all__ = [
    "Acc", "BUILT_IN", "CombineFn", "CountFn", "DistinctCountFn", "MaxFn", "MeanFn", "MinFn", "SumFn", "ToListFn",
    "combiner_named", "value_present",
]

BUILT_IN: dict[str, Callable[[], CombineFn]] = {
    fn.name: fn for fn in (SumFn, CountFn, MinFn, MaxFn, MeanFn, ToListFn, DistinctCountFn)
}


def combiner_named(name: str) -> CombineFn:
    try:
        return BUILT_IN[str(name).strip().lower()]()
    except KeyError:
        raise ValueError(
            f"unknown combiner {name!r} (expected one of: {', '.join(sorted(BUILT_IN))})"
        ) from None
