"""Properties of the evaluation loaders (``hxd2_ray/evaluation/datasets.py``): benchmark and --questions files
are untrusted. A loader returns items plus skipped rows with reasons, or raises ``DatasetError`` for a file
unusable as a whole; never anything else, and every item's text is valid Unicode (it is written to Arrow and
JSON and sent to the models)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from hxd2_ray.evaluation import datasets as D
from tests.property.strategies import any_text, is_valid_unicode, json_values, small_json


def _write(name: str, data: bytes) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="hxd2-prop-"))
    (folder / name).write_bytes(data)
    return folder / name


def _valid(value) -> bool:
    return is_valid_unicode(json.dumps(value, ensure_ascii=False, default=str))


def _check_report(load):
    try:
        report = load()
    except D.DatasetError as exc:
        assert str(exc)
        return None
    for item in report.items:
        assert item.id and item.question.strip()
        assert _valid(item.to_dict()), item
    for where, why in report.skipped:
        assert where and why
        assert _valid([where, why])
    return report


generic_rows = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"id": st.one_of(any_text(8), small_json), "question": st.one_of(any_text(40), small_json)},
        optional={
            "answers": st.one_of(st.lists(any_text(10), max_size=3), small_json),
            "gold_passages": st.one_of(st.lists(any_text(8), max_size=2), small_json),
            "choices": small_json,
        },
    ),
)


@given(st.lists(generic_rows, max_size=6))
def test_generic_questions(rows):
    path = _write("q.jsonl", "\n".join(json.dumps(r) for r in rows).encode())
    _check_report(lambda: D.load_generic(None, path))


@given(st.binary(max_size=400))
def test_generic_questions_any_bytes(data):
    path = _write("q.jsonl", data)
    _check_report(lambda: D.load_generic(None, path))


@given(
    st.lists(
        st.one_of(
            json_values,
            st.fixed_dictionaries(
                {"id": any_text(6), "text": st.one_of(any_text(30), small_json)}, optional={"title": small_json}
            ),
        ),
        max_size=6,
    )
)
def test_generic_corpus(rows):
    path = _write("c.jsonl", "\n".join(json.dumps(r) for r in rows).encode())
    skipped: list = []
    try:
        records = D.load_corpus_jsonl(path, skipped)
    except D.DatasetError:
        return
    assert all(_valid(r) and r["text"].strip() for r in records)
    assert all(_valid(s) for s in skipped)


seed_rows = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"question": st.one_of(any_text(60), small_json), "answer": st.one_of(any_text(3), small_json)},
        optional={"task_type": small_json, "rice": small_json},
    ),
)


@given(st.one_of(st.lists(seed_rows, max_size=5), json_values))
def test_seedbench_file(rows):
    path = _write("1-1.json", json.dumps(rows).encode())
    _check_report(lambda: D.load_seedbench(path))


hotpot_rows = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {
            "_id": any_text(6),
            "question": st.one_of(any_text(40), small_json),
            "answer": st.one_of(any_text(8), small_json),
        },
        optional={"supporting_facts": small_json, "context": small_json},
    ),
)


@given(
    st.one_of(st.lists(hotpot_rows, max_size=5), json_values),
    st.one_of(
        st.dictionaries(any_text(10), st.one_of(st.lists(any_text(20), max_size=3), small_json), max_size=4),
        st.lists(json_values, max_size=4),
    ),
)
def test_hotpotqa_files(questions, corpus):
    qpath = _write("hotpotqa.json", json.dumps(questions).encode())
    cpath = _write("hotpotqa_corpus.json", json.dumps(corpus).encode())
    _check_report(lambda: D.load_hotpotqa(qpath, cpath))


@given(st.lists(st.tuples(any_text(30), any_text(15), any_text(8)), max_size=6), st.sampled_from(["\t", " ", "|"]))
def test_metaqa_tsv(rows, sep):
    text = "\n".join(sep.join(r) for r in rows)
    path = _write("qa_dev.txt", text.encode("utf-8", "replace"))
    _check_report(lambda: D.load_metaqa(path))
