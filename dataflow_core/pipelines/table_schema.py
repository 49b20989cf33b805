"""An input table's schema read from its Delta log, without Spark or a JVM: the last
`metaData` action of the table's `_delta_log` (JSON commits, after the last checkpoint's
Parquet when one exists), so a pipeline is checked against its table in milliseconds.
Also: the columns a Spark SQL expression names, found without a parser."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from dataflow_core.errors import DataflowError


@dataclass(frozen=True)
class TableSchema:
    name: str
    columns: dict[str, str]  # column -> Spark SQL type name
    partition_columns: tuple[str, ...] = ()


def read_schema(warehouse: str, table: str) -> TableSchema | None:
    """The schema of Delta table `<warehouse>/<table>` from its log (None for a warehouse
    on an object store, which only Spark reads)."""
    if "://" in warehouse and not warehouse.startswith("file:"):
        return None
    log = Path(warehouse.removeprefix("file:")) / table / "_delta_log"
    if not log.is_dir():
        raise DataflowError(f"input_table: no Delta table {table} in warehouse {warehouse} (no {log})")
    checkpoint, meta = _checkpoint_metadata(log)
    commits = sorted(c for c in log.glob("[0-9]" * 20 + ".json") if int(c.stem) > checkpoint)
    for commit in commits:
        for line in commit.read_text(encoding="utf-8").splitlines():
            if '"metaData"' in line:
                meta = json.loads(line)["metaData"]
    if meta is None:
        raise DataflowError(f"input_table: the Delta log of {table} ({log}) holds no schema")
    fields = json.loads(meta["schemaString"])["fields"]
    columns = {f["name"]: _type_name(f["type"]) for f in fields}
    return TableSchema(table, columns, tuple(meta.get("partitionColumns") or ()))


def _checkpoint_metadata(log: Path) -> tuple[int, dict | None]:
    """The last checkpoint's version and `metaData` (-1 and None without one); the commits
    after it say the rest."""
    last = log / "_last_checkpoint"
    if not last.is_file():
        return -1, None
    version = int(json.loads(last.read_text(encoding="utf-8"))["version"])
    import pyarrow.parquet as pq

    for part in sorted(log.glob(f"{version:020d}.checkpoint*.parquet")):
        for row in pq.read_table(part, columns=["metaData"]).column("metaData").to_pylist():
            if row:
                return version, row
    return -1, None


def _type_name(t: object) -> str:
    return t if isinstance(t, str) else str(t.get("type", "struct")) if isinstance(t, dict) else str(t)


_TOKENS = re.compile(r"`([^`]+)`|'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|([A-Za-z_][A-Za-z0-9_]*)(\s*\()?|(\.)")
_WORDS = {
    "and", "or", "not", "is", "null", "true", "false", "case", "when", "then", "else", "end", "in", "between",
    "like", "rlike", "ilike", "distinct", "interval", "as", "cast", "try_cast", "current_date",
    "current_timestamp", "div", "exists", "escape", "asc", "desc", "nulls", "first", "last",
    "year", "month", "day", "hour", "hours", "minute", "minutes", "second", "seconds", "days", "week",
}


def columns_in(expression: str) -> list[str]:
    """The column names a Spark SQL expression refers to: identifiers that are not
    keywords, function calls, type names after AS, fields after a dot, or quoted text."""
    found: list[str] = []
    after_as = after_dot = False
    for m in _TOKENS.finditer(expression):
        quoted, word, call, dot = m.group(1), m.group(2), m.group(3), m.group(4)
        if dot:
            after_dot = True
            continue
        name = quoted or word
        if name is None:
            after_as = after_dot = False
            continue
        if quoted is None and (call or after_as or after_dot or word.lower() in _WORDS):
            after_as = word.lower() == "as"
            after_dot = False
            continue
        if not after_dot and name not in found:
            found.append(name)
        after_as = after_dot = False
    return found
