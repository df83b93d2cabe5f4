"""What every benchmark loader returns (:class:`EvalItem`, :class:`LoadReport`), its error, and the file
helpers the loaders share: a malformed row is noted and skipped, a file unreadable as a whole raises."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hxd2_ray.errors import HxdError
from hxd2_ray.evaluation import metrics as M
from hxd2_ray.text_validation import surrogate_reason

log = logging.getLogger("hxd2_ray.evaluation.datasets")


TASKS = ("qa1", "qa2", "qa3", "qa4", "multihop", "kgqa", "generic")


class DatasetError(HxdError, ValueError):
    """A benchmark file is missing or unreadable as a whole (single bad rows are skipped, not raised)."""


@dataclass(frozen=True, slots=True)
class EvalItem:
    id: str
    question: str  # as the benchmark states it (SeedBench: stem + options; MetaQA: brackets removed, see topic)
    answers: tuple[str, ...]  # gold answers (QA-1: one letter; QA-2: the gold letters, sorted)
    gold_passages: tuple[str, ...] = ()  # corpus ids (= the indexed documents' source_id)
    choices: tuple[tuple[str, str], ...] = ()  # (letter, option text)
    task: str = "generic"
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    # The question's topic entity where the benchmark gives one (MetaQA's [brackets], a ``topic`` field): every
    # entry point passes it on, so the walk starts there instead of linking it from the text.
    topic: str = ""

    @property
    def instruction(self) -> str:
        return str(self.meta.get("instruction", ""))

    @property
    def generation_prompt(self) -> str:
        """What the answer LLM is asked: ``instruction + "\\n" + question`` when there is an instruction."""
        return f"{self.instruction}\n{self.question}" if self.instruction else self.question

    @property
    def retrieval_query(self) -> str:
        """What retrieval searches with: the stem without options, or the question."""
        return str(self.meta.get("stem") or self.question)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "question": self.question,
            "answers": list(self.answers),
            "gold_passages": list(self.gold_passages),
            "choices": [list(c) for c in self.choices],
            "task": self.task,
            "meta": dict(self.meta),
            "topic": self.topic,
        }


@dataclass(slots=True)
class LoadReport:
    items: list[EvalItem]
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (file#index or file:line, reason)
    filtered: dict[str, int] = field(default_factory=dict)  # valid rows left out on purpose ("not rice": 154)

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[EvalItem]:
        return iter(self.items)

    def extend(self, other: "LoadReport") -> None:
        self.items.extend(other.items)
        self.skipped.extend(other.skipped)
        for k, v in other.filtered.items():
            self.filtered[k] = self.filtered.get(k, 0) + v

    def summary(self) -> dict[str, Any]:
        return {
            "items": len(self.items),
            "skipped": len(self.skipped),
            "filtered": dict(self.filtered),
            "skipped_rows": [list(s) for s in self.skipped],
        }


# --------------------------------------------------------------------------------------------------------------
# file helpers
# --------------------------------------------------------------------------------------------------------------


def read_text_file(path: Path) -> str:
    if not path.is_file():
        raise DatasetError(f"benchmark file not found: {path}")
    try:
        return path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"cannot read {path}: {exc}") from exc


def read_json_file(path: Path) -> Any:
    try:
        return json.loads(read_text_file(path))
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, over-long integers, absurd nesting
        raise DatasetError(f"{path} is not valid JSON: {exc}") from exc


def nonblank_str(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def has_cjk(text: str) -> bool:
    return bool(M.CJK_CHAR.search(text))


def note_skipped(skipped: list[tuple[str, str]] | None, where: str, reason: str) -> None:
    if skipped is not None:
        skipped.append((where, reason))
    else:
        log.warning("skipped %s: %s", where, reason)


def loads_row(line: str) -> tuple[Any, str | None]:
    """One JSON row, or the reason it is skipped (not JSON, or text that is not valid Unicode)."""
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as exc:
        return None, f"invalid JSON: {exc.msg}"
    except (ValueError, RecursionError) as exc:  # over-long integer literals, absurd nesting
        return None, f"invalid JSON: {type(exc).__name__}"
    bad = surrogate_reason(rec)
    return (None, bad) if bad else (rec, None)


def jsonl_rows(path: Path) -> Iterable[tuple[int, Any, str | None]]:
    for lineno, line in enumerate(read_text_file(path).splitlines(), 1):
        if not line.strip():
            continue
        rec, err = loads_row(line)
        yield lineno, rec, err
