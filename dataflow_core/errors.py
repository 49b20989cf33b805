"""The one exception type users see as a single readable line (no traceback)."""


class DataflowError(Exception):
    """A problem the user can fix: bad input, bad argument, missing table or tool.

    The message must name the file, row, parameter or table and say what is wrong.
    """
