"""A pipeline's input, declared once: which expressions give an element's key, value, times
and id; which rows are refused, under which reason; and which delivery of an event counts.

Every edge renders this one declaration: the Spark runners (`spark.input.rows`: predicates
and element columns), the input gate (`quality.input_gate`: its Great Expectations suite is
generated from `rules`, so a rule's name is both the gate's expectation and the quarantine
reason), the pane explorer (DataFusion SQL) and `dataflow diagram --pipeline`. Nothing here
evaluates an expression: the expressions are the pipeline's Spark SQL text, and each edge
says what they mean in its engine.

The skew is in milliseconds everywhere: an instant is compared as whole milliseconds since
the epoch (`model.time.Instant`), so every edge agrees on a row exactly at, or 1 ms past, a
limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Iterable, Sequence, TypeVar

from dataflow_core.model.time import Duration, Instant

T = TypeVar("T")

# The element's own columns (what a runner's stage reads), besides the key columns.
VALUE, EVENT_MS, INGEST_MS, EVENT_ID = "value", "event_ms", "ingest_ms", "event_id"


class Check(Enum):
    """What a rule checks, in the model's terms (each edge renders it)."""

    PRESENT = "present"  # the field's expression gives a value (not null)
    WITHIN_SKEW = "within_skew"  # event time at most max_skew after ingest time
    NOT_FUTURE = "not_future"  # neither time after the processing time plus max_skew
    VALID = "valid"  # the value is a usable number or value, and no expression fails on the row


@dataclass(frozen=True)
class Field:
    """One thing an element takes from an input row: `column` (its name in the element),
    the pipeline's expression for it, and its role (key, value, event_time, ingest_time,
    event_id)."""

    column: str
    expression: str
    role: str

    @property
    def label(self) -> str:
        """How a reason names it: `key region (upper(country))`, `value (...)`."""
        what = f"key {self.column}" if self.role == "key" else self.role
        return f"{what} ({self.expression})"


@dataclass(frozen=True)
class ProcessingTime:
    """When a batch or backfill runs (ms): rows stamped later than this plus the pipeline's
    `max_skew` are future-dated. Given to the rules as one object so every caller that
    knows its processing time (a micro-batch's record, a backfill's run) passes the same
    thing."""

    now: Instant


@dataclass(frozen=True)
class InputRule:
    """One rule a row must pass: its `name` (the quarantine reason and the gate's
    expectation, one name for both), what it checks, on which field (for PRESENT), the
    limit in ms it compares with (WITHIN_SKEW: the skew; NOT_FUTURE: the latest allowed
    instant) and why it exists."""

    name: str
    check: Check
    description: str
    field: Field | None = None
    limit_ms: int | None = None


DEFAULT_MAX_DUPLICATE_SHARE = 0.05
"""A pipeline's `max_duplicate_share` unless it declares its own."""


@dataclass(frozen=True)
class DuplicateShare:
    """The rule on a set of rows as a whole (a backfill's range, a micro-batch): at most
    `limit` of them may be duplicate deliveries (an event id another row of the set has
    too). Constant or empty event ids make every event after the first a "duplicate", which
    no row rule sees: only the share tells. The input gate renders it as its unique-share
    expectation (`name`), a micro-batch checks its own rows with `broken`. A set of fewer
    than `min_rows` rows is not judged: one redelivery among a handful of rows is a large
    share and no sign of broken ids (a micro-batch of a quiet minute)."""

    limit: float
    name: str = "duplicate_share_under_threshold"
    min_rows: int = 20

    @staticmethod
    def share(rows: int, duplicates: int) -> float:
        return duplicates / rows if rows else 0.0

    def broken(self, rows: int, duplicates: int) -> bool:
        return rows >= self.min_rows and self.share(rows, duplicates) > self.limit

    @property
    def min_unique_share(self) -> float:
        """The same limit as the least share of rows whose event id no earlier row has."""
        return round(1.0 - self.limit, 6)


