"""Is this valid Unicode text? One check for text that arrives from files, JSON and the command line.

JSON can spell a lone surrogate (``"\\ud800"``) and Python decodes non-UTF-8 command-line bytes into them
(surrogateescape); either way the result is a ``str`` that no encoder accepts, so it fails far from where it
came in (writing Arrow, printing, tokenizing). Catch it where the text enters, with where and what.
"""

from __future__ import annotations

import re
from typing import Any

from hxd2_ray.errors import HxdError

_SURROGATE = re.compile("[\ud800-\udfff]")


class InvalidTextError(HxdError, ValueError):
    """Text that is not valid Unicode (a lone surrogate)."""


def lone_surrogate(value: Any) -> str | None:
    """Where the first lone surrogate in ``value`` (a str, or dicts/lists/tuples of them) is, or None."""
    if isinstance(value, str):
        m = _SURROGATE.search(value)
        return f"U+{ord(m.group()):04X} at character {m.start()}" if m else None
    if isinstance(value, dict):
        for key, item in value.items():
            where = lone_surrogate(key) or lone_surrogate(item)
            if where:
                return f"{where} of {key!r}" if isinstance(key, str) and not lone_surrogate(key) else where
        return None
    if isinstance(value, (list, tuple)):
        for item in value:
            where = lone_surrogate(item)
            if where:
                return where
    return None


def surrogate_reason(value: Any) -> str | None:
    """A skip reason for a record holding a lone surrogate, or None when its text is valid."""
    where = lone_surrogate(value)
    return f"lone surrogate {where}: not valid Unicode text" if where else None


def check_text(text: str, what: str) -> str:
    """``text`` unchanged, or :class:`InvalidTextError` naming ``what`` and the offending character."""
    where = lone_surrogate(text)
    if where:
        raise InvalidTextError(f"{what} holds a lone surrogate ({where}), which is not valid Unicode text")
    return text
