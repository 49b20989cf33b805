"""Small Delta commits and reads from the driver through delta-rs (`deltalake`): no Spark job.

A pipeline's control table (`dataflow_batches`) takes a few rows per micro-batch, written and
read on the driver. Through Spark each such commit costs a write job plus about three jobs of
Delta rebuilding the table's state to look up the idempotent key; through delta-rs it is one
PUT of a Parquet file and one of the commit. Both write the same table, which Delta's protocol allows, because both create
commit N exclusively on the stores the product writes:
- on `file:` Spark's `HardLinkLogStore` hard-links N.json to a finished temporary file, and
  delta-rs creates it only if absent (its local store's create-if-absent): each fails when
  N.json exists;
- on S3 Spark's `ConditionalPutLogStore` and delta-rs (1.x) both PUT N.json with
  `If-None-Match: *`.

(A `file:` warehouse on another log store, `DATAFLOW_LOCAL_LOG_STORE`, has one writing
process per table anyway, and one process commits in turn.)

`tests/integration/test_driver_delta.py` races the two writers on both stores.

Exactly once, as Spark's Delta does it: an append under an idempotent key (application id,
version) is skipped when the table already holds that id at that version or later; two writers
committing the same id at once conflict, and the second is refused (`errors.ConcurrentCommit`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Sequence
from urllib.parse import urlparse

from dataflow_core.errors import ConcurrentCommit, DataflowError
from dataflow_core.objectstore import S3Settings, is_object_store

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable

Txn = tuple[str, int]
"""Delta's idempotent-write key (application id, version): Spark's `txnAppId`/`txnVersion`,
delta-rs' `Transaction`."""


class NoTable(DataflowError):
    """There is no Delta table where a commit was to go."""


_SPARK_TYPES = {"string": "string", "bigint": "int64", "int": "int32", "double": "float64", "boolean": "bool",
                "timestamp": "timestamp"}


def _location(uri: str) -> tuple[str, dict[str, str] | None]:
    """delta-rs' URI and storage options for a table at `uri` (`s3a://` is S3 to it)."""
    if is_object_store(uri):
        return "s3://" + uri.split("://", 1)[1], S3Settings.from_env().storage_options()
    return (urlparse(uri).path if uri.startswith("file:") else uri), None


def open_table(uri: str, version: int | None = None) -> "DeltaTable | None":
    """The table at `uri` as of its latest version (or `version`); None when there is none.
    Loaded afresh each time: a table deleted and made again at the same path starts its
    versions again, which an incremental update would not notice."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    where, options = _location(uri)
    try:
        return DeltaTable(where, version=version, storage_options=options)
    except TableNotFoundError:
        return None


def identity(table: "DeltaTable | None") -> tuple[str, int]:
    """(table id, version) of a loaded table; ("", -1) for none. A version names the same
    contents only within one life of a table (see `tables.snapshot_identity`)."""
    if table is None:
        return "", -1
    return str(table.metadata().id), int(table.version())


def _columns(ddl: str) -> list[tuple[str, str]]:
    """(name, type) of each column of a Spark DDL column list of simple types (`name type, ...`)."""
    return [(name, kind.lower()) for name, kind in (column.split() for column in ddl.split(","))]


def column_names(ddl: str) -> tuple[str, ...]:
    """The column names of a Spark DDL column list, in order (a control table's row layout)."""
    return tuple(name for name, _ in _columns(ddl))


def arrow_schema(ddl: str) -> "pa.Schema":
    """The Arrow schema of a Spark DDL column list of simple types, as Spark writes them to
    Delta (timestamps in microseconds, UTC)."""
    import pyarrow as pa

    fields = []
    for name, kind in _columns(ddl):
        arrow = _SPARK_TYPES[kind]
        fields.append(pa.field(name, pa.timestamp("us", tz="UTC") if arrow == "timestamp" else pa.type_for_alias(arrow)))
    return pa.schema(fields)


def create(uri: str, ddl: str, properties: dict[str, str]) -> bool:
    """Make an empty table at `uri` with the columns of `ddl` and these table properties,
    unless one is there; returns whether this call made it. Two processes making it at once
    both go on: version 0 is committed once, and the other finds the table made."""
    from deltalake import DeltaTable

    where, options = _location(uri)
    try:
        DeltaTable.create(where, arrow_schema(ddl), mode="ignore", configuration=properties or None,
                          storage_options=options)
    except Exception:  # noqa: BLE001 - the other process's version 0 came first
        if open_table(uri) is None:
            raise
        return False
    return True


def append(uri: str, rows: Sequence[Sequence[Any]], ddl: str, txn: Txn | None, note: str | None = None) -> int | None:
    """Append `rows` (values in the order of `ddl`'s columns, as `spark.createDataFrame` takes
    them) to the existing table at `uri` under the idempotent key
    `txn` (none: a plain append), `note` as the commit's `userMetadata`. Returns the version
    committed, None when the key was committed already (nothing written); raises
    ConcurrentCommit when another writer committed it at the same time. Columns the table
    lacks are added."""
    import pyarrow as pa
    from deltalake import CommitProperties, Transaction, write_deltalake
    from deltalake.exceptions import CommitFailedError

    table = open_table(uri)
    if table is None:
        raise NoTable(f"no Delta table at {uri} to append to")
    done = None if txn is None else table.transaction_version(txn[0])
    if done is not None and done >= txn[1]:
        return None
    metadata = {} if note is None else {"userMetadata": note}
    keys = [] if txn is None else [Transaction(txn[0], txn[1])]
    try:
        schema = arrow_schema(ddl)
        data = pa.Table.from_pylist([dict(zip(schema.names, row)) for row in rows], schema=schema)
        write_deltalake(table, data, mode="append",
                        schema_mode="merge",
                        commit_properties=CommitProperties(app_transactions=keys, custom_metadata=metadata))
    except CommitFailedError as exc:
        raise ConcurrentCommit(f"the commit to {uri} under {txn} was refused: {exc}") from exc
    return int(table.version())  # the writer moved the table it was given to its own commit


def read(table: "DeltaTable", columns: Iterable[str], where: Any = None) -> "pa.Table":
    """Columns of the loaded table's rows meeting `where` (a pyarrow dataset expression);
    columns the table lacks (older tables) come back as nulls."""
    import pyarrow as pa

    dataset = table.to_pyarrow_dataset()
    names = set(dataset.schema.names)
    wanted = list(columns)
    found = dataset.to_table(columns=[c for c in wanted if c in names], filter=where)
    for column in wanted:
        if column not in names:
            found = found.append_column(column, pa.nulls(found.num_rows))
    return found.select(wanted)


def commit_actions(uri: str, version: int) -> list[dict]:
    """The actions of commit `version` of the table at `uri`, whoever wrote it, read from its
    log file (no Spark, no table state): one dict per action (`commitInfo`, `txn`, `add`, ...)."""
    import json

    from pyarrow import fs as pafs

    name = f"_delta_log/{version:020d}.json"
    if is_object_store(uri):
        from dataflow_core.objectstore import bucket_path

        files, where = S3Settings.from_env().pyarrow_fs(), f"{bucket_path(uri).rstrip('/')}/{name}"
    else:
        files, where = pafs.LocalFileSystem(), f"{_location(uri)[0].rstrip('/')}/{name}"
    with files.open_input_stream(where) as stream:
        text = stream.read().decode("utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]
