"""Filling prompt templates kept as versioned YAML data (extraction, query, logic form, multi-stage)."""

from __future__ import annotations

import re
from typing import Callable, Sequence

TemplateFiller = Callable[..., str]


def placeholder_filler(placeholders: Sequence[str]) -> TemplateFiller:
    """``fill(template, **values)`` substituting only these ``{name}``s, in one pass.

    Unlike ``str.format`` it leaves JSON braces alone and never re-expands a placeholder that appears inside a
    substituted value (a chunk or a question may well contain ``{entity_types}``).
    """
    pattern = re.compile(r"\{(" + "|".join(map(re.escape, placeholders)) + r")\}")

    def fill(template: str, **values: str) -> str:
        return pattern.sub(lambda m: values[m.group(1)] if m.group(1) in values else m.group(0), template)

    return fill
