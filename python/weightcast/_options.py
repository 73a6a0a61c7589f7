"""Checks of keyword arguments before they reach the C++ core, so that a mistyped keyword or a
value of the wrong type is a one-line error naming the keyword, not pybind11's dump of a whole
signature. Sizes are read by the CLI's own parser: ``chunk_size="1MiB"`` works as
``--chunk-size 1MiB`` does."""

import difflib
import numbers
import os

from . import _weightcast


def size(keyword, value):
    """Bytes from an int >= 0 or a size string ("1MiB", "64k", "4096")."""
    if isinstance(value, str):
        try:
            return _weightcast._parse_size(value)
        except _weightcast.InvalidArgumentError as e:
            raise _weightcast.InvalidArgumentError(f"{keyword}: {e}") from None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{keyword} must be a number of bytes (int) or a size string like "
                        f"'1MiB', not {type(value).__name__} {value!r}")
    if value < 0:
        raise _weightcast.InvalidArgumentError(f"{keyword} must be >= 0, not {value}")
    return int(value)


def text(keyword, value):
    if not isinstance(value, str):
        raise TypeError(f"{keyword} must be a str, not {type(value).__name__} {value!r}")
    return value


def path(keyword, value):
    if value is None:
        raise TypeError(f"{keyword} must be a path (a directory or file), not None")
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{keyword} must be a path (str or os.PathLike), not "
                        f"{type(value).__name__} {value!r}")
    return os.fspath(value)


def integer(keyword, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise TypeError(f"{keyword} must be an int >= 0, not {type(value).__name__} {value!r}")
    return int(value)


def boolean(keyword, value):
    if not isinstance(value, bool):
        raise TypeError(f"{keyword} must be a bool, not {type(value).__name__} {value!r}")
    return value


def seconds(keyword, value):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{keyword} must be a number of seconds, not "
                        f"{type(value).__name__} {value!r}")
    return float(value)


def check(where, given, allowed, also=()):
    """``given`` converted by ``allowed`` (keyword -> converter). An unknown keyword raises
    TypeError naming it, the closest known one, and every keyword ``where`` takes (``also``:
    the ones it takes outside ``given``)."""
    out = {}
    for keyword, value in given.items():
        convert = allowed.get(keyword)
        if convert is None:
            known = sorted(set(allowed) | set(also))
            close = difflib.get_close_matches(keyword, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TypeError(f"{where}() got an unexpected keyword argument {keyword!r}{hint}; "
                            f"it takes: {', '.join(known)}")
        out[keyword] = convert(keyword, value)
    return out