@dataclass(frozen=True)
class InputDescription:
    """A pipeline's input in the model's terms (`input_of(spec)` makes it)."""

    key: tuple[Field, ...]
    value: Field
    event_time: Field
    ingest_time: Field
    event_id: Field
    max_skew: Duration
    where: str | None = None
    max_duplicate_share: float = DEFAULT_MAX_DUPLICATE_SHARE

    @property
    def duplicate_share(self) -> DuplicateShare:
        """The pipeline's rule on duplicate deliveries (its `max_duplicate_share`)."""
        return DuplicateShare(self.max_duplicate_share)

    @property
    def fields(self) -> tuple[Field, ...]:
        """Every field an element takes, in element-column order."""
        return (*self.key, self.value, self.event_time, self.ingest_time, self.event_id)

    @property
    def evaluated(self) -> tuple[Field, ...]:
        """Every expression evaluated on an input row: the fields, and `where` (the rows
        that are input at all), when given. A row any of them fails on is `value_invalid`."""
        where = (Field("where", self.where, "where"),) if self.where else ()
        return (*self.fields, *where)

    @property
    def key_columns(self) -> tuple[str, ...]:
        return tuple(f.column for f in self.key)

    def rules(self, at: ProcessingTime | None = None) -> tuple[InputRule, ...]:
        """The rules in the order their reasons are listed. Without a processing time
        (`at`), future-dated rows are not looked for (a reader that shows rows, not a run)."""
        skew = self.max_skew
        rules = [InputRule(f"key_{f.column}_not_null", Check.PRESENT, f"the key column {f.column} has a value", f)
                 for f in self.key]
        rules += [
            InputRule("event_id_not_null", Check.PRESENT,
                      "the row has an event id (duplicate deliveries are found by it)", self.event_id),
            InputRule("event_time_not_null", Check.PRESENT, "the row has an event time", self.event_time),
            InputRule("ingest_time_not_null", Check.PRESENT, "the row has an ingest time", self.ingest_time),
            InputRule("event_time_beyond_skew", Check.WITHIN_SKEW,
                      f"event time is at most max_skew ({skew} ms) after ingest time", limit_ms=skew),
        ]
        if at is not None:
            rules.append(InputRule(
                "future_dated", Check.NOT_FUTURE,
                f"neither event time nor ingest time is after the processing time plus max_skew ({skew} ms)",
                limit_ms=future_limit(at, skew)))
        rules.append(InputRule(
            "value_invalid", Check.VALID,
            "the value expression gives a value (not null, not NaN or infinite), and no expression of the "
            "pipeline fails on the row", self.value))
        return tuple(rules)

    def reason_names(self, at: ProcessingTime | None = None) -> tuple[str, ...]:
        return tuple(r.name for r in self.rules(at))


def future_limit(at: ProcessingTime, skew: Duration) -> Instant:
    """The latest instant a row may carry at processing time `at`."""
    return at.now + skew


def input_of(spec: Any) -> InputDescription:
    """The input description of a `PipelineSpec` (its key, value, time and id expressions,
    `where`, `max_skew` and `max_duplicate_share`): the one derived property the edges read the input through."""
    key = tuple(Field(c, e, "key") for c, e in dict(spec.key).items())
    return InputDescription(
        key=key,
        value=Field(VALUE, spec.value, "value"),
        event_time=Field(EVENT_MS, spec.event_time, "event_time"),
        ingest_time=Field(INGEST_MS, spec.ingest_time, "ingest_time"),
        event_id=Field(EVENT_ID, spec.event_id, "event_id"),
        max_skew=int(spec.max_skew),
        where=getattr(spec, "where", None),
        max_duplicate_share=float(getattr(spec, "max_duplicate_share", DEFAULT_MAX_DUPLICATE_SHARE)),
    )


# --- which delivery counts --------------------------------------------------------------

DELIVERY_ORDER = (INGEST_MS, EVENT_MS)
"""Deliveries of one event id are ordered by ingest time, then event time, then their
content (a hash of the row's columns, where an engine has one): the first counts, the others
are duplicates. The content makes the order total, so two runs pick the same delivery."""


def first_deliveries(rows: Sequence[T], event_id: Callable[[T], Any], ingest: Callable[[T], Any],
                     event: Callable[[T], Any], content: Callable[[T], Any] = lambda _r: 0,
                     refused: Callable[[T], bool] = lambda _r: False) -> list[str]:
    """Per row: "quarantined" (refused), "duplicate" (a delivery of an event id whose first
    accepted delivery, in `DELIVERY_ORDER`, is another row) or "accepted"."""
    order = sorted(range(len(rows)), key=lambda i: (_nulls_first(ingest(rows[i])), _nulls_first(event(rows[i])),
                                                     _nulls_first(content(rows[i]))))
    seen: set[Any] = set()
    kinds = [""] * len(rows)
    for i in order:
        if refused(rows[i]):
            kinds[i] = "quarantined"
        elif event_id(rows[i]) in seen:
            kinds[i] = "duplicate"
        else:
            seen.add(event_id(rows[i]))
            kinds[i] = "accepted"
    return kinds


def _nulls_first(value: Any) -> tuple[bool, Any]:
    """Sorts nulls first, as an ascending Spark window does (a row with a null time is
    refused anyway)."""
    return (value is not None, value if value is not None else 0)


def names(rules: Iterable[InputRule]) -> tuple[str, ...]:
    return tuple(r.name for r in rules)
