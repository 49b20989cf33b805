"""The fast reader: SQL over the warehouse's Delta tables without a JVM.

`dataflow sql` (by default, for reads) and the Airflow pane explorer read through here. It
uses delta-rs (`deltalake`) with its embedded Apache DataFusion SQL engine
(`deltalake.QueryBuilder`): no Spark session, so a query over a small output table answers in
well under a second instead of paying a JVM start. Tables are found as Spark's
`dataflow_core.spark.platform.tables` finds them (every folder with a `_delta_log` directly under the
warehouse root, queryable by its folder name) and only the tables a statement names are
opened.

What it reads: every table the product writes (pane logs, results, live state, quarantine,
`dataflow_runs`, `dataflow_batches`, the sample input), including liquid-clustered state
tables. A table with a reader feature delta-rs does not support, and SQL DataFusion does not
implement (Spark's `LATERAL VIEW explode(...)`, `SORT BY`, a Spark-only function), raise
`FastReaderUnsupported` (a DataflowError); `dataflow sql` then falls back to Spark and says so.

The SQL dialect is DataFusion's (ANSI, close to Spark SQL for SELECTs); statements that write
(INSERT, MERGE, DELETE, UPDATE, CREATE, ...) are refused here and go through Spark.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from dataflow_core.errors import DataflowError
from dataflow_core.objectstore import S3Settings, bucket_path, is_object_store

if TYPE_CHECKING:
    import pyarrow as pa

DEFAULT_WAREHOUSE = "./warehouse"
_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WRITES = re.compile(
    r"^\s*(INSERT|MERGE|DELETE|UPDATE|CREATE|DROP|ALTER|REPLACE|TRUNCATE|OPTIMIZE|VACUUM|RESTORE|"
    r"CONVERT|CLONE|COPY|REFRESH|CACHE|UNCACHE|SET|RESET|ADD|MSCK|ANALYZE|USE|FSCK|GENERATE)\b",
    re.IGNORECASE,
)
_COMMENT = re.compile(r"--[^\n]*|/\*.*?\*/", re.DOTALL)
_TARGET = re.compile(
    r"\b(?:INSERT\s+(?:INTO|OVERWRITE)(?:\s+TABLE)?|MERGE\s+INTO|DELETE\s+FROM|UPDATE|"
    r"(?:ALTER|DROP|TRUNCATE|REPLACE|RESTORE|OPTIMIZE|VACUUM|CREATE\s+OR\s+REPLACE)\s+TABLE(?:\s+IF\s+EXISTS)?|"
    r"OPTIMIZE|VACUUM|REORG\s+TABLE|GENERATE\s+\w+\s+FOR\s+TABLE)\s+"
    r"(delta\.`[^`]+`|`[^`]+`|[A-Za-z_][A-Za-z0-9_.]*)",
    re.IGNORECASE,
)


class FastReaderUnsupported(DataflowError):
    """The fast reader cannot answer this (a table feature or statement it does not support)."""


def resolve_warehouse(warehouse: str | os.PathLike[str] | None = None) -> str:
    """The argument, else `$DATAFLOW_WAREHOUSE`, else `./warehouse` (as the Spark side resolves
    it: local paths absolute, URIs as they are)."""
    root = str(warehouse or os.environ.get("DATAFLOW_WAREHOUSE") or DEFAULT_WAREHOUSE)
    if "://" in root:
        return root.rstrip("/")
    if root.startswith("file:"):
        root = root[len("file:"):]
    return str(Path(root).expanduser().resolve())


def _storage_uri(root: str) -> str:
    """delta-rs names S3 `s3://`; Spark's Hadoop connector `s3a://`: same objects."""
    return "s3://" + root[len("s3a://"):] if root.startswith("s3a://") else root


def list_tables(warehouse: str | None = None) -> list[str]:
    """Names of the Delta tables (folders with a `_delta_log`) directly under the warehouse."""
    root = resolve_warehouse(warehouse)
    if "://" in root:
        return _list_remote(root)
    base = Path(root)
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir()
                  if p.is_dir() and (p / "_delta_log").is_dir() and _TABLE_NAME.fullmatch(p.name))


def _list_remote(root: str) -> list[str]:
    """The tables under an `s3a://` root, listed with pyarrow on the store of the shared settings."""
    if not is_object_store(root):
        raise FastReaderUnsupported(f"the fast reader reads local folders and S3, not {root}")
    try:
        from pyarrow import fs as pafs

        filesystem, path = S3Settings.from_env().pyarrow_fs(), bucket_path(root)
        entries = filesystem.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        names = []
        for entry in entries:
            if entry.type == pafs.FileType.Directory and _TABLE_NAME.fullmatch(entry.base_name):
                log = filesystem.get_file_info(f"{entry.path}/_delta_log")  # a prefix with objects
                if log.type == pafs.FileType.Directory:
                    names.append(entry.base_name)
        return sorted(names)
    except Exception as exc:  # noqa: BLE001 - a storage error becomes one line
        raise FastReaderUnsupported(f"cannot list the tables of {root} without Spark: {_first_line(exc)}") from None


def table_uri(name: str, warehouse: str | None = None) -> str:
    return f"{_storage_uri(resolve_warehouse(warehouse)).rstrip('/')}/{name}"


def is_write(sql: str) -> bool:
    """True for a statement that writes or changes settings (INSERT, MERGE, CREATE, SET, ...):
    Spark's business. Everything else is the fast reader's (a typo gets DataFusion's error)."""
    return bool(_WRITES.match(_COMMENT.sub(" ", sql)))


