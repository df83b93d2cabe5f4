"""Keep only what the chunk's text supports: grounded entity names and relations between them.

A small model copies names from the extraction prompt's few-shot example into the user's graph ("Halden
Institute", "Rachel Osei"), and invents names its chunk never mentions. ``extraction.grounding`` decides what an
extraction must show before it reaches the graph:

* ``strict``: the entity's name occurs in its chunk, both compared normalised (Unicode NFKC, case folded,
  whitespace runs as one space);
* ``fuzzy``: as strict, or some span of the chunk matches the name with rapidfuzz's ``partial_ratio`` at least
  ``grounding_min_score`` (an inflection, a plural, a dropped hyphen: "kelp forests" for "Kelp Forest");
* ``off``: everything is kept.

A relation is kept when both of its ends are grounded names of the chunk (as entities of it, or by the same
rule: an end the parser turns into an endpoint-only entity must occur in the text too). A name of the prompt's
own examples passes only the strict rule, never the fuzzy one: the example's names are near-misses of
many real names, and a copy of the example is exactly what grounding is for.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Iterable, Sequence

from rapidfuzz import fuzz

from hxd2_ray.config import ExtractionConfig
from hxd2_ray.extraction.prompts import PromptSet
from hxd2_ray.types import EntityMention, RelationMention

_SPACES = re.compile(r"\s+")
# Names in the prompt's examples: JSON ("name"/"source"/"target": "...") and tuple records ("entity"<|>NAME<|>...,
# "relationship"<|>SOURCE<|>TARGET<|>...).
_JSON_NAME = re.compile(r'"(?:name|source|target)"\s*:\s*"([^"]+)"')
_TUPLE_ENTITY = re.compile(r'\("entity"<\|>([^<]+)<\|>')
_TUPLE_RELATION = re.compile(r'\("relationship"<\|>([^<]+)<\|>([^<]+)<\|>')


def normalise(text: str) -> str:
    """The form names and texts are compared in: NFKC, case folded, whitespace runs as one space, trimmed."""
    return _SPACES.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def example_names(prompts: PromptSet) -> frozenset[str]:
    """Normalised entity names of the few-shot examples in every language's extraction prompts."""
    names: set[str] = set()
    for lang in prompts.languages.values():
        for text in (lang.tuples_system, lang.json_system, lang.continue_extraction):
            names.update(_JSON_NAME.findall(text))
            names.update(_TUPLE_ENTITY.findall(text))
            for source, target in _TUPLE_RELATION.findall(text):
                names.update((source, target))
    return frozenset(n for n in (normalise(name) for name in names) if n)


@dataclass(frozen=True, slots=True)
class Grounded:
    """What one chunk's extraction keeps, and how much it dropped."""

    entities: tuple[EntityMention, ...]
    relations: tuple[RelationMention, ...]
    ungrounded_entities: int = 0
    ungrounded_relations: int = 0


class Grounding:
    """The grounding rule of ``cfg.grounding`` for one prompt set."""

    def __init__(
        self, cfg: ExtractionConfig, prompts: PromptSet | None = None, examples: Iterable[str] | None = None
    ) -> None:
        self.mode = cfg.grounding
        self.min_score = cfg.grounding_min_score
        found = example_names(prompts) if prompts is not None else frozenset()
        self.examples = found | frozenset(normalise(n) for n in (examples or ()))

    def name_in_text(self, name: str, text: str) -> bool:
        """Whether ``name`` is grounded in ``text`` (``text`` already normalised)."""
        key = normalise(name)
        if not key:
            return False
        if key in text:
            return True
        if self.mode != "fuzzy" or key in self.examples or len(key) < 3:
            return False  # 1-2 characters match some span of any text
        return fuzz.partial_ratio(key, text, score_cutoff=self.min_score) >= self.min_score

    def ground(self, text: str, entities: Sequence[EntityMention], relations: Sequence[RelationMention]) -> Grounded:
        if self.mode == "off":
            return Grounded(tuple(entities), tuple(relations))
        chunk = normalise(text)
        verdicts: dict[str, bool] = {}

        def grounded(name: str) -> bool:
            key = normalise(name)
            if key not in verdicts:
                verdicts[key] = self.name_in_text(name, chunk)
            return verdicts[key]

        kept_entities = tuple(e for e in entities if grounded(e.name))
        kept_relations = tuple(r for r in relations if grounded(r.source) and grounded(r.target))
        return Grounded(
            kept_entities, kept_relations, len(entities) - len(kept_entities), len(relations) - len(kept_relations)
        )


# Capitalised word runs ("Lester Smith", "Bank of England"): the names a text spells out, for gleaning's "is anything
# left to find" test. Lower-case joiners inside a name are allowed; a run's leading function words ("The", "In")
# and runs of them alone are not names.
_NAME_RUN = re.compile(
    r"[A-ZÀ-ÖØ-Þ][\w'’&-]*(?:\s+(?:(?:of|the|de|del|da|di|du|van|von|der|la|le|y)\s+)*[A-ZÀ-ÖØ-Þ][\w'’&-]*)*"
)
_NOT_NAMES = frozenset(
    """a an the in on at of for to by with from as after before during since until when while where who whom whose
    which what it its he she his her hers they their them this that these those there here we our you your i my me is
    was are were be been neither either both each every some many most one also but and or nor yet so however
    although though if then than because not no all any other such""".split()
)


def named_spans(text: str) -> list[str]:
    """The capitalised word runs of ``text`` (leading function words dropped), normalised, in order, unique.

    Only scripts with capitals have any: for a Chinese text this is empty, and callers treat "no names seen"
    as "nothing known", not as "nothing there"."""
    spans: dict[str, None] = {}
    for match in _NAME_RUN.finditer(text):
        words = match.group(0).split()
        while words and words[0].casefold().strip(".") in _NOT_NAMES:
            words = words[1:]
        span = normalise(" ".join(words).rstrip(".,'’"))
        if len(span) >= 2:
            spans.setdefault(span, None)
    return list(spans)


def names_left(text: str, found: Iterable[str]) -> list[str]:
    """The names ``text`` spells out (:func:`named_spans`) that no found name covers: a found name contains the span,
    or the span contains it (both normalised)."""
    keys = [k for k in (normalise(n) for n in found) if k]
    return [s for s in named_spans(text) if not any(s in k or k in s for k in keys)]
