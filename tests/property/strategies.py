"""Shared Hypothesis strategies: hostile text and JSON the parsers must survive."""

from __future__ import annotations

import json

from hypothesis import strategies as st

# Lone surrogates: what a JSON "\ud800" escape or a non-UTF-8 byte on the command line decodes to in Python. No
# encoder accepts them, so a parser must not hand them on. Mixed in often: st.text() never draws them.
SURROGATES = st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff"])


def any_text(max_size: int = 30) -> st.SearchStrategy[str]:
    return st.lists(st.one_of(st.characters(exclude_categories=()), SURROGATES), max_size=max_size).map("".join)


# Text that reaches a parser: any code point (lone surrogates included, as a JSON "\ud800" escape decodes to),
# with the structural characters of JSON, tuples and markdown over-represented so the parsers' branches are hit.
STRUCTURE = list('{}[]":,\\\n\t`#|<>()') + [
    "<|>",
    "##",
    "<|COMPLETE|>",
    '"entity"',
    '"relationship"',
    "```json",
    "\r\n",
    "\ufeff",
    "\u2028",
    "\x00",
    "\ud800",
    "NaN",
    "1e999",
]
hostile_text = st.one_of(
    any_text(60),
    st.lists(st.one_of(st.sampled_from(STRUCTURE), any_text(8)), max_size=40).map("".join),
)

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), any_text(30)
)


def _nested(max_leaves: int) -> st.SearchStrategy:
    return st.recursive(
        json_scalars,
        lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(any_text(10), children, max_size=4)),
        max_leaves=max_leaves,
    )


json_values = _nested(20)  # a whole document
small_json = _nested(4)  # one field's value inside a generated record


def json_text(value_strategy=json_values):
    """JSON documents, sometimes wrapped in prose or a code fence, sometimes cut short."""

    def render(args):
        value, wrap, cut = args
        # ensure_ascii: surrogates travel as \\udXXX escapes, as they do in real JSON (a raw one cannot be UTF-8).
        text = json.dumps(value, ensure_ascii=True)
        if wrap == 2:
            text = f"Here you go:\n```json\n{text}\n```"
        elif wrap == 3:
            text = f"Sure! {text} Hope this helps."
        return text[: max(1, len(text) - cut)] if cut else text

    return st.tuples(value_strategy, st.integers(0, 3), st.one_of(st.just(0), st.integers(1, 30))).map(render)


def is_valid_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
