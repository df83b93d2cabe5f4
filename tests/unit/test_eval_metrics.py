"""Evaluation metrics on hand-computed cases."""

from __future__ import annotations

import pytest

from hxd2_ray.evaluation import metrics as M

# ---------------------------------------------------------------------------------------------- QA-1 choice


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("正确答案：C", "C"),
        ("正确答案：Ｃ", "C"),  # full-width letter
        ("正确答案: (C)", "C"),
        ("答案是C", "C"),
        ("答案为B项", "B"),
        ("选C", "C"),
        ("所以不选A，选C", "C"),
        ("选项A错误，选项C正确", "C"),
        ("Answer: C", "C"),
        ("**Answer:** D", "D"),
        ("the answer is (C)", "C"),
        ("because the answer is B", "B"),
        ("Option B is correct.", "B"),
        ("C is the correct answer", "C"),
        ("I choose D.", "D"),
        ("B", "B"),
        ("**B**", "B"),
        ("B. Increase by 45.1 to 67.6%", "B"),
        ("B\n\nExplanation: unlike option A, the gene ...", "B"),  # a bare first line beats prose letters
        ("Based on the context, yield increased, so B.", "B"),
        ("正确答案：B\n解析：A选项错误", "B"),
        ("A is correct", "A"),
        ("选项C对应的基因是OsX，所以答案是A", "A"),  # 选项C对应 is not a verdict
    ],
)
def test_extract_choice(output, expected):
    assert M.extract_choice(output) == expected


@pytest.mark.parametrize(
    "output",
    [
        "",
        "because",  # letters inside words never count
        "b",  # lower-case letters never count
        "A gene controls this trait.",  # the article A
        "I think it is C4 photosynthesis",  # C4 is not a letter
        "Because OsB2 is expressed",
        "A or C",  # two letters on the last line
        "正确答案：A, B",  # two letters for a single-choice question
        "The answer is B. Actually the answer is C.",  # explicit markers that disagree
        "A. x\nB. y\nC. z\nD. w",  # every option echoed
    ],
)
def test_extract_choice_ambiguous_or_missing(output):
    assert M.extract_choice(output) is None


def test_extract_choice_other_letter_sets():
    assert M.extract_choice("Answer: E", valid="ABCDE") == "E"
    assert M.extract_choice("Answer: E") is None
    with pytest.raises(ValueError):
        M.extract_choice("A", valid="abc")


def test_strict_vs_lenient_qa1():
    outputs = ["because the answer is B", "正确答案：C", "A or C", "I cannot tell", "b"]
    golds = ["B", "A", "C", "B", "B"]
    # strict: B==B yes; C!=A; None; None; None (lower-case b) -> 1/5
    assert M.qa1_accuracy_strict(outputs, golds) == pytest.approx(1 / 5)
    # lenient (reference rule, gt.lower() in output.lower()):
    # "because the answer is b" has b -> 1; "正确答案：c" has no a -> 0; "a or c" has c -> 1;
    # "i cannot tell" has no b -> 0; "b" -> 1  => 3/5
    assert M.qa1_accuracy_lenient(outputs, golds) == pytest.approx(3 / 5)
    # the lenient rule accepts any output with the letter in a word
    assert M.choice_correct_lenient("Because of drought", "B")
    assert not M.choice_correct_strict("Because of drought", "B")
    assert M.qa1_accuracy_strict([], []) == 0.0
    with pytest.raises(ValueError):
        M.qa1_accuracy_strict(["A"], [])


# ---------------------------------------------------------------------------------------------- QA-2 sets


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("正确答案：A, C", {"A", "C"}),
        ("正确答案：A，C", {"A", "C"}),
        ("答案：ACD", {"A", "C", "D"}),
        ("A和C", {"A", "C"}),
        ("Answers: A and C", {"A", "C"}),
        ("A. Increased grain size\nC. Longer and wider leaves", {"A", "C"}),
        ("B", {"B"}),
        ("no idea", None),
        ("Answer: A, B. Wait, answer: A", None),  # disagreeing explicit markers
    ],
)
def test_extract_choice_set(output, expected):
    got = M.extract_choice_set(output)
    assert got == (frozenset(expected) if expected is not None else None)


def test_parse_choice_set_gold_format():
    # QA-2 gold answers are unordered comma lists in 1-2.json
    assert M.parse_choice_set("A, D, B") == {"A", "B", "D"}
    assert M.parse_choice_set("C") == {"C"}


def test_set_f1_and_qa2_aggregates():
    # P={A,B}, G={A,C}: |P∩G|=1 -> 2*1/(2+2) = 0.5
    assert M.set_f1({"A", "B"}, {"A", "C"}) == pytest.approx(0.5)
    # P={A}, G={A,B,D}: 2*1/(1+3) = 0.5
    assert M.set_f1({"A"}, {"A", "B", "D"}) == pytest.approx(0.5)
    assert M.set_f1({"A", "C"}, {"C", "A"}) == 1.0
    assert M.set_f1(None, {"A"}) == 0.0
    assert M.set_f1(set(), set()) == 1.0
    outputs = ["正确答案：A, B", "正确答案：A, C", "nothing"]
    golds = ["A, C", "C, A", "B"]
    # per question: 0.5, 1.0, 0.0 -> mean 0.5; exact: 0,1,0 -> 1/3
    assert M.qa2_macro_f1(outputs, golds) == pytest.approx(0.5)
    assert M.qa2_exact_match(outputs, golds) == pytest.approx(1 / 3)


def test_label_macro_f1_hand_computed():
    preds = [{"A", "B"}, {"C"}, None]
    golds = [{"A"}, {"C", "D"}, {"B"}]
    # A: tp1 fp0 fn0 -> 1; B: tp0 fp1 fn1 -> 0; C: tp1 -> 1; D: fn1 -> 0  => mean 0.5
    assert M.qa2_label_macro_f1(preds, golds) == pytest.approx(0.5)


