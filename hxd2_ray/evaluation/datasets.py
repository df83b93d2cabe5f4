"""Benchmark loaders into one :class:`EvalItem` shape, the benchmark registry, and per-item scoring.

Every loader returns a :class:`LoadReport`: the items, plus ``skipped`` rows as ``(where, reason)`` pairs
(``where`` is ``file#index`` for JSON arrays, ``file:line`` for line formats). A malformed row is skipped and
counted, never fatal; a file that is missing or not readable as a whole raises :class:`DatasetError`.

Formats (inspected on the copies under ``../shared/data``):

* **SeedBench** ``zero-shot/1-{1..4}.json``: a JSON array of ``{instruction, question, answer, split: {level1,
  level2}, task_type}``. QA-1 answers are one letter; QA-2 answers are letter lists ``"A, D, B"`` (unordered);
  QA-3 (fill-in-blank) and QA-4 (generation) answers are free text, Chinese or English. Options sit in the
  question as trailing ``A. …`` lines. The generation prompt is ``instruction + "\\n" + question`` (as the
  reference's ``2_kag_extract.py``); retrieval uses :func:`question_stem` (the question without its options).
  **Rice filter** (``rice_only``): ``split.level2`` names the species and is ``"Oryza sativa"`` for rice
  (compared after NFKC, ``_`` -> space, case-folding). ``split.level1`` is the task subcategory, *not* the crop:
  rice rows use Chinese subcategory names, but some soybean rows do too. With the filter, 1-1.json keeps
  200 items (its first 200: the 200-item file of commit 2c6a650 the paper used, spot-checked), 1-2 187,
  1-3 223, 1-4 240. Caution: QA-4 gold answers mostly restate the question, so echoing the question alone
  scores ROUGE-L 0.53 (0.49 on rice items); QA-3 echo scores 0.02. Compare QA-4 runs with that floor.
* **HotpotQA (HippoRAG)**: ``hotpotqa_train.json`` is the HotpotQA distractor format (``_id, question, answer,
  supporting_facts: [[title, sentence_index], …], context``); ``*_corpus.json`` maps ``title -> [sentences]``.
  A passage's id is its title, so the gold passages of a question are the distinct titles of its supporting
  facts. HippoRAG's toy sets (``sample.json``, ``case_study_university.json``) use another format (``id,
  question, answer: [..], paragraphs: [{title, text, is_supporting, idx}]`` with a list corpus); titles repeat
  there, so a list corpus uses ``"title (idx)"`` ids when its titles are not unique, and supporting paragraphs
  are matched to corpus entries by (title, text).
* **MetaQA**: ``question<TAB>answers[<TAB>qtype]`` lines, the topic entity in ``[brackets]``, answers
  ``|``-separated; ``qa_dev.txt`` has its qtypes line-aligned in ``qa_dev_qtype.txt``. The hop count comes from
  the ``{h}-hop`` folder name.
* **Generic**: corpus JSONL ``{id, title, text}``; questions JSONL ``{id, question, answers, gold_passages?}``.
"""

from __future__ import annotations

import json
import logging
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hxd2_ray.errors import HxdError
from hxd2_ray.evaluation import metrics as M
from hxd2_ray.text_validation import surrogate_reason

log = logging.getLogger(__name__)

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


def _read_text(path: Path) -> str:
    if not path.is_file():
        raise DatasetError(f"benchmark file not found: {path}")
    try:
        return path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"cannot read {path}: {exc}") from exc


def _read_json(path: Path) -> Any:
    try:
        return json.loads(_read_text(path))
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, over-long integers, absurd nesting
        raise DatasetError(f"{path} is not valid JSON: {exc}") from exc


