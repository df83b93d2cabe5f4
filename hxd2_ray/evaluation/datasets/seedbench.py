"""SeedBench QA-1..4 (and its segments corpus), and the answer options inside a question."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hxd2_ray.evaluation import metrics as M
from hxd2_ray.evaluation.datasets.items import (
    DatasetError,
    EvalItem,
    LoadReport,
    has_cjk,
    loads_row,
    nonblank_str,
    note_skipped,
    read_json_file,
    read_text_file,
)
from hxd2_ray.text_validation import surrogate_reason

# --------------------------------------------------------------------------------------------------------------
# options in a question
# --------------------------------------------------------------------------------------------------------------

_OPTION_LINE = re.compile(r"^\s*[(（]?([A-HＡ-Ｈ])\s*[.．、:：)）]\s*(.*?)\s*$")
_INLINE_MARK = re.compile(r"(?:^|(?<=\s))[(（]?([A-H])\s*[.．、:：)）]\s*")


def _split_options(question: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    lines = question.strip().splitlines()
    block: list[tuple[str, str]] = []
    i = len(lines)
    while i > 0:
        m = _OPTION_LINE.match(lines[i - 1])
        if not m:
            if not lines[i - 1].strip() and not block:  # trailing blank lines
                i -= 1
                continue
            break
        block.insert(0, (unicodedata.normalize("NFKC", m.group(1)), m.group(2)))
        i -= 1
    letters = "".join(b[0] for b in block)
    if len(block) >= 2 and "ABCDEFGH".startswith(letters):
        return "\n".join(lines[:i]).strip(), tuple(block)
    # inline options on the last line: "... ? A. x B. y C. z D. w"
    last = lines[-1] if lines else ""
    marks = list(_INLINE_MARK.finditer(last))
    for start in range(len(marks)):
        if marks[start].group(1) != "A":
            continue
        seq = [marks[start]]
        for m in marks[start + 1 :]:
            if m.group(1) == chr(ord(seq[-1].group(1)) + 1):
                seq.append(m)
        if len(seq) >= 2:
            opts = []
            for j, m in enumerate(seq):
                end = seq[j + 1].start() if j + 1 < len(seq) else len(last)
                opts.append((m.group(1), last[m.end() : end].strip()))
            stem = "\n".join(lines[:-1] + [last[: seq[0].start()]]).strip()
            return stem, tuple(opts)
    return question.strip(), ()


def question_stem(question: str) -> str:
    """The question without its options: trailing ``A. …`` / ``B、…`` / ``(C) …`` lines (at least two, starting
    at A, in order) or an inline ``A. x B. y`` run on the last line are removed."""
    return _split_options(question)[0]


def parse_choices(question: str) -> tuple[tuple[str, str], ...]:
    """The ``(letter, text)`` options of a question, in order; empty when it has none."""
    return _split_options(question)[1]


# --------------------------------------------------------------------------------------------------------------
# SeedBench
# --------------------------------------------------------------------------------------------------------------

SEEDBENCH_SUBSETS = {"1-1": "qa1", "1-2": "qa2", "1-3": "qa3", "1-4": "qa4"}
_SEEDBENCH_TASK_TYPES = {
    "1-1": "key_single_choice",
    "1-2": "key_multiple_choice",
    "1-3": "key_blank_fill",
    "1-4": "key_text_generation",
}
_LETTER_LIST = re.compile(r"^\s*[A-D](?:\s*[,，、/;；\s]\s*[A-D])*\s*$")


def is_rice(row: Mapping[str, Any]) -> bool:
    """The rice rule: ``split.level2`` is "Oryza sativa" (NFKC, ``_`` as space, case-insensitive, trailing
    author abbreviation such as " L." ignored)."""
    split = row.get("split")
    level2 = split.get("level2") if isinstance(split, Mapping) else None
    if not isinstance(level2, str):
        return False
    norm = " ".join(unicodedata.normalize("NFKC", level2).replace("_", " ").casefold().split())
    return norm == "oryza sativa" or norm.startswith("oryza sativa ")


def _seedbench_files(path: Path, subsets: Sequence[str]) -> list[tuple[str, Path]]:
    bad = [s for s in subsets if s not in SEEDBENCH_SUBSETS]
    if bad:
        raise ValueError(f"unknown SeedBench subset(s) {bad}; valid: {sorted(SEEDBENCH_SUBSETS)}")
    if path.is_file():
        if path.stem not in SEEDBENCH_SUBSETS:
            raise DatasetError(
                f"{path.name}: not a SeedBench QA file; expected one of {[s + '.json' for s in SEEDBENCH_SUBSETS]}"
            )
        return [(path.stem, path)]
    if not path.is_dir():
        raise DatasetError(f"SeedBench path not found: {path}")
    out = []
    for s in subsets:
        for cand in (path / f"{s}.json", path / "zero-shot" / f"{s}.json"):
            if cand.is_file():
                out.append((s, cand))
                break
        else:
            raise DatasetError(
                f"SeedBench subset {s}: neither {path / (s + '.json')} nor {path / 'zero-shot' / (s + '.json')} exists"
            )
    return out


def _seedbench_row(subset: str, index: int, row: Any, source: str) -> EvalItem | str:
    """The item of one row, or the reason it is skipped."""
    task = SEEDBENCH_SUBSETS[subset]
    if not isinstance(row, Mapping):
        return f"row is {type(row).__name__}, not an object"
    question = nonblank_str(row.get("question"))
    if question is None:
        return "missing or empty 'question'"
    raw_answer = row.get("answer")
    answer = nonblank_str(raw_answer)
    if answer is None:
        return "missing or empty 'answer'"
    instruction = row.get("instruction", "")
    if not isinstance(instruction, str):
        return "'instruction' is not a string"
    task_type = row.get("task_type")
    if task_type is not None and task_type != _SEEDBENCH_TASK_TYPES[subset]:
        return f"task_type {task_type!r} does not belong in {subset}.json"
    stem, choices = _split_options(question)
    if task in ("qa1", "qa2"):
        letters = "".join(c[0] for c in choices)
        if len(choices) < 2:
            return "no A/B/C/D option lines in the question"
        norm = unicodedata.normalize("NFKC", answer).upper()
        if task == "qa1":
            if len(norm) != 1 or norm not in letters:
                return f"answer {answer!r} is not one of the options {letters}"
            answers: tuple[str, ...] = (norm,)
        else:
            if not _LETTER_LIST.match(norm):
                return f"answer {answer!r} is not a list of option letters"
            gold = M.parse_choice_set(norm)
            if not gold <= set(letters):
                return f"answer {answer!r} names an option the question does not have ({letters})"
            answers = tuple(sorted(gold))
    else:
        answers = (answer,)
    split_field = row.get("split")
    split = split_field if isinstance(split_field, Mapping) else {}
    meta = {
        "subset": subset,
        "source": source,
        "index": index,
        "instruction": instruction,
        "stem": stem,
        "level1": split.get("level1", ""),
        "level2": split.get("level2", ""),
        "task_type": task_type or "",
        "language": "zh" if has_cjk(question) else "en",
        "rice": is_rice(row),
        "gold_raw": answer,
    }
    return EvalItem(
        id=f"{subset}-{index:04d}",
        question=question,
        answers=answers,
        gold_passages=(),
        choices=choices if task in ("qa1", "qa2") else (),
        task=task,
        meta=meta,
    )


def load_seedbench(
    path_or_dir: str | Path, subsets: Sequence[str] = ("1-1", "1-2", "1-3", "1-4"), rice_only: bool = False
) -> LoadReport:
    """SeedBench QA-1..QA-4 items.

    ``path_or_dir`` is one ``1-N.json`` file (its subset from the name), a ``zero-shot`` folder, or the SeedBench
    folder holding ``zero-shot/``. Ids are ``{subset}-{index:04d}`` (0-based position in the file, so they stay
    stable when filtering). ``rice_only`` keeps rows for which :func:`is_rice` holds; the others are counted in
    ``filtered["not rice"]``, not in ``skipped``.
    """
    report = LoadReport(items=[])
    for subset, path in _seedbench_files(Path(path_or_dir), tuple(subsets)):
        data = read_json_file(path)
        if not isinstance(data, list):
            raise DatasetError(f"{path}: expected a JSON array of questions, got {type(data).__name__}")
        for index, row in enumerate(data):
            where = f"{path.name}#{index}"
            item = surrogate_reason(row) or _seedbench_row(subset, index, row, str(path))
            if isinstance(item, str):
                report.skipped.append((where, item))
            elif rice_only and not item.meta["rice"]:
                report.filtered["not rice"] = report.filtered.get("not rice", 0) + 1
            else:
                report.items.append(item)
    return report


def load_seedbench_segments(path: str | Path, skipped: list[tuple[str, str]] | None = None) -> list[dict[str, str]]:
    """SeedBench ``279segments.jsonl`` (JSON Lines despite the upstream ``.json`` name) as corpus records
    ``{id: "seg-NNN" (1-based line), title: subcategory, text: segment}``."""
    p = Path(path)
    out = []
    for lineno, line in enumerate(read_text_file(p).splitlines(), 1):
        if not line.strip():
            continue
        rec, err = loads_row(line)
        if err:
            note_skipped(skipped, f"{p.name}:{lineno}", err)
            continue
        text = nonblank_str(rec.get("segment")) if isinstance(rec, dict) else None
        if text is None:
            note_skipped(skipped, f"{p.name}:{lineno}", "missing or empty 'segment'")
            continue
        out.append({"id": f"seg-{lineno:03d}", "title": str(rec.get("subcategory", "")), "text": text})
    return out
