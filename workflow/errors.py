"""The one kind of error `rlsweep` and the Snakefile print as a message, not a traceback."""


class UserError(Exception):
    """A problem the user can fix (a sweep file, a query, a results directory): `str()` is the whole message."""


def out_of_space(error: BaseException, where) -> str | None:
    """One line for a failure that a full disk (or quota) caused, else None: ENOSPC / EDQUOT anywhere in the
    exception's chain, or any failure while the file system holding `where` has next to nothing left (torch's
    checkpoint writer reports a full disk only as "unexpected pos")."""
    import errno
    import shutil
    chain, seen = [], error
    while seen is not None and len(chain) < 20:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    full = any(isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT) for e in chain)
    try:
        usage = shutil.disk_usage(where)
    except OSError:
        return None if not full else f"error: no space left on the file system holding {where}: free some and run " \
                                     "the same command again (what was written before stays intact)"
    if not full and usage.free > 64 * 2**20:  # room left: the failure is something else
        return None
    return (f"error: no space left on the file system holding {where} ({_size(usage.free)} free of "
            f"{_size(usage.total)}): free some and run the same command again (what was written before stays "
            f"intact; a training stage resumes from its newest checkpoint). The failure: {type(error).__name__}: "
            f"{str(error).strip().splitlines()[0] if str(error).strip() else ''}")


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