def write_targets(sql: str) -> list[str]:
    """The tables a write statement changes, by name: the last part of a dotted or quoted
    name, the folder of a `delta.`path``. What `dataflow sql` guards, not a parser: a
    statement it cannot place names none."""
    out = []
    for target in _TARGET.findall(_COMMENT.sub(" ", sql)):
        name = target[len("delta."):] if target.lower().startswith("delta.") else target
        name = name.strip("`").rstrip("/")
        out.append(name.rsplit("/", 1)[-1].rsplit(".", 1)[-1] if "/" in name else name.rsplit(".", 1)[-1])
    return list(dict.fromkeys(out))


def named_tables(sql: str, tables: Iterable[str]) -> list[str]:
    """The warehouse tables whose names occur as words in `sql` (case-insensitive)."""
    words = {w.lower() for w in _WORD.findall(_COMMENT.sub(" ", sql))}
    return [t for t in tables if t.lower() in words]


def open_table(name: str, warehouse: str | None = None):
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    uri = table_uri(name, warehouse)
    options = S3Settings.from_env().storage_options() if is_object_store(uri) else None
    try:
        return DeltaTable(uri, storage_options=options)
    except TableNotFoundError:
        raise DataflowError(_missing(name, resolve_warehouse(warehouse), list_tables(warehouse))) from None
    except Exception as exc:  # noqa: BLE001 - e.g. an unsupported reader feature
        raise FastReaderUnsupported(f"the fast reader cannot open table {name!r}: {_first_line(exc)}") from None


def _missing(name: str, root: str, tables: Sequence[str]) -> str:
    known = ", ".join(tables) if tables else "none"
    return f"table '{name}' not found in warehouse {root} (its tables: {known})"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@dataclass
class Answer:
    """A query's answer: the Arrow table (at most `limit` + 1 rows when a limit was given)
    and how long it took."""

    table: "pa.Table"
    seconds: float
    tables: list[str]


def query(sql: str, warehouse: str | None = None, limit: int | None = None) -> Answer:
    """Run one read statement over the warehouse's tables; `limit` caps the rows fetched
    (one more is fetched so the caller can tell there were more)."""
    import pyarrow as pa
    from deltalake import QueryBuilder

    started = time.perf_counter()
    if is_write(sql):
        raise FastReaderUnsupported("the fast reader only reads (SELECT, WITH, VALUES); writes go through Spark")
    root = resolve_warehouse(warehouse)
    tables = list_tables(root)
    builder = QueryBuilder({"datafusion.execution.time_zone": "+00:00"} if _supports_tz_option() else None)
    used = named_tables(sql, tables)
    for name in used:
        builder.register(name, open_table(name, root))
    try:
        reader = pa.RecordBatchReader.from_stream(builder.execute(sql))  # arro3 -> pyarrow
        if limit is None:
            table = reader.read_all()
        else:
            batches, count = [], 0
            for batch in reader:
                batches.append(batch)
                count += batch.num_rows
                if count > limit:
                    break
            table = pa.Table.from_batches(batches, schema=reader.schema).slice(0, limit + 1)
    except Exception as exc:  # noqa: BLE001 - DataFusion raises several types; one line each
        raise DataflowError(_explain(exc, root, tables)) from None
    return Answer(table, time.perf_counter() - started, used)


_TZ_OPTION: list[bool] = []


def _supports_tz_option() -> bool:
    """Whether this DataFusion knows `datafusion.execution.time_zone` (UTC, like the Spark
    session's `spark.sql.session.timeZone`)."""
    if not _TZ_OPTION:
        from deltalake import QueryBuilder

        try:
            QueryBuilder({"datafusion.execution.time_zone": "+00:00"})
            _TZ_OPTION.append(True)
        except Exception:  # noqa: BLE001
            _TZ_OPTION.append(False)
    return _TZ_OPTION[0]


_UNIMPLEMENTED = re.compile(r"This feature is not implemented: ([^{(]*)|Invalid function '([^']+)'", re.IGNORECASE)
"""DataFusion's words for SQL it has no implementation of (Spark's LATERAL VIEW, SORT BY, a
Spark-only function such as explode): Spark SQL may well answer it."""


def _explain(exc: BaseException, root: str, tables: Sequence[str]) -> str:
    message = " ".join(str(exc).split()) or type(exc).__name__
    missing = re.search(r"table '(?:[\w]+\.)*([\w]+)' not found", message, re.IGNORECASE)
    if missing:
        return _missing(missing.group(1), root, tables)
    unimplemented = _UNIMPLEMENTED.search(message)
    if unimplemented:
        what, function = unimplemented.groups()
        detail = f"function {function}()" if function else what.strip()[:80]
        raise FastReaderUnsupported(f"the fast reader does not implement {detail}")
    for marker in ("Unsupported", "not supported", "unsupported reader feature", "DeletionVectors"):
        if marker.lower() in message.lower() and "SQL" not in message[:20]:
            raise FastReaderUnsupported(f"the fast reader cannot answer this: {message}") from None
    return f"SQL failed: {message}"


def read(name: str, warehouse: str | None = None, where: str | None = None,
         columns: Sequence[str] | None = None, order_by: str | None = None, limit: int | None = None) -> "pa.Table":
    """`SELECT columns FROM name [WHERE where] [ORDER BY order_by] [LIMIT limit]` through the
    fast reader (the pane explorer's reads). Column names are quoted; `where` is SQL."""
    cols = ", ".join(quote_ident(c) for c in columns) if columns else "*"
    sql = f"SELECT {cols} FROM {name}"
    if where:
        sql += f" WHERE {where}"
    if order_by:
        sql += f" ORDER BY {order_by}"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return query(sql, warehouse).table


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def literal(value: Any) -> str:
    """A SQL literal for a string or number (for values typed into the explorer's form)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"
