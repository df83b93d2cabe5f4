"""HotpotQA as HippoRAG ships it: the distractor format and the toy sets, with their corpora."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hxd2_ray.evaluation.datasets.items import (
    DatasetError,
    EvalItem,
    LoadReport,
    nonblank_str,
    note_skipped,
    read_json_file,
)
from hxd2_ray.text_validation import surrogate_reason

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
    data = read_json_file(p)
    out: list[dict[str, str]] = []
    if isinstance(data, Mapping):
        for n, (title, body) in enumerate(data.items()):
            if bad := surrogate_reason([title, body]):
                note_skipped(skipped, f"{p.name}#{n}", bad)
                continue
            if isinstance(body, list) and all(isinstance(s, str) for s in body):
                text = "".join(body).strip()
            elif isinstance(body, str):
                text = body.strip()
            else:
                note_skipped(skipped, f"{p.name}#{title}", "passage is neither a list of sentences nor a string")
                continue
            if not text:
                note_skipped(skipped, f"{p.name}#{title}", "empty passage")
                continue
            out.append({"id": str(title), "title": str(title), "text": text})
        return out
    if not isinstance(data, list):
        raise DatasetError(f"{p}: expected a JSON object or array, got {type(data).__name__}")
    rows = []
    for n, rec in enumerate(data):
        if bad := surrogate_reason(rec):
            note_skipped(skipped, f"{p.name}#{n}", bad)
            continue
        rec_title = nonblank_str(rec.get("title")) if isinstance(rec, Mapping) else None
        rec_text = nonblank_str(rec.get("text")) if isinstance(rec, Mapping) else None
        if rec_title is None or rec_text is None:
            note_skipped(skipped, f"{p.name}#{n}", "missing or empty 'title' or 'text'")
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
    data = read_json_file(qp)
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
    question = nonblank_str(row.get("question"))
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
