"""Benchmark loaders: the bundled fixtures, tiny malformed files, the registry, and the real shared data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hxd2_ray.evaluation.datasets import (
    BENCHMARKS,
    DatasetError,
    EvalItem,
    Prediction,
    get_benchmark,
    is_rice,
    load_corpus_hotpotqa,
    load_corpus_jsonl,
    load_generic,
    load_hotpotqa,
    load_metaqa,
    load_metaqa_kb,
    load_seedbench,
    load_seedbench_segments,
    parse_choices,
    question_stem,
    score_item,
    write_corpus_jsonl,
)

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "eval"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"shared benchmark data not present at {SHARED}")

SEED_INSTR = "这是一道关于农业的单选题……\n问题："


def _seed_row(question: str, answer: str, level2: str = "Oryza sativa", task_type: str = "key_single_choice"):
    return {
        "instruction": SEED_INSTR,
        "question": question,
        "answer": answer,
        "split": {"level1": "基因基本信息查询", "level2": level2},
        "task_type": task_type,
    }


# ---------------------------------------------------------------------------------------------- options


def test_question_stem_and_choices():
    q = "How many FIE homologs are there in the rice genome?\nA. Four\nB. One\nC. Three\nD. Two"
    assert question_stem(q) == "How many FIE homologs are there in the rice genome?"
    assert parse_choices(q) == (("A", "Four"), ("B", "One"), ("C", "Three"), ("D", "Two"))
    zh = "水稻OsSIZ2基因在水稻的哪个染色体上？\nA、3号染色体\nB、2号染色体\nC．4号染色体\nD：1号染色体"
    assert question_stem(zh) == "水稻OsSIZ2基因在水稻的哪个染色体上？"
    assert [c[0] for c in parse_choices(zh)] == ["A", "B", "C", "D"]
    inline = "Which is a cereal? A. rice B. soybean C. pea D. bean"
    assert question_stem(inline) == "Which is a cereal?"
    assert parse_choices(inline)[1] == ("B", "soybean")
    # a stem that merely starts with "A." and has no option block is left alone
    assert question_stem("A. thaliana flowers early. Why?") == "A. thaliana flowers early. Why?"
    assert parse_choices("No options here") == ()


# ---------------------------------------------------------------------------------------------- SeedBench


def test_seedbench_fixture():
    rep = load_seedbench(FIXTURES / "seedbench", subsets=("1-1",))
    assert len(rep) == 5 and rep.skipped == []
    first = rep.items[0]
    assert first.id == "1-1-0000" and first.task == "qa1" and first.answers == ("B",)
    assert [c[0] for c in first.choices] == ["A", "B", "C", "D"]
    assert first.retrieval_query.startswith("The field test") and "\nA." not in first.retrieval_query
    assert first.generation_prompt == first.instruction + "\n" + first.question  # as the reference runner
    assert first.instruction.endswith("问题：")
    rice = load_seedbench(FIXTURES / "seedbench" / "zero-shot" / "1-1.json", rice_only=True)
    assert len(rice) == 3 and rice.filtered == {"not rice": 2}
    assert {i.meta["level2"] for i in rice} == {"Oryza sativa"}


def test_is_rice_rule():
    assert is_rice({"split": {"level2": "Oryza sativa"}})
    assert is_rice({"split": {"level2": "Oryza_sativa"}}) and is_rice({"split": {"level2": "oryza sativa\xa0L."}})
    assert not is_rice({"split": {"level2": "Zea mays\xa0L."}})
    assert not is_rice({"split": {"level1": "基因基本信息查询"}})  # level1 is the subcategory, not the crop
    assert not is_rice({})


def test_seedbench_malformed_rows_are_counted(tmp_path):
    rows = [
        _seed_row("Q1?\nA. a\nB. b\nC. c\nD. d", "B"),
        "not an object",
        _seed_row("", "A"),  # empty question
        _seed_row("Q?\nA. a\nB. b\nC. c\nD. d", ""),  # empty answer
        _seed_row("Q?\nA. a\nB. b\nC. c\nD. d", "E"),  # not an option
        _seed_row("Q without options", "A"),
        _seed_row("Q?\nA. a\nB. b\nC. c\nD. d", "A", task_type="key_blank_fill"),  # wrong file
        _seed_row("Q5?\nA. a\nB. b\nC. c\nD. d", "ｃ", level2="Glycine max"),  # full-width lower-case letter: ok
    ]
    (tmp_path / "1-1.json").write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    rep = load_seedbench(tmp_path, subsets=("1-1",))
    assert [i.id for i in rep] == ["1-1-0000", "1-1-0007"]
    assert rep.items[1].answers == ("C",)
    assert [w for w, _ in rep.skipped] == [f"1-1.json#{i}" for i in (1, 2, 3, 4, 5, 6)]
    assert "not an object" in rep.skipped[0][1] and "task_type" in rep.skipped[5][1]
    assert len(load_seedbench(tmp_path, subsets=("1-1",), rice_only=True)) == 1


def test_seedbench_qa2_qa3_rows(tmp_path):
    zs = tmp_path / "zero-shot"
    zs.mkdir()
    q = "Which apply?\nA. a\nB. b\nC. c\nD. d"
    (zs / "1-2.json").write_text(
        json.dumps(
            [
                _seed_row(q, "D, A", task_type="key_multiple_choice"),
                _seed_row(q, "A, maybe", task_type="key_multiple_choice"),
            ]
        ),
        encoding="utf-8",
    )
    (zs / "1-3.json").write_text(
        json.dumps(
            [
                _seed_row(
                    "Changnong 39 优于________和________。", "Jiyu 441，Changnong 35", task_type="key_blank_fill"
                ),
            ],
            ensure_ascii=False,
        ),
        encoding="utf-8",
    )
    rep = load_seedbench(tmp_path, subsets=("1-2", "1-3"))
    assert [(i.task, i.answers) for i in rep] == [("qa2", ("A", "D")), ("qa3", ("Jiyu 441，Changnong 35",))]
    assert rep.items[1].choices == () and rep.items[1].meta["language"] == "zh"
    assert rep.skipped == [("1-2.json#1", "answer 'A, maybe' is not a list of option letters")]


def test_seedbench_bad_files(tmp_path):
    with pytest.raises(DatasetError, match="neither"):
        load_seedbench(tmp_path, subsets=("1-1",))
    (tmp_path / "1-1.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(DatasetError, match="not valid JSON"):
        load_seedbench(tmp_path, subsets=("1-1",))
    (tmp_path / "1-1.json").write_text("{}", encoding="utf-8")
    with pytest.raises(DatasetError, match="array"):
        load_seedbench(tmp_path, subsets=("1-1",))
    with pytest.raises(ValueError, match="valid"):
        load_seedbench(tmp_path, subsets=("2-1",))


# ---------------------------------------------------------------------------------------------- HotpotQA


def test_hotpotqa_fixture():
    corpus = load_corpus_hotpotqa(FIXTURES / "hotpotqa" / "corpus.json")
    assert len(corpus) == 10 and all(c["id"] == c["title"] for c in corpus)
    alu = next(c for c in corpus if c["id"] == "Alû")
    assert not alu["text"].startswith(" ") and "  " not in alu["text"][:200]
    rep = load_hotpotqa(FIXTURES / "hotpotqa" / "questions.json", FIXTURES / "hotpotqa" / "corpus.json")
    assert len(rep) == 5 and rep.skipped == []
    q = rep.items[0]
    assert q.id == "5a77ec115542992a6e59dff7" and q.answers == ("a spirit",)
    assert q.gold_passages == ("Alû", "Lilu (mythology)")  # supporting-fact titles = corpus ids
    assert {i.task for i in rep} == {"multihop"}


def test_hotpotqa_malformed_and_missing_passages(tmp_path):
    rows = [
        {"_id": "ok", "question": "Q?", "answer": "x", "supporting_facts": [["T1", 0], ["T2", 1], ["T1", 2]]},
        {"_id": "nogold", "question": "Q?", "answer": "x", "supporting_facts": [["Missing", 0]]},
        {"_id": "noans", "question": "Q?", "answer": "", "supporting_facts": [["T1", 0]]},
        {"_id": "ok", "question": "dup?", "answer": "y", "supporting_facts": [["T2", 0]]},
        {"_id": "badfact", "question": "Q?", "answer": "x", "supporting_facts": [[3, 0]]},
        [1, 2],
    ]
    (tmp_path / "q.json").write_text(json.dumps(rows), encoding="utf-8")
    (tmp_path / "c.json").write_text(
        json.dumps({"T1": ["One.", " Two."], "T2": "Text two", "Bad": 5}), encoding="utf-8"
    )
    rep = load_hotpotqa(tmp_path / "q.json", tmp_path / "c.json")
    assert [i.id for i in rep] == ["ok"] and rep.items[0].gold_passages == ("T1", "T2")
    reasons = dict(rep.skipped)
    assert "neither a list" in reasons["c.json#Bad"]
    assert "not in the corpus" in reasons["q.json#1"]
    assert "answer" in reasons["q.json#2"] and "duplicate" in reasons["q.json#3"]
    assert "supporting fact" in reasons["q.json#4"] and "not an object" in reasons["q.json#5"]
    # without a corpus the gold titles are kept as given
    assert len(load_hotpotqa(tmp_path / "q.json")) == 2


def test_hotpotqa_list_corpus_with_repeated_titles(tmp_path):
    corpus = [
        {"title": "T", "text": "first", "idx": 0},
        {"title": "T", "text": "second", "idx": 1},
        {"title": "U", "text": "third", "idx": 2},
    ]
    qs = [
        {
            "id": "q1",
            "question": "Q?",
            "answer": ["a", "b"],
            "paragraphs": [
                {"title": "T", "text": "second", "is_supporting": True, "idx": 1},
                {"title": "U", "text": "third", "is_supporting": False, "idx": 2},
            ],
        }
    ]
    (tmp_path / "c.json").write_text(json.dumps(corpus), encoding="utf-8")
    (tmp_path / "q.json").write_text(json.dumps(qs), encoding="utf-8")
    assert [c["id"] for c in load_corpus_hotpotqa(tmp_path / "c.json")] == ["T (0)", "T (1)", "U (2)"]
    rep = load_hotpotqa(tmp_path / "q.json", tmp_path / "c.json")
    assert rep.items[0].gold_passages == ("T (1)",) and rep.items[0].answers == ("a", "b")


# ---------------------------------------------------------------------------------------------- MetaQA


def test_metaqa_fixture():
    rep = load_metaqa(FIXTURES / "metaqa" / "1-hop" / "questions.tsv")
    assert len(rep) == 5 and rep.skipped == []
    first = rep.items[0]
    assert first.question == "what type of film is What Goes Up"
    assert first.meta["question_marked"] == "what type of film is [What Goes Up]"
    assert first.meta["topic_entity"] == "What Goes Up" and first.meta["hops"] == 1
    assert first.meta["qtype"] == "movie_to_genre" and first.task == "kgqa"
    assert rep.items[3].answers == ("Comedy", "Musical")
    assert first.id == "1hop-questions-1"
    kb = load_metaqa_kb(FIXTURES / "metaqa" / "kb.txt")
    pe = next(d for d in kb if d["id"] == "The Public Eye")
    assert "The Public Eye directed by Howard Franklin" in pe["text"].splitlines()


def test_metaqa_malformed_and_qtype_file(tmp_path):
    d = tmp_path / "2-hop"
    d.mkdir()
    (d / "qa_dev.txt").write_text(
        "what films did [X] write\tA|B\n"
        "no tab here\n"
        "\n"
        "who is in [Y]\t\n"
        "who directed Z\tW\n"
        "what genre is [V]\t | Drama\n",
        encoding="utf-8",
    )
    (d / "qa_dev_qtype.txt").write_text("writer_to_movie\nx\n\ny\nz\nmovie_to_genre\n", encoding="utf-8")
    rep = load_metaqa(d / "qa_dev.txt")
    assert [(i.id, i.answers, i.meta["qtype"], i.meta["hops"]) for i in rep] == [
        ("2hop-qa_dev-1", ("A", "B"), "writer_to_movie", 2),
        ("2hop-qa_dev-6", ("Drama",), "movie_to_genre", 2),
    ]
    assert rep.skipped == [
        ("qa_dev.txt:2", "no TAB between question and answers"),
        ("qa_dev.txt:4", "no answers"),
        ("qa_dev.txt:5", "no [topic entity] in the question"),
    ]


# ---------------------------------------------------------------------------------------------- generic


def test_generic_loader(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    n = write_corpus_jsonl([{"id": "d1", "title": "One", "text": "alpha"}, {"id": "d2", "text": "beta"}], corpus)
    assert n == 2
    with corpus.open("a", encoding="utf-8") as f:
        f.write("{broken\n" + json.dumps({"id": "d1", "text": "dup"}) + "\n")
    qs = tmp_path / "q.jsonl"
    qs.write_text(
        "\n".join(
            [
                json.dumps({"id": "q1", "question": "What?", "answers": ["alpha"], "gold_passages": ["d1"]}),
                json.dumps({"id": 2, "question": "Who?", "answer": "beta", "topic": "t"}),
                json.dumps({"id": "q3", "question": "Where?", "answers": []}),
                json.dumps({"id": "q4", "question": "When?", "answers": ["x"], "gold_passages": ["nope"]}),
                "[1]",
                json.dumps({"id": "q1", "question": "again", "answers": ["x"]}),
                json.dumps({"question": "no id", "answers": ["x"]}),
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    rep = load_generic(corpus, qs)
    assert [(i.id, i.answers, i.gold_passages) for i in rep] == [("q1", ("alpha",), ("d1",)), ("2", ("beta",), ())]
    assert rep.items[1].meta["topic"] == "t" and rep.items[1].topic == "t"  # a field every entry point passes on
    where = [w for w, _ in rep.skipped]
    assert where == [
        "corpus.jsonl:3",
        "corpus.jsonl:4",
        "q.jsonl:3",
        "q.jsonl:4",
        "q.jsonl:5",
        "q.jsonl:6",
        "q.jsonl:7",
    ]
    assert [c["id"] for c in load_corpus_jsonl(corpus, [])] == ["d1", "d2"]


# ---------------------------------------------------------------------------------------------- registry / scoring


def test_registry_names_and_unknown():
    seedbench = {f"seedbench-qa{n}{rice}" for n in range(1, 5) for rice in ("", "-rice")}
    assert set(BENCHMARKS) == seedbench | {"hotpotqa", "metaqa-1hop", "metaqa-2hop", "metaqa-3hop", "generic"}
    with pytest.raises(ValueError) as exc:
        get_benchmark("seedbench")
    for name in BENCHMARKS:
        assert name in str(exc.value)
    spec = get_benchmark("seedbench-qa1")
    assert spec.primary_metric == "accuracy" and spec.lenient_metrics == ("accuracy_lenient",)
    with pytest.raises(DatasetError, match="questions"):
        get_benchmark("generic").load(FIXTURES)


def test_spec_load_with_explicit_paths():
    rep = get_benchmark("seedbench-qa1").load(
        questions=FIXTURES / "seedbench" / "zero-shot" / "1-1.json", rice_only=True
    )
    assert len(rep) == 3
    rice = get_benchmark("seedbench-qa1-rice").load(questions=FIXTURES / "seedbench" / "zero-shot" / "1-1.json")
    assert [i.id for i in rice] == [i.id for i in rep] and rice.filtered == {"not rice": 2}
    assert len(get_benchmark("seedbench-qa1").load(questions=FIXTURES / "seedbench" / "zero-shot" / "1-1.json")) == 5
    rep = get_benchmark("hotpotqa").load(
        questions=FIXTURES / "hotpotqa" / "questions.json", corpus=FIXTURES / "hotpotqa" / "corpus.json"
    )
    assert len(rep) == 5
    corpus = get_benchmark("hotpotqa").load_corpus(corpus=FIXTURES / "hotpotqa" / "corpus.json")
    assert len(corpus) == 10
    assert len(get_benchmark("metaqa-1hop").load(questions=FIXTURES / "metaqa" / "1-hop" / "questions.tsv")) == 5


def test_score_item_per_task():
    qa1 = EvalItem(
        "q", "Q?\nA. a\nB. b\nC. c\nD. d", ("B",), choices=(("A", "a"), ("B", "b"), ("C", "c"), ("D", "d")), task="qa1"
    )
    assert score_item("seedbench-qa1", qa1, Prediction("because the answer is B")) == {
        "accuracy": 1.0,
        "accuracy_lenient": 1.0,
        "parsed": 1.0,
    }
    assert score_item("seedbench-qa1", qa1, Prediction("Because I can't tell")) == {
        "accuracy": 0.0,
        "accuracy_lenient": 1.0,
        "parsed": 0.0,
    }
    # the option text alone (no letter) counts only when it equals one option exactly
    qa1t = EvalItem("q", "Q", ("B",), choices=(("A", "Decrease by 5%"), ("B", "Increase by 5%")), task="qa1")
    assert score_item("seedbench-qa1", qa1t, Prediction("正确答案：b"))["accuracy"] == 0.0  # lower-case letter
    assert score_item("seedbench-qa1", qa1t, Prediction("Increase by 5%."))["accuracy"] == 1.0
    assert score_item("seedbench-qa1", qa1t, Prediction("It may increase by 5%"))["accuracy"] == 0.0
    qa2 = EvalItem("q", "Q", ("A", "C"), choices=qa1.choices, task="qa2")
    assert score_item("seedbench-qa2", qa2, Prediction("正确答案：A")) == {
        "f1": pytest.approx(2 / 3),
        "exact_match": 0.0,
        "parsed": 1.0,
    }
    qa3 = EvalItem("q", "Q", ("水稻的产量显著增加了",), task="qa3")
    assert score_item("seedbench-qa3", qa3, Prediction("正确答案：水稻产量显著减少"))["rouge_l"] == pytest.approx(0.6)
    hop = EvalItem("h", "Q", ("Latin",), gold_passages=("T1", "T2"), task="multihop")
    s = score_item("hotpotqa", hop, Prediction("Answer: latin.", retrieved_passage_ids=("T1", "X", "T2")))
    assert s == {"em": 1.0, "f1": 1.0, "recall@2": 0.5, "perfect@2": 0.0, "recall@5": 1.0, "perfect@5": 1.0}
    kg = EvalItem("k", "Q", ("Comedy", "Musical"), task="kgqa")
    assert score_item("metaqa-1hop", kg, Prediction("Musical|Comedy")) == {"hits@1": 1.0, "hit": 1.0}
    assert score_item("metaqa-1hop", kg, Prediction("", answers=("Drama", "Comedy"))) == {"hits@1": 0.0, "hit": 1.0}
    assert score_item("metaqa-1hop", kg, Prediction("", error="timeout")) == {"hits@1": 0.0, "hit": 0.0}
    gen = EvalItem("g", "Q", ("alpha beta",), task="generic")
    assert score_item("generic", gen, Prediction("alpha")) == {
        "em": 0.0,
        "f1": pytest.approx(2 / 3),
        "rouge_l": pytest.approx(2 / 3),
    }


def test_items_are_frozen_and_hashable():
    item = EvalItem("q", "Q", ("A",), meta={"x": 1})
    with pytest.raises(AttributeError):
        item.id = "other"  # type: ignore[misc]
    assert len({item, EvalItem("q", "Q", ("A",), meta={"x": 2})}) == 1
    assert item.to_dict()["meta"] == {"x": 1}


# ---------------------------------------------------------------------------------------------- real shared files


@needs_shared
@pytest.mark.parametrize(
    ("name", "count", "rice"),
    [
        ("seedbench-qa1", 354, 200),
        ("seedbench-qa2", 291, 187),
        ("seedbench-qa3", 426, 223),
        ("seedbench-qa4", 403, 240),
    ],
)
def test_real_seedbench(name, count, rice):
    spec = get_benchmark(name)
    rep = spec.load(SHARED)
    assert len(rep) == count and rep.skipped == []
    assert len(spec.load(SHARED, rice_only=True)) == rice
    if spec.task in ("qa1", "qa2"):
        assert all(len(i.choices) == 4 and "\nA." not in i.retrieval_query for i in rep)
    if spec.task == "qa1":
        # the paper's 200-question QA-1 set is the first 200 rows, all rice
        assert [i.id for i in spec.load(SHARED, rice_only=True)] == [f"1-1-{n:04d}" for n in range(200)]
    segs = spec.load_corpus(SHARED)
    assert len(segs) == 279 and segs[0]["id"] == "seg-001"


@needs_shared
def test_real_seedbench_segments_direct():
    assert len(load_seedbench_segments(SHARED / "seedbench" / "279segments.jsonl", [])) == 279


@needs_shared
def test_real_hotpotqa():
    spec = get_benchmark("hotpotqa")
    rep = spec.load(SHARED)
    assert len(rep) == 100 and rep.skipped == []
    assert all(len(i.gold_passages) == 2 for i in rep)  # HotpotQA: two supporting paragraphs each
    corpus = spec.load_corpus(SHARED)
    ids = {c["id"] for c in corpus}
    assert len(corpus) == 994 == len(ids)
    assert all(set(i.gold_passages) <= ids for i in rep)


@needs_shared
def test_real_hipporag_toy_sets():
    d = SHARED / "hipporag-multihop"
    rep = load_hotpotqa(d / "case_study_university.json", d / "case_study_university_corpus.json")
    assert len(rep) == 1 and len(rep.items[0].gold_passages) == 4


@needs_shared
@pytest.mark.parametrize("hops", [1, 2, 3])
def test_real_metaqa(hops):
    rep = get_benchmark(f"metaqa-{hops}hop").load(SHARED)
    assert len(rep) == 200 and rep.skipped == []
    assert all(i.meta["hops"] == hops and i.meta["qtype"] and i.meta["topic_entity"] for i in rep)
    dev = load_metaqa(SHARED / "metaqa" / f"{hops}-hop" / "qa_dev.txt")
    assert len(dev) == {1: 9992, 2: 14872, 3: 14274}[hops] and dev.skipped == []
    assert dev.items[0].meta["qtype"]  # from the line-aligned qa_dev_qtype.txt


def test_eval_corpus_command_writes_index_input(tmp_path, capsys):
    from jobs import evaluate as eval_job

    out = tmp_path / "corpus" / "passages.jsonl"
    assert (
        eval_job.main(
            [
                "corpus",
                "--benchmark",
                "hotpotqa",
                "--corpus",
                str(FIXTURES / "hotpotqa" / "corpus.json"),
                "--output",
                str(out),
            ]
        )
        == 0
    )
    assert "wrote 10 passages" in capsys.readouterr().out
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    expected = get_benchmark("hotpotqa").load_corpus(corpus=FIXTURES / "hotpotqa" / "corpus.json")
    assert [(r["id"], r["title"], r["text"]) for r in rows] == [(c["id"], c["title"], c["text"]) for c in expected]
    assert eval_job.main(["corpus", "--benchmark", "nope", "--output", str(out)]) == 2
    assert "unknown benchmark 'nope'" in capsys.readouterr().err
