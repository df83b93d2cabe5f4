"""MetaQA: the 1/2/3-hop question files (topic entity in brackets) and the knowledge base."""

from __future__ import annotations

import re
from pathlib import Path

from hxd2_ray.evaluation import metrics as M
from hxd2_ray.evaluation.datasets.items import (
    EvalItem,
    LoadReport,
    log,
    note_skipped,
    read_text_file,
)

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
    lines = read_text_file(p).splitlines()
    qtypes: list[str] | None = None
    qt = Path(qtype_path) if qtype_path else p.with_name(p.stem + "_qtype" + p.suffix)
    if qt.is_file():
        qtypes = read_text_file(qt).splitlines()
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
    for lineno, line in enumerate(read_text_file(p).splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) != 3 or not all(x.strip() for x in parts):
            note_skipped(skipped, f"{p.name}:{lineno}", "not subject|relation|object")
            continue
        s, r, o = (x.strip() for x in parts)
        facts.setdefault(s, []).append(f"{s} {r.replace('_', ' ')} {o}")
    return [{"id": s, "title": s, "text": "\n".join(lines)} for s, lines in facts.items()]
