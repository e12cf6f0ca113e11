"""The one kind of error `rlsweep` and the Snakefile print as a message, not a traceback."""


class UserError(Exception):
    """A problem the user can fix (a sweep file, a query, a results directory): `str()` is the whole message."""