def _nonblank_str(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _has_cjk(text: str) -> bool:
    return bool(M.CJK_CHAR.search(text))


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
    question = _nonblank_str(row.get("question"))
    if question is None:
        return "missing or empty 'question'"
    raw_answer = row.get("answer")
    answer = _nonblank_str(raw_answer)
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
        "language": "zh" if _has_cjk(question) else "en",
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
        data = _read_json(path)
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
    for lineno, line in enumerate(_read_text(p).splitlines(), 1):
        if not line.strip():
            continue
        rec, err = _loads_row(line)
        if err:
            _note(skipped, f"{p.name}:{lineno}", err)
            continue
        text = _nonblank_str(rec.get("segment")) if isinstance(rec, dict) else None
        if text is None:
            _note(skipped, f"{p.name}:{lineno}", "missing or empty 'segment'")
            continue
        out.append({"id": f"seg-{lineno:03d}", "title": str(rec.get("subcategory", "")), "text": text})
    return out


def _note(skipped: list[tuple[str, str]] | None, where: str, reason: str) -> None:
    if skipped is not None:
        skipped.append((where, reason))
    else:
        log.warning("skipped %s: %s", where, reason)


# --------------------------------------------------------------------------------------------------------------
# HotpotQA (HippoRAG copies)
# --------------------------------------------------------------------------------------------------------------


def load_corpus_hotpotqa(path: str | Path, skipped: list[tuple[str, str]] | None = None) -> list[dict[str, str]]:
    """HippoRAG corpus -> ``[{id, title, text}]``, keeping each passage's own id (it becomes ``source_id``).

    * dict ``title -> [sentences]`` (or ``title -> text``): id = title, text = the sentences joined as given
      (HotpotQA sentences carry their own leading spaces);
    * list of ``{title, text, idx?}``: id = title when titles are unique in the file, else ``"title (idx)"``
      (``"title (n)"`` with the 0-based position when there is no ``idx``).
    """
    p = Path(path)
    data = _read_json(p)
    out: list[dict[str, str]] = []
    if isinstance(data, Mapping):
        for n, (title, body) in enumerate(data.items()):
            if bad := surrogate_reason([title, body]):
                _note(skipped, f"{p.name}#{n}", bad)
                continue
            if isinstance(body, list) and all(isinstance(s, str) for s in body):
                text = "".join(body).strip()
            elif isinstance(body, str):
                text = body.strip()
            else:
                _note(skipped, f"{p.name}#{title}", "passage is neither a list of sentences nor a string")
                continue
            if not text:
                _note(skipped, f"{p.name}#{title}", "empty passage")
                continue
            out.append({"id": str(title), "title": str(title), "text": text})
        return out
    if not isinstance(data, list):
        raise DatasetError(f"{p}: expected a JSON object or array, got {type(data).__name__}")
    rows = []
    for n, rec in enumerate(data):
        if bad := surrogate_reason(rec):
            _note(skipped, f"{p.name}#{n}", bad)
            continue
        rec_title = _nonblank_str(rec.get("title")) if isinstance(rec, Mapping) else None
        rec_text = _nonblank_str(rec.get("text")) if isinstance(rec, Mapping) else None
        if rec_title is None or rec_text is None:
            _note(skipped, f"{p.name}#{n}", "missing or empty 'title' or 'text'")
            continue
        rows.append((rec_title, rec_text, rec.get("idx", n)))
    unique = len({r[0] for r in rows}) == len(rows)
    for title, text, idx in rows:
        out.append({"id": title if unique else f"{title} ({idx})", "title": title, "text": text})
    return out


def load_hotpotqa(questions_path: str | Path, corpus_path: str | Path | None = None) -> LoadReport:
    """HotpotQA questions in HippoRAG's files; gold passages are corpus ids (see :func:`load_corpus_hotpotqa`).

    With a corpus, a question whose supporting passage is not in it is skipped (it could never be retrieved).
    """
    qp = Path(questions_path)
    data = _read_json(qp)
    if not isinstance(data, list):
        raise DatasetError(f"{qp}: expected a JSON array of questions, got {type(data).__name__}")
    report = LoadReport(items=[])
    corpus_ids: set[str] | None = None
    by_content: dict[tuple[str, str], str] = {}
    if corpus_path is not None:
        corpus = load_corpus_hotpotqa(corpus_path, report.skipped)
        corpus_ids = {c["id"] for c in corpus}
        by_content = {(c["title"], c["text"]): c["id"] for c in corpus}
    seen: set[str] = set()
    for index, row in enumerate(data):
        where = f"{qp.name}#{index}"
        item = surrogate_reason(row) or _hotpot_row(index, row, str(qp), by_content)
        if isinstance(item, str):
            report.skipped.append((where, item))
            continue
        if item.id in seen:
            report.skipped.append((where, f"duplicate id {item.id!r}"))
            continue
        missing = [g for g in item.gold_passages if corpus_ids is not None and g not in corpus_ids]
        if missing:
            report.skipped.append((where, f"supporting passage(s) not in the corpus: {missing}"))
            continue
        seen.add(item.id)
        report.items.append(item)
    return report


def _hotpot_row(index: int, row: Any, source: str, by_content: Mapping[tuple[str, str], str]) -> EvalItem | str:
    if not isinstance(row, Mapping):
        return f"row is {type(row).__name__}, not an object"
    question = _nonblank_str(row.get("question"))
    if question is None:
        return "missing or empty 'question'"
    raw = row.get("answer")
    answers = tuple(
        a.strip()
        for a in ([raw] if isinstance(raw, str) else raw if isinstance(raw, list) else [])
        if isinstance(a, str) and a.strip()
    )
    if not answers:
        return "missing or empty 'answer'"
    qid = str(row.get("_id") or row.get("id") or f"q{index:05d}")
    meta: dict[str, Any] = {"source": source, "index": index}
    if "supporting_facts" in row:  # HotpotQA distractor format
        facts = row["supporting_facts"]
        if not isinstance(facts, list) or not facts:
            return "'supporting_facts' is empty or not a list"
        titles: list[str] = []
        for fact in facts:
            if not (isinstance(fact, (list, tuple)) and fact and isinstance(fact[0], str)):
                return f"malformed supporting fact {fact!r}"
            if fact[0] not in titles:
                titles.append(fact[0])
        gold = tuple(titles)
        meta.update(
            {"type": row.get("type", ""), "level": row.get("level", ""), "supporting_facts": [list(f) for f in facts]}
        )
    elif "paragraphs" in row:  # HippoRAG toy format
        paras = row["paragraphs"]
        if not isinstance(paras, list):
            return "'paragraphs' is not a list"
        ids: list[str] = []
        for p in paras:
            if isinstance(p, Mapping) and p.get("is_supporting"):
                key = (str(p.get("title", "")).strip(), str(p.get("text", "")).strip())
                pid = by_content.get(key, key[0])
                if pid and pid not in ids:
                    ids.append(pid)
        if not ids:
            return "no supporting paragraph"
        gold = tuple(ids)
    else:
        return "neither 'supporting_facts' nor 'paragraphs'"
    return EvalItem(id=qid, question=question, answers=answers, gold_passages=gold, task="multihop", meta=meta)


# --------------------------------------------------------------------------------------------------------------
# MetaQA
# --------------------------------------------------------------------------------------------------------------

_TOPIC = re.compile(r"\[([^\[\]]+)\]")
_HOPS = re.compile(r"(\d)-hop")


def load_metaqa(path: str | Path, qtype_path: str | Path | None = None, default_hops: int = 0) -> LoadReport:
    """The project's one MetaQA question loader: any file in MetaQA's own ``question TAB answer1|answer2`` format
    (the official ``qa_dev.txt`` / ``qa_test.txt``, qtypes from a line-aligned ``<stem>_qtype<suffix>`` next to it
    when present, or ``qtype_path``) or ``fixture_dev_200_reachable.tsv`` (``question TAB answers TAB qtype``).

    ``question`` has the brackets removed (what a user would type) and ``topic`` is the bracketed name, the
    field every entry point passes on (the walk starts there, as ``hxd2 graphflow evaluate`` does from the
    brackets); ``meta`` keeps ``question_marked`` (as in the file), ``topic_entity``, ``hops`` (from a
    ``{h}-hop`` folder, the file or its parent folder, e.g. the official ``1-hop/vanilla/qa_test.txt``; else
    ``default_hops``) and ``qtype``. Answers are the ``|``-separated gold entities. Ids are
    ``{h}hop-{file stem}-{line}``. Lines without a TAB, without answers or without a ``[topic entity]`` are skipped
    with their reason.
    """
    p = Path(path)
    lines = _read_text(p).splitlines()
    qtypes: list[str] | None = None
    qt = Path(qtype_path) if qtype_path else p.with_name(p.stem + "_qtype" + p.suffix)
    if qt.is_file():
        qtypes = _read_text(qt).splitlines()
        if len(qtypes) != len(lines):
            log.warning("%s has %d lines but %s has %d; qtypes ignored", qt, len(qtypes), p, len(lines))
            qtypes = None
    m = _HOPS.search(p.parent.name) or _HOPS.search(p.name) or _HOPS.search(p.parent.parent.name)
    hops = int(m.group(1)) if m else default_hops
    report = LoadReport(items=[])
    seen: set[str] = set()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{p.name}:{lineno}"
        cols = line.rstrip("\r\n").split("\t")
        if len(cols) < 2:
            report.skipped.append((where, "no TAB between question and answers"))
            continue
        marked = cols[0].strip()
        answers = M.split_gold_answers(cols[1])
        if not marked:
            report.skipped.append((where, "empty question"))
            continue
        if not answers:
            report.skipped.append((where, "no answers"))
            continue
        topic = _TOPIC.search(marked)
        if topic is None:
            report.skipped.append((where, "no [topic entity] in the question"))
            continue
        qtype = cols[2].strip() if len(cols) > 2 else (qtypes[lineno - 1].strip() if qtypes else "")
        plain = " ".join(_TOPIC.sub(lambda mm: mm.group(1), marked).split())
        key = f"{hops}hop-{p.stem}-{lineno}"
        if key in seen:  # cannot happen with line numbers, kept for safety
            continue
        seen.add(key)
        report.items.append(
            EvalItem(
                id=key,
                question=plain,
                answers=answers,
                task="kgqa",
                topic=" ".join(topic.group(1).split()),
                meta={
                    "source": str(p),
                    "line": lineno,
                    "question_marked": marked,
                    "topic_entity": topic.group(1),
                    "hops": hops,
                    "qtype": qtype,
                },
            )
        )
    return report


def load_metaqa_kb(path: str | Path, skipped: list[tuple[str, str]] | None = None) -> list[dict[str, str]]:
    """MetaQA ``kb.txt`` (``subject|relation|object``) as one corpus record per subject: ``{id: subject,
    title: subject, text: "subject relation object" lines}`` (relation underscores become spaces), so the
    text pipeline can index the KB."""
    p = Path(path)
    facts: dict[str, list[str]] = {}
    for lineno, line in enumerate(_read_text(p).splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) != 3 or not all(x.strip() for x in parts):
            _note(skipped, f"{p.name}:{lineno}", "not subject|relation|object")
            continue
        s, r, o = (x.strip() for x in parts)
        facts.setdefault(s, []).append(f"{s} {r.replace('_', ' ')} {o}")
    return [{"id": s, "title": s, "text": "\n".join(lines)} for s, lines in facts.items()]


# --------------------------------------------------------------------------------------------------------------
# generic JSONL
# --------------------------------------------------------------------------------------------------------------


def _loads_row(line: str) -> tuple[Any, str | None]:
    """One JSON row, or the reason it is skipped (not JSON, or text that is not valid Unicode)."""
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as exc:
        return None, f"invalid JSON: {exc.msg}"
    except (ValueError, RecursionError) as exc:  # over-long integer literals, absurd nesting
        return None, f"invalid JSON: {type(exc).__name__}"
    bad = surrogate_reason(rec)
    return (None, bad) if bad else (rec, None)


def _jsonl(path: Path) -> Iterable[tuple[int, Any, str | None]]:
    for lineno, line in enumerate(_read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        rec, err = _loads_row(line)
        yield lineno, rec, err


def load_corpus_jsonl(path: str | Path, skipped: list[tuple[str, str]] | None = None) -> list[dict[str, str]]:
    """Generic corpus JSONL ``{id, title?, text}`` -> ``[{id, title, text}]``; bad or duplicate-id lines skipped."""
    p = Path(path)
    out: list[dict[str, str]] = []
    ids: set[str] = set()
    for lineno, rec, err in _jsonl(p):
        where = f"{p.name}:{lineno}"
        if err or not isinstance(rec, Mapping):
            _note(skipped, where, err or "not a JSON object")
            continue
        rid, text = rec.get("id"), _nonblank_str(rec.get("text"))
        if rid is None or str(rid).strip() == "" or text is None:
            _note(skipped, where, "missing 'id' or empty 'text'")
            continue
        rid = str(rid).strip()
        if rid in ids:
            _note(skipped, where, f"duplicate id {rid!r}")
            continue
        ids.add(rid)
        out.append({"id": rid, "title": str(rec.get("title") or ""), "text": text})
    return out


def load_generic(corpus_jsonl: str | Path | None, questions_jsonl: str | Path) -> LoadReport:
    """Generic questions JSONL ``{id, question, answers (list or string), gold_passages?, choices?}``.

    A question needs answers or gold passages. With a corpus, gold passages must be corpus ids (else skipped).
    """
    report = LoadReport(items=[])
    corpus_ids = None
    if corpus_jsonl is not None:
        corpus_ids = {c["id"] for c in load_corpus_jsonl(corpus_jsonl, report.skipped)}
    qp = Path(questions_jsonl)
    seen: set[str] = set()
    for lineno, rec, err in _jsonl(qp):
        where = f"{qp.name}:{lineno}"
        if err or not isinstance(rec, Mapping):
            report.skipped.append((where, err or "not a JSON object"))
            continue
        qid = rec.get("id")
        question = _nonblank_str(rec.get("question"))
        if qid is None or str(qid).strip() == "" or question is None:
            report.skipped.append((where, "missing 'id' or empty 'question'"))
            continue
        qid = str(qid).strip()
        if qid in seen:
            report.skipped.append((where, f"duplicate id {qid!r}"))
            continue
        raw = rec.get("answers", rec.get("answer", []))
        raw = [raw] if isinstance(raw, str) else raw
        gp = rec.get("gold_passages", []) or []
        if not isinstance(raw, list) or not isinstance(gp, list):
            report.skipped.append((where, "'answers' and 'gold_passages' must be lists"))
            continue
        answers = tuple(str(a).strip() for a in raw if str(a).strip())
        gold = tuple(dict.fromkeys(str(g).strip() for g in gp if str(g).strip()))
        if not answers and not gold:
            report.skipped.append((where, "no answers and no gold_passages"))
            continue
        if corpus_ids is not None and (missing := [g for g in gold if g not in corpus_ids]):
            report.skipped.append((where, f"gold passage(s) not in the corpus: {missing}"))
            continue
        choices: tuple[tuple[str, str], ...] = ()
        if isinstance(rec.get("choices"), Mapping):
            choices = tuple((str(k), str(v)) for k, v in rec["choices"].items())
        seen.add(qid)
        extra = {
            k: v for k, v in rec.items() if k not in {"id", "question", "answers", "answer", "gold_passages", "choices"}
        }
        report.items.append(
            EvalItem(
                id=qid,
                question=question,
                answers=answers,
                gold_passages=gold,
                choices=choices,
                task="generic",
                topic=_nonblank_str(rec.get("topic")) or "",
                meta={"source": str(qp), "line": lineno, **extra},
            )
        )
    return report


def write_corpus_jsonl(records: Iterable[Mapping[str, str]], path: str | Path) -> int:
    """Write ``{id, title, text}`` records as JSONL for indexing (the ingest reads ``id`` into ``source_id``)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with p.open("w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps({"id": r["id"], "title": r.get("title", ""), "text": r["text"]}, ensure_ascii=False))
            f.write("\n")
            n += 1
    return n


# --------------------------------------------------------------------------------------------------------------
# predictions and scoring
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Prediction:
    answer_text: str
    retrieved_passage_ids: tuple[str, ...] = ()  # source ids of the retrieved documents, best first
    answers: tuple[str, ...] = ()  # ranked candidate answers (KGQA), when the system gives a list
    error: str = ""


DEFAULT_KS = (2, 5)


def score_item(spec: "BenchmarkSpec | str", item: EvalItem, prediction: Prediction) -> dict[str, float]:
    """Per-question scores, keyed by the spec's metric names (retrieval metrics only when the item has gold
    passages). An errored prediction is scored like an empty answer: 0, never skipped."""
    spec = get_benchmark(spec) if isinstance(spec, str) else spec
    text = prediction.answer_text or ""
    task = item.task
    out: dict[str, float] = {}
    if task == "qa1":
        valid = "".join(c[0] for c in item.choices) or "ABCD"
        choice = M.extract_choice(text, valid) or M.match_option_text(text, item.choices)
        out["accuracy"] = float(choice == item.answers[0])
        out["accuracy_lenient"] = float(M.choice_correct_lenient(text, item.answers[0]))
        out["parsed"] = float(choice is not None)
    elif task == "qa2":
        valid = "".join(c[0] for c in item.choices) or "ABCD"
        got = M.extract_choice_set(text, valid)
        out["f1"] = M.set_f1(got, item.answers)
        out["exact_match"] = float(got == frozenset(item.answers))
        out["parsed"] = float(got is not None)
    elif task in ("qa3", "qa4"):
        out["rouge_l"] = M.rouge_l(M.extract_answer_text(text), item.answers)
    elif task == "kgqa":
        top = prediction.answers[0] if prediction.answers else M.top_answer(text)
        out["hits@1"] = M.hits_at_1(top, item.answers)
        out["hit"] = M.answer_hit(text or " | ".join(prediction.answers), item.answers)
    else:  # multihop, generic
        answer = M.extract_answer_text(text)
        out["em"] = M.exact_match(answer, item.answers) if item.answers else 0.0
        out["f1"] = M.token_f1(answer, item.answers) if item.answers else 0.0
        if task == "generic":
            out["rouge_l"] = M.rouge_l(answer, item.answers) if item.answers else 0.0
    if item.gold_passages:
        for k in spec.ks:
            out[f"recall@{k}"] = M.recall_at_k(prediction.retrieved_passage_ids, item.gold_passages, k)
            out[f"perfect@{k}"] = M.perfect_retrieval_at_k(prediction.retrieved_passage_ids, item.gold_passages, k)
    return out


# --------------------------------------------------------------------------------------------------------------
# registry
# --------------------------------------------------------------------------------------------------------------

_REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA_ROOT = Path("../shared/data")


def default_data_root() -> Path:
    """``../shared/data`` relative to the working directory, else relative to the repository root."""
    if DEFAULT_DATA_ROOT.is_dir():
        return DEFAULT_DATA_ROOT
    return (_REPO_ROOT / DEFAULT_DATA_ROOT).resolve()


@dataclass(frozen=True)
class BenchmarkSpec:
    name: str
    task: str
    description: str
    metrics: tuple[str, ...]  # per-question score keys, as score_item returns them
    primary_metric: str
    questions_path: str | None  # relative to the data root; None: must be given
    corpus_path: str | None
    loader: Callable[..., LoadReport] = field(repr=False)  # (questions: Path, corpus: Path | None, **options)
    corpus_loader: Callable[..., list[dict[str, str]]] | None = field(default=None, repr=False)
    options: Mapping[str, Any] = field(default_factory=dict, compare=False)  # default loader options
    ks: tuple[int, ...] = DEFAULT_KS
    lenient_metrics: tuple[str, ...] = ()  # reported only for comparison with the reference, labelled lenient

    def paths(
        self,
        data_root: str | Path | None = None,
        *,
        questions: str | Path | None = None,
        corpus: str | Path | None = None,
    ) -> tuple[Path | None, Path | None]:
        root = Path(data_root) if data_root is not None else default_data_root()
        q = Path(questions) if questions is not None else (root / self.questions_path if self.questions_path else None)
        c = Path(corpus) if corpus is not None else (root / self.corpus_path if self.corpus_path else None)
        return q, c

    def load(
        self,
        data_root: str | Path | None = None,
        *,
        questions: str | Path | None = None,
        corpus: str | Path | None = None,
        **options: Any,
    ) -> LoadReport:
        q, c = self.paths(data_root, questions=questions, corpus=corpus)
        if q is None:
            raise DatasetError(f"benchmark {self.name!r} has no default questions file; pass questions=")
        return self.loader(q, c, **{**self.options, **options})

    def load_corpus(
        self,
        data_root: str | Path | None = None,
        *,
        corpus: str | Path | None = None,
        skipped: list[tuple[str, str]] | None = None,
    ) -> list[dict[str, str]]:
        _, c = self.paths(data_root, corpus=corpus)
        if c is None or self.corpus_loader is None:
            raise DatasetError(f"benchmark {self.name!r} has no default corpus; pass corpus=")
        return self.corpus_loader(c, skipped)

    def score(self, item: EvalItem, prediction: Prediction) -> dict[str, float]:
        return score_item(self, item, prediction)


def _seedbench_loader(subset: str) -> Callable[..., LoadReport]:
    def load(questions: Path, corpus: Path | None, rice_only: bool = False) -> LoadReport:
        return load_seedbench(questions, subsets=(subset,), rice_only=rice_only)

    return load


def _hotpot_loader(questions: Path, corpus: Path | None) -> LoadReport:
    return load_hotpotqa(questions, corpus)


def _metaqa_loader(hops: int) -> Callable[..., LoadReport]:
    def load(questions: Path, corpus: Path | None) -> LoadReport:
        return load_metaqa(questions, default_hops=hops)

    return load


def _generic_loader(questions: Path, corpus: Path | None) -> LoadReport:
    return load_generic(corpus, questions)


def _retrieval_metrics(ks: tuple[int, ...]) -> tuple[str, ...]:
    return tuple(f"{m}@{k}" for k in ks for m in ("recall", "perfect"))


def _build_registry() -> dict[str, BenchmarkSpec]:
    specs = []
    seed_desc = {
        "1-1": "QA-1 single choice (accuracy; strict letter extraction, lenient substring for comparison)",
        "1-2": "QA-2 multiple answer (mean per-question set F1, set exact match)",
        "1-3": "QA-3 fill-in-the-blank (ROUGE-L, jieba tokens)",
        "1-4": "QA-4 generation (ROUGE-L, jieba tokens)",
    }
    seed_metrics = {
        "qa1": (("accuracy", "accuracy_lenient", "parsed"), "accuracy"),
        "qa2": (("f1", "exact_match", "parsed"), "f1"),
        "qa3": (("rouge_l",), "rouge_l"),
        "qa4": (("rouge_l",), "rouge_l"),
    }
    for subset, task in SEEDBENCH_SUBSETS.items():
        metrics, primary = seed_metrics[task]
        # "-rice": only the rice items (split.level2 "Oryza sativa"), as the paper evaluated.
        for suffix, rice_only in (("", False), ("-rice", True)):
            specs.append(
                BenchmarkSpec(
                    name=f"seedbench-{task}{suffix}",
                    task=task,
                    description=f"SeedBench zero-shot {seed_desc[subset]}{', rice items only' if rice_only else ''}",
                    metrics=metrics,
                    primary_metric=primary,
                    questions_path=f"seedbench/zero-shot/{subset}.json",
                    corpus_path="seedbench/279segments.jsonl",
                    loader=_seedbench_loader(subset),
                    corpus_loader=load_seedbench_segments,
                    options={"rice_only": rice_only},
                    lenient_metrics=("accuracy_lenient",) if task == "qa1" else (),
                )
            )
    specs.append(
        BenchmarkSpec(
            name="hotpotqa",
            task="multihop",
            description="HotpotQA 100-question train subset with its 994-passage corpus (HippoRAG copy): "
            "SQuAD EM/F1, supporting-passage recall@k and perfect retrieval@k",
            metrics=("em", "f1") + _retrieval_metrics(DEFAULT_KS),
            primary_metric="f1",
            questions_path="hipporag-multihop/hotpotqa_train.json",
            corpus_path="hipporag-multihop/hotpotqa_train_corpus.json",
            loader=_hotpot_loader,
            corpus_loader=load_corpus_hotpotqa,
        )
    )
    for h in (1, 2, 3):
        specs.append(
            BenchmarkSpec(
                name=f"metaqa-{h}hop",
                task="kgqa",
                description=f"MetaQA {h}-hop: 200 dev questions answerable in the rebuilt KB (Hits@1, answer hit)",
                metrics=("hits@1", "hit"),
                primary_metric="hits@1",
                questions_path=f"metaqa/{h}-hop/fixture_dev_200_reachable.tsv",
                corpus_path="metaqa/kb.txt",
                loader=_metaqa_loader(h),
                corpus_loader=load_metaqa_kb,
            )
        )
    specs.append(
        BenchmarkSpec(
            name="generic",
            task="generic",
            description="Your own corpus JSONL {id,title,text} and questions JSONL {id,question,answers,gold_passages?}"
            ": EM/F1/ROUGE-L, plus recall@k when gold passages are given",
            metrics=("em", "f1", "rouge_l") + _retrieval_metrics(DEFAULT_KS),
            primary_metric="f1",
            questions_path=None,
            corpus_path=None,
            loader=_generic_loader,
            corpus_loader=load_corpus_jsonl,
        )
    )
    return {s.name: s for s in specs}


BENCHMARKS: dict[str, BenchmarkSpec] = _build_registry()


def get_benchmark(name: str) -> BenchmarkSpec:
    """The spec of a benchmark; an unknown name raises ValueError listing the valid ones."""
    try:
        return BENCHMARKS[name]
    except KeyError:
        raise ValueError(f"unknown benchmark {name!r}; valid: {', '.join(sorted(BENCHMARKS))}") from None
