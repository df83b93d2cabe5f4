"""Generic JSONL benchmarks: a corpus ``{id, title, text}`` and questions ``{id, question, answers}``."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from hxd2_ray.evaluation.datasets.items import (
    EvalItem,
    LoadReport,
    jsonl_rows,
    nonblank_str,
    note_skipped,
)

# --------------------------------------------------------------------------------------------------------------
# generic JSONL
# --------------------------------------------------------------------------------------------------------------


def load_corpus_jsonl(path: str | Path, skipped: list[tuple[str, str]] | None = None) -> list[dict[str, str]]:
    """Generic corpus JSONL ``{id, title?, text}`` -> ``[{id, title, text}]``; bad or duplicate-id lines skipped."""
    p = Path(path)
    out: list[dict[str, str]] = []
    ids: set[str] = set()
    for lineno, rec, err in jsonl_rows(p):
        where = f"{p.name}:{lineno}"
        if err or not isinstance(rec, Mapping):
            note_skipped(skipped, where, err or "not a JSON object")
            continue
        rid, text = rec.get("id"), nonblank_str(rec.get("text"))
        if rid is None or str(rid).strip() == "" or text is None:
            note_skipped(skipped, where, "missing 'id' or empty 'text'")
            continue
        rid = str(rid).strip()
        if rid in ids:
            note_skipped(skipped, where, f"duplicate id {rid!r}")
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
    for lineno, rec, err in jsonl_rows(qp):
        where = f"{qp.name}:{lineno}"
        if err or not isinstance(rec, Mapping):
            report.skipped.append((where, err or "not a JSON object"))
            continue
        qid = rec.get("id")
        question = nonblank_str(rec.get("question"))
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
                topic=nonblank_str(rec.get("topic")) or "",
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
