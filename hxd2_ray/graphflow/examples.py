"""Questions as GraphFlow examples: start nodes, target nodes, and a count of what was skipped and why.

Two tasks share everything but the targets:

* ``kgqa`` (MetaQA): the gold answers are entity names; each is looked up by its entity key. Answers the index
  does not hold are counted (``answers_unknown``); a question none of whose answers is in the index is skipped.
* ``passages`` (any questions file with ``gold_passages``): the targets are the chunks of the gold documents
  (their ``source_id``); a question naming a document the index does not hold is skipped.

A question whose start node cannot be linked is skipped for training (``no linkable start node``) and scored as a
miss in evaluation. :func:`split_examples` is the fixed, seeded train/dev/test split by question.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Sequence

from hxd2_ray.config import ExtractionConfig
from hxd2_ray.extraction.merge import entity_key
from hxd2_ray.graphflow.linking import LinkedQuestion, StartLinker
from hxd2_ray.graphflow.walk_graph import WalkGraph

__all__ = ["Example", "ExampleSet", "TargetKind", "build_examples", "split_examples", "target_kind_of"]

TargetKind = Literal["kgqa", "passages"]


@dataclass(frozen=True)
class Example:
    id: str
    question: str  # as given, brackets removed
    policy_text: str
    starts: tuple[int, ...]
    targets: frozenset[int]
    gold: tuple[str, ...]  # answer names (kgqa) or passage source ids (passages), as the file states them
    link: LinkedQuestion | None = field(default=None, compare=False)
    meta: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass
class ExampleSet:
    examples: list[Example]
    kind: TargetKind
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (question id, reason)
    answers_unknown: int = 0  # gold answers not in the index, in questions kept
    unlinked: int = 0  # questions kept without a start node (keep_unlinked): misses in evaluation

    def reasons(self) -> dict[str, int]:
        return dict(Counter(reason.split(":")[0] for _, reason in self.skipped).most_common())

    def summary(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "examples": len(self.examples),
            "skipped": len(self.skipped),
            "skipped_by_reason": self.reasons(),
            "answers_unknown": self.answers_unknown,
            "kept_without_start_node": self.unlinked,
            "skipped_examples": [list(s) for s in self.skipped[:10]],
        }


def target_kind_of(items: Sequence[Any]) -> TargetKind:
    """``passages`` when the questions carry gold passages, else ``kgqa``."""
    with_passages = sum(1 for it in items if getattr(it, "gold_passages", ()))
    return "passages" if with_passages and with_passages >= len(items) / 2 else "kgqa"


def _question_text(item: Any) -> str:
    """The text the linker sees: MetaQA's marked question keeps its [brackets]."""
    meta = getattr(item, "meta", {}) or {}
    return str(meta.get("question_marked") or item.question)


def question_topic(item: Any) -> str:
    """The item's topic entity: its ``topic`` field, else (items made before the field) ``meta["topic_entity"]``."""
    meta = getattr(item, "meta", {}) or {}
    return str(getattr(item, "topic", "") or meta.get("topic_entity") or "")


def build_examples(
    items: Iterable[Any],
    graph: WalkGraph,
    linker: StartLinker,
    kind: TargetKind | None = None,
    *,
    keep_unlinked: bool = False,
) -> ExampleSet:
    """Examples from :class:`~hxd2_ray.evaluation.datasets.EvalItem`-like items (``id``, ``question``,
    ``answers``, ``gold_passages``, ``meta``). ``keep_unlinked``: keep questions without a start node (evaluation
    scores them as misses) instead of skipping them."""
    key_cfg = ExtractionConfig()  # the names' normaliser, as the logic form's linker uses it
    items = list(items)
    kind = kind or target_kind_of(items)
    out = ExampleSet(examples=[], kind=kind)
    sources = graph.chunks_of_sources() if kind == "passages" else {}
    for item in items:
        if kind == "passages":
            gold = tuple(item.gold_passages)
            if not gold:
                out.skipped.append((item.id, "no gold passages"))
                continue
            missing = [g for g in gold if g not in sources]
            if missing:
                out.skipped.append((item.id, f"gold passage not in the index: {missing[:3]}"))
                continue
            targets = frozenset(n for g in gold for n in sources[g])
        else:
            gold = tuple(item.answers)
            nodes = [graph.node_of(entity_key(a, key_cfg)) for a in gold]
            known = [n for n in nodes if n is not None and n < graph.n_entities]
            if not gold:
                out.skipped.append((item.id, "no answers"))
                continue
            if not known:
                out.skipped.append((item.id, f"no answer is an entity of the index: {list(gold[:3])}"))
                continue
            out.answers_unknown += len(nodes) - len(known)
            targets = frozenset(known)
        link = linker.link(_question_text(item), question_topic(item))
        if not link.starts:
            if not keep_unlinked:
                out.skipped.append((item.id, f"no linkable start node: {link.reason}"))
                continue
            out.unlinked += 1
        out.examples.append(
            Example(
                id=item.id,
                question=link.question,
                policy_text=link.policy_text,
                starts=tuple(s.node for s in link.starts),
                targets=targets,
                gold=gold,
                link=link,
                meta={"hops": (getattr(item, "meta", {}) or {}).get("hops")},
            )
        )
    return out


def _rank(example_id: str, seed: int) -> str:
    return hashlib.sha256(f"{seed}\x1f{example_id}".encode()).hexdigest()


def split_examples(
    examples: Sequence[Example], dev_fraction: float, test_fraction: float, seed: int
) -> tuple[list[Example], list[Example], list[Example]]:
    """(train, dev, test) by question, fixed by ``seed`` and each question's id alone: adding or removing other
    questions never moves a question to another part."""
    train: list[Example] = []
    dev: list[Example] = []
    test: list[Example] = []
    for ex in examples:
        u = int(_rank(ex.id, seed)[:12], 16) / float(16**12)
        (test if u < test_fraction else dev if u < test_fraction + dev_fraction else train).append(ex)
    return train, dev, test
