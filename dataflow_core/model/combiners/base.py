"""The combiner's interface (see the package docstring): what a runner may ask of any
combiner, and the pane gate's rule that follows from a combiner's empty pane."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Generic, Iterable, TypeVar

Acc = TypeVar("Acc")


class CombineFn(ABC, Generic[Acc]):
    """create / add / merge / extract, and `retract_input` when the combiner can undo an add."""

    name: str = "combine"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = cls.__name__  # messages name the user's combiner class
        meaning = ("create_accumulator", "add_input", "merge_accumulators", "extract_output")
        redefines = [m for m in meaning if m in cls.__dict__]
        if "sql_output" not in cls.__dict__ and redefines:
            cls.sql_output = None
        # What a parent declares about its outputs and inputs describes the parent's
        # meaning: a subclass that changes it and does not restate them declares nothing.
        if "output_type" not in cls.__dict__ and redefines:
            cls.output_type = CombineFn.output_type  # type: ignore[method-assign]
        if "empty_output" not in cls.__dict__ and {"create_accumulator", "extract_output"} & set(redefines):
            cls.empty_output = CombineFn.empty_output  # type: ignore[method-assign]
        if "accepts" not in cls.__dict__ and {"create_accumulator", "add_input"} & set(redefines):
            cls.accepts = CombineFn.accepts  # type: ignore[method-assign]

    @abstractmethod
    def create_accumulator(self) -> Acc: ...

    @abstractmethod
    def add_input(self, acc: Acc, value: Any) -> Acc:
        """`acc` with `value` added. It may change `acc` and return it (as Beam allows):
        callers keep the accumulator returned and never use the one they passed again (so
        does `retract_input`); one that must keep a snapshot copies it there."""

    @abstractmethod
    def merge_accumulators(self, accs: Iterable[Acc]) -> Acc: ...

    @abstractmethod
    def extract_output(self, acc: Acc) -> Any: ...

    def retract_input(self, acc: Acc, value: Any) -> Acc:
        """Undo one earlier `add_input(value)`; needed to consume retractions."""
        raise NotImplementedError(f"combiner {self.name!r} cannot retract inputs")

    @property
    def can_retract(self) -> bool:
        return type(self).retract_input is not CombineFn.retract_input

    # --- what it takes and gives (types as Spark SQL type names, `model.value_types`) -----

    def output_type(self, input_type: str | None) -> str | None:
        """The type of this combiner's output over inputs of `input_type` (None: not known,
        then only a type that does not depend on the input is given), as Spark aggregates
        them: a sum of decimal(10,2) is decimal(20,2). None when not known; a user's
        combiner declares none unless it overrides this."""
        return None

    def accepts(self, input_type: str | None) -> bool:
        """Whether inputs of `input_type` can be combined at all (a sum needs numbers; a
        boolean is not one). An unknown type (None) is accepted; a user's combiner accepts
        every type unless it overrides this."""
        return True

    def empty_output(self) -> Any:
        """`extract_output` of an empty accumulator: the value of a pane with nothing in it
        (a discarding pane with nothing new since the window's last pane, or a window whose
        inputs were all retracted). A pane may carry None exactly when this is None
        (`value_present`, the pane gate's rule)."""
        return self.extract_output(self.create_accumulator())

    # --- how results add up (discarding panes) ------------------------------------------

    output_merge: str | None = None
    """"sum", "min" or "max": the associative aggregate over a window's discarding pane
    outputs that gives its total; None when outputs do not merge (no results table)."""

    def merge_outputs(self, outputs: Iterable[Any]) -> Any:
        """The total of a window whose discarding panes had these outputs."""
        values = list(outputs)
        if self.output_merge == "sum":
            return sum(values[1:], values[0]) if values else self.empty_output()
        if self.output_merge in ("min", "max") and values:
            present = [v for v in values if v is not None]
            if not present:
                return None
            return min(present) if self.output_merge == "min" else max(present)
        raise ValueError(f"combiner {self.name!r}: outputs of discarding panes do not merge")

    def output_possible(self, output: Any) -> bool:
        """Whether `output` is one this combiner can produce (the pane gate asks it of
        every pane); a count's is never negative."""
        return True

    def output_difference(self, total: Any, previous_total: Any) -> Any:
        """The discarding pane that follows a pane history totalling `previous_total` when
        the window's total is now `total`. A sum's is the difference; an extremum cannot be
        undone by a later pane, so its correction carries the new total. Asked only of a
        window that has a history: a window's first pane carries its total."""
        if self.output_merge == "sum" and total is not None and previous_total is not None:
            return total - previous_total
        return total

    # --- SQL forms (combiner lifting, batch aggregation) --------------------------------

    sql_output: str | None = None
    """A Spark SQL aggregate over the column `value` that gives `extract_output` of all the
    aggregated elements (a batch runner's whole-window aggregate); None: no such form. A
    subclass that redefines how inputs add up or what comes out and does not restate it has
    none (`__init_subclass__`), so an inherited form never misstates a user's combiner."""

    sql_partial: tuple[tuple[str, str], ...] | None = None
    """(field, Spark SQL aggregate over the column `value`) pairs whose results, read back
    as a dict, give `from_partial` the accumulator of the elements aggregated; None: no
    SQL form (the runner feeds elements one by one)."""

    partial_exact_for_floats: bool = False
    """Whether the partial equals adding the elements one by one even for inexact
    (floating-point) values, whose sums depend on the order of addition; a sum's does not
    (it is exact for integers and decimals only)."""

    def from_partial(self, partial: dict[str, Any]) -> Acc:
        """The accumulator of the elements a `sql_partial` row aggregated."""
        raise NotImplementedError(f"combiner {self.name!r} has no SQL partial form")

    def retract_accumulator(self, acc: Acc, other: Acc) -> Acc:
        """Undo `merge_accumulators([acc, other])`: retract every input `other` holds."""
        raise NotImplementedError(f"combiner {self.name!r} cannot retract an accumulator")

    # --- how state is stored ----------------------------------------------------------

    def encode_accumulator(self, acc: Acc) -> Any:
        """The accumulator as a JSON value (numbers, strings, lists, dicts with string keys)."""
        return acc

    def decode_accumulator(self, data: Any) -> Acc:
        return data

    def add_inputs(self, acc: Acc, values: Iterable[Any]) -> Acc:
        for v in values:
            acc = self.add_input(acc, v)
        return acc

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def value_present(combiner: CombineFn, value: Any) -> bool:
    """The pane gate's rule `value_present`: a pane carries a value, or None where the
    combiner's empty pane is None (a discarding min's on-time pane with nothing new since
    its early pane is empty). A sum's or a list's empty pane is 0 or [], never None."""
    return value is not None or combiner.empty_output() is None
