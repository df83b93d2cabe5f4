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


def find_lone_surrogate(value: Any, where: str = "") -> tuple[str, str, int] | None:
    """The first lone surrogate in ``value`` (a str, or dicts/lists/tuples of them, keys too): the field it is in
    (``where`` extended by ``.key``/``.index``, ``" (a key)"`` for a key), the character as ``U+XXXX``, and its
    offset; None when all is valid text. Iterative, so a deeply nested request body cannot exhaust the stack."""
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        item, at = stack.pop()
        if isinstance(item, str):
            m = _SURROGATE.search(item)
            if m:
                return at, f"U+{ord(m.group()):04X}", m.start()
        elif isinstance(item, dict):
            for key, child in reversed(list(item.items())):
                stack.append((child, f"{at}.{key}" if at else str(key)))
                stack.append((key, f"{at} (a key)" if at else "(a key)"))
        elif isinstance(item, (list, tuple)):
            stack.extend((child, f"{at}.{i}" if at else str(i)) for i, child in reversed(list(enumerate(item))))
    return None


def lone_surrogate(value: Any) -> str | None:
    """Where the first lone surrogate in ``value`` (a str, or dicts/lists/tuples of them) is, or None."""
    found = find_lone_surrogate(value)
    if found is None:
        return None
    field, char, offset = found
    return f"{char} at character {offset}" + (f" of {field!r}" if field and "(a key)" not in field else "")


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
