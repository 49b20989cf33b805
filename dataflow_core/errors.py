"""The one exception type users see as a single readable line (no traceback)."""


class DataflowError(Exception):
    """A problem the user can fix: bad input, bad argument, missing table or tool.

    The message must name the file, row, parameter or table and say what is wrong.
    """


BUSY_EXIT = 75
"""Exit status of a run that found its pipeline held by another (EX_TEMPFAIL: try later)."""


class PipelineBusy(DataflowError):
    """Another run of the same pipeline holds it: it claimed this batch first, took it over,
    or holds the stream checkpoint."""
