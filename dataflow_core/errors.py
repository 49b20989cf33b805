"""The one exception type users see as a single readable line (no traceback)."""


class DataflowError(Exception):
    """A problem the user can fix: bad input, bad argument, missing table or tool.

    The message must name the file, row, parameter or table and say what is wrong.
    """


BUSY_EXIT = 75
"""Exit status of a run that found its pipeline locked by another (EX_TEMPFAIL: try later)."""


STUCK_EXIT = 76
"""Exit status of a run that found its pipeline locked by a run that is gone (its process died)
or failed: nothing runs until that run is resumed or abandoned, so waiting would not help."""


class PipelineBusy(DataflowError):
    """Another run of the same pipeline has it locked: it claimed this batch first, took it over,
    or holds the stream checkpoint."""


class PipelineStuck(DataflowError):
    """The run locking the pipeline is gone or failed (`sinks.lock_holders`). Not a PipelineBusy:
    waiting, retrying or rescheduling never frees it; the message names the run and the
    commands that resume it and that abandon it."""


class ConcurrentCommit(DataflowError):
    """Another writer committed to a table first, in a way this commit conflicts with (the same
    idempotent key, or the same rows): nothing of this commit was written."""


CONCURRENT_MARKS = (
    "Concurrent update", "Multiple streaming", "ConcurrentModification", "concurrently using",  # a stream checkpoint
    "ConcurrentAppend", "ConcurrentTransaction", "ConcurrentWrite", "ConcurrentDelete", "DELTA_CONCURRENT",  # Delta
    "ProtocolChanged", "MetadataChanged", "DELTA_PROTOCOL_CHANGED", "DELTA_METADATA_CHANGED",  # Delta: a table made at once
)


def is_concurrent(exc: BaseException) -> bool:
    """Whether `exc` says another run wrote first: to a stream checkpoint (offsets, commits,
    its metadata) or to a Delta table (a conflicting commit, or two runs making a table)."""
    if isinstance(exc, ConcurrentCommit):
        return True
    text = f"{type(exc).__name__}: {exc}"
    return any(m in text for m in CONCURRENT_MARKS)


def first_line(exc: BaseException) -> str:
    """An error's first non-empty line (a Java exception's message, without its stack)."""
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