# ---------------------------------------------------------------------------------------------- ROUGE-L


def test_rouge_score_default_tokenizer_drops_chinese():
    from rouge_score import rouge_scorer

    default = rouge_scorer.RougeScorer(["rougeL"])
    # why a custom tokenizer is needed: Chinese becomes no tokens at all, so identical text scores 0
    assert default.score("水稻产量增加", "水稻产量增加")["rougeL"].fmeasure == 0.0
    assert M.rouge_l("水稻产量增加", "水稻产量增加") == pytest.approx(1.0)


def test_rouge_l_chinese_by_hand():
    ref, pred = "水稻的产量显著增加了", "水稻产量显著减少"
    assert M.tokenize_mixed(ref) == ["水稻", "的", "产量", "显著", "增加", "了"]
    assert M.tokenize_mixed(pred) == ["水稻", "产量", "显著", "减少"]
    # LCS = 水稻 产量 显著 = 3; P = 3/4, R = 3/6; F = 2PR/(P+R) = 0.6
    assert M.rouge_l(pred, ref) == pytest.approx(0.6)


def test_rouge_l_mixed_and_edge_cases():
    assert M.tokenize_mixed("OsDREB1C的过表达 increased yield by 45.1%。") == [
        "osdreb1c",
        "的",
        "过",
        "表达",
        "increased",
        "yield",
        "by",
        "45.1",
    ]
    # English: ref "the cat sat on the mat" (6), pred "the cat on mat" (4): LCS 4 -> P=1, R=4/6 -> F=0.8
    assert M.rouge_l("the cat on mat", "the cat sat on the mat") == pytest.approx(0.8)
    assert M.rouge_l("", "水稻") == 0.0
    assert M.rouge_l("水稻", ["小麦", "水稻"]) == 1.0  # max over references
    assert M.extract_answer_text("正确答案：Jiyu 441，Changnong 35") == "Jiyu 441，Changnong 35"
    assert M.extract_answer_text("Reasoning...\nAnswer: Latin") == "Latin"


# ---------------------------------------------------------------------------------------------- SQuAD EM / F1


def test_squad_normalization_and_em():
    assert M.normalize_answer("The  Eiffel Tower!") == "eiffel tower"
    assert M.exact_match("The Eiffel Tower!", ["eiffel tower"]) == 1.0
    assert M.exact_match("Eiffel", ["eiffel tower", "Paris"]) == 0.0
    assert M.exact_match("an apple", "Apple.") == 1.0


def test_squad_token_f1():
    # pred [big, red, dog], gold [red, dog, barks]: common 2 -> P=R=2/3 -> F1 2/3
    assert M.token_f1("the big red dog", "red dog barks") == pytest.approx(2 / 3)
    # max over golds
    assert M.token_f1("Columbus, Ohio", ["Ohio", "Columbus Ohio"]) == 1.0
    # HotpotQA yes/no rule: no partial credit
    assert M.token_f1("yes", "yes it is") == 0.0
    assert M.token_f1("", "x") == 0.0 and M.token_f1("", "") == 1.0
    # CJK counts one token per character: pred 水稻品种 vs gold 水稻: common 2, P=2/4, R=1 -> 2/3
    assert M.token_f1("水稻品种", "水稻") == pytest.approx(2 / 3)


# ---------------------------------------------------------------------------------------------- retrieval


def test_recall_and_perfect_retrieval():
    retrieved = ["p3", "p3", "p1", "p7", "p2"]  # duplicates count once, at their best rank
    gold = ["p1", "p2"]
    assert M.recall_at_k(retrieved, gold, 1) == 0.0
    assert M.recall_at_k(retrieved, gold, 2) == 0.5  # first 2 distinct: p3, p1
    assert M.recall_at_k(retrieved, gold, 4) == 1.0  # p3, p1, p7, p2
    assert M.perfect_retrieval_at_k(retrieved, gold, 3) == 0.0
    assert M.perfect_retrieval_at_k(retrieved, gold, 4) == 1.0
    assert M.recall_at_k([], gold, 5) == 0.0
    with pytest.raises(ValueError):
        M.recall_at_k(retrieved, [], 2)
    with pytest.raises(ValueError):
        M.recall_at_k(retrieved, gold, 0)


# ---------------------------------------------------------------------------------------------- KGQA


def test_hits_at_1_and_hit():
    golds = M.split_gold_answers("Comedy|Musical")
    assert golds == ("Comedy", "Musical")
    assert M.hits_at_1("musical", golds) == 1.0
    assert M.hits_at_1(["Drama", "Comedy"], golds) == 0.0  # only the top answer counts
    assert M.hits_at_1("The Public Eye", ["Public Eye"]) == 1.0  # articles are normalized away
    assert M.hits_at_1("", golds) == 0.0
    assert M.answer_hit("It was directed by Howard Franklin.", ["Howard Franklin"]) == 1.0
    assert M.answer_hit("Howard Franklinstein", ["Howard Franklin"]) == 0.0  # word-bounded
    assert M.top_answer("Answer: Comedy|Musical") == "Comedy"
    assert M.top_answer("- Edward L. Cahn\n- someone") == "Edward L. Cahn"


def test_evaluation_imports_stay_light():
    import json
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys, json, hxd2_ray.evaluation.metrics, hxd2_ray.evaluation.datasets, "
        "hxd2_ray.evaluation.report\n"
        "heavy = ('ray', 'jieba', 'rouge_score', 'matplotlib', 'torch')\n"
        "print(json.dumps([m for m in heavy if m in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
