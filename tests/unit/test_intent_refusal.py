"""Intent recognition (rules, constrained LLM call, tolerant parser, fail-open), the refusal gate's score,
threshold calibration (hand-checked), the calibration plot and the ``hxd2 calibrate-refusal`` command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hxd2_ray.embedding.hashing import HashingEmbedder
from hxd2_ray.llm.scripted import ScriptedLLM
from hxd2_ray.retrieval import open_index
from hxd2_ray.retrieval.intent import (
    INTENTS,
    IntentClassifier,
    load_multistage_prompts,
    parse_intent,
    parse_multistage_prompts,
    rule_intent,
)
from hxd2_ray.retrieval.refusal import (
    RefusalGate,
    calibrate_threshold,
    plot_calibration,
    refusal_message,
)
from hxd2_ray.retrieval.results import Keywords
from tests.unit.retrieval_fixtures import DIM, build_tiny_index

SAMPLE = Path(__file__).resolve().parents[2] / "hxd2_ray" / "sample_data"


# ------------------------------------------------------------------------------------------- intent


@pytest.mark.parametrize(
    "text",
    [
        "hi",
        "Hello!",
        "hello there",
        "  HEY  ",
        "thanks!",
        "Thank you very much.",
        "你好",
        "您好！",
        "谢谢",
        "再见~",
        "hi hi",
        "早上好😀",
    ],
)
def test_rule_greetings(text):
    assert rule_intent(text) == "greeting"


@pytest.mark.parametrize(
    "text",
    ["who are you?", "Who are you", "hi, who are you?", "What is your name?", "你是谁？", "你好，你是谁", "请问你是谁"],
)
def test_rule_identity(text):
    assert rule_intent(text) == "identity"


@pytest.mark.parametrize(
    "text",
    [
        "What is neurexin?",
        "hello, what is neurexin?",
        "thanks, and who founded Stanford?",
        "Who are you going to call about Südhof's lab?",
        "TAC4基因位于几号染色体？",
        "",
        "   ",
        "?!",
    ],
)
def test_rules_leave_everything_else_to_the_llm(text):
    assert rule_intent(text) is None


@pytest.mark.parametrize(
    "reply,expected",
    [
        ("question", "question"),
        ("greeting", "greeting"),
        ("identity", "identity"),
        ("off_topic", "off_topic"),
        ("  OFF_TOPIC\n", "off_topic"),
        ("Off-topic.", "off_topic"),
        ("off topic", "off_topic"),
        ("Greeting!", "greeting"),
        ("The label is: identity", "identity"),
        ('"question"', "question"),
        ("Label: off_topic (the user wants a joke)", "off_topic"),
        ("问题", "question"),
        ("这是闲聊", "off_topic"),
        ("问候", "greeting"),
        ("maybe", None),
        ("", None),
        (None, None),
        ("I am not sure", None),
        ("question, not a greeting", "question"),  # starts with question: fail open to retrieval anyway
        ("greeting or identity", None),  # starts with a label but names another: ambiguous
        ("it could be a greeting, or identity", None),  # two labels inside prose: ambiguous
    ],
)
def test_parse_intent(reply, expected):
    labels = {**load_multistage_prompts().for_language("en").intent_labels}
    for intent, words in load_multistage_prompts().for_language("zh").intent_labels.items():
        labels[intent] = (*labels[intent], *words)
    assert parse_intent(reply, labels) == expected


def test_classifier_rule_hit_costs_no_llm_call():
    llm = ScriptedLLM(lambda req: pytest.fail("no LLM call expected"))
    intent = IntentClassifier(llm).classify("Hello!")
    assert (intent.label, intent.source, intent.needs_retrieval) == ("greeting", "rule", False)
    assert llm.requests == []


def test_classifier_llm_call_is_constrained_and_read():
    llm = ScriptedLLM(lambda req: "off_topic")
    intent = IntentClassifier(llm).classify("Tell me a joke about cats.")
    assert (intent.label, intent.source, intent.raw) == ("off_topic", "llm", "off_topic")
    (req,) = llm.requests
    assert req.tag == "intent" and req.choices == INTENTS and req.temperature == 0.0
    assert req.messages[-1]["content"].endswith("Tell me a joke about cats.")
    assert intent.prompt_tokens > 0


@pytest.mark.parametrize("reply", ["maybe", "", "¯\\_(ツ)_/¯", "greeting, identity and off_topic"])
def test_classifier_fails_open_on_unreadable_replies(reply):
    intent = IntentClassifier(ScriptedLLM(lambda req: reply)).classify("Is the lab open on Sundays?")
    assert (intent.label, intent.source) == ("question", "fallback")
    assert intent.needs_retrieval and "unreadable" in intent.reason


def test_classifier_fails_open_on_errors():
    failing = ScriptedLLM(lambda req: "greeting", fail_first_n=1)
    intent = IntentClassifier(failing).classify("Where is Stanford?")
    assert (intent.label, intent.source) == ("question", "fallback") and "failed" in intent.reason

    def boom(req):
        raise RuntimeError("backend down")

    intent = IntentClassifier(ScriptedLLM(boom)).classify("Where is Stanford?")
    assert (intent.label, intent.source) == ("question", "fallback") and "backend down" in intent.reason


def test_classifier_unconstrained_and_chinese_prompt_and_kb_line():
    llm = ScriptedLLM(lambda req: "这是问候")
    clf = IntentClassifier(llm, constrained=False, kb_description="水稻基因与育种")
    intent = clf.classify("今天过得怎么样呀朋友")
    assert intent.label == "greeting"
    (req,) = llm.requests
    assert req.choices is None
    assert "只回复类别名" in req.messages[0]["content"] and "知识库涵盖：水稻基因与育种" in req.messages[0]["content"]
    # without a description the {kb} line disappears
    clf2 = IntentClassifier(llm)
    system = clf2.request("What is neurexin?").messages[0]["content"]
    assert "{kb}" not in system and "knowledge base covers" not in system


def test_classifier_rules_only():
    intent = IntentClassifier(None, use_llm=False).classify("Tell me a joke")
    assert (intent.label, intent.source) == ("question", "fallback")


def test_prompt_file_is_checked():
    raw = (Path(__file__).resolve().parents[2] / "hxd2_ray/retrieval/prompts/multistage_v1.yaml").read_bytes()
    prompts = parse_multistage_prompts(raw, "v1")
    assert set(prompts.languages) == {"en", "zh"} and prompts.version_hash.startswith("v1-")
    data = yaml.safe_load(raw)
    del data["en"]["refusal"]
    with pytest.raises(ValueError, match="refusal"):
        parse_multistage_prompts(yaml.safe_dump(data, allow_unicode=True).encode(), "bad")
    data = yaml.safe_load(raw)
    data["zh"]["logic_answer"]["user"] = "问题：{question}"
    with pytest.raises(ValueError, match="evidence"):
        parse_multistage_prompts(yaml.safe_dump(data, allow_unicode=True).encode(), "bad")
    data = yaml.safe_load(raw)
    del data["en"]["intent"]["labels"]["identity"]
    with pytest.raises(ValueError, match="labels"):
        parse_multistage_prompts(yaml.safe_dump(data, allow_unicode=True).encode(), "bad")


def test_refusal_messages_are_polite_and_localised():
    en, zh = refusal_message("en"), refusal_message("zh")
    assert en.startswith("Sorry") and "knowledge base" in en
    assert zh.startswith("抱歉") and "知识库" in zh
    assert refusal_message("fr") == en


# ------------------------------------------------------------------------------------------ the gate


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    tiny = build_tiny_index(tmp_path_factory.mktemp("gate") / "index")
    index = open_index(tiny.root, tiny.cfg)
    yield tiny, index, HashingEmbedder(dim=DIM, model_id=tiny.cfg.embedding.model_id)
    index.close()


def _best(index, embedder, family, texts):
    hits = index.family(family).search(embedder.embed(texts), 1)
    return max(h[0][1] for h in hits)


def test_gate_averages_the_two_levels(tiny):
    _, index, embedder = tiny
    gate = RefusalGate(index, embedder, threshold=0.25)
    kw = Keywords(low_level=("Nobel Prize", "Thomas Südhof"), high_level=("award", "research topic"))
    score = gate.score("Which prize did Südhof win?", kw)
    low = _best(index, embedder, "entity_mix", ["Nobel Prize", "Thomas Südhof"])
    high = _best(index, embedder, "relation_mix", ["award", "research topic"])
    assert score.basis == "both"
    assert score.low_best == pytest.approx(low) and score.high_best == pytest.approx(high)
    assert score.score == pytest.approx((low + high) / 2)
    assert score.low_match[0] in kw.low_level and score.high_match[0] in kw.high_level
    assert not score.refused and score.to_dict()["threshold"] == 0.25


def test_gate_with_one_level_or_none(tiny):
    _, index, embedder = tiny
    gate = RefusalGate(index, embedder, threshold=0.25)
    low_only = gate.score("q", Keywords(low_level=("Neurexin",)))
    assert low_only.basis == "low" and low_only.high_best is None
    assert low_only.score == pytest.approx(_best(index, embedder, "entity_mix", ["Neurexin"]))
    high_only = gate.score("q", Keywords(high_level=("employment",)))
    assert high_only.basis == "high" and high_only.low_best is None
    assert high_only.score == pytest.approx(_best(index, embedder, "relation_mix", ["employment"]))
    question = "Which prize did Brian Kobilka win?"
    for kw in (None, Keywords(parsed=False)):
        s = gate.score(question, kw)
        assert s.basis == "question"
        expected = (
            _best(index, embedder, "entity_mix", [question]) + _best(index, embedder, "relation_mix", [question])
        ) / 2
        assert s.score == pytest.approx(expected)


def test_gate_separates_on_and_off_topic(tiny):
    _, index, embedder = tiny
    gate = RefusalGate(index, embedder, threshold=0.25)
    on = gate.score("q", Keywords(low_level=("Brian Kobilka",), high_level=("award",)))
    off = gate.score("q", Keywords(low_level=("weather", "Paris"), high_level=("forecast",)))
    assert on.score > 0.25 > off.score
    assert off.refused and not on.refused
    # the batch form scores the same
    batch = gate.scores(
        ["a", "b"],
        [
            Keywords(low_level=("Brian Kobilka",), high_level=("award",)),
            Keywords(low_level=("weather", "Paris"), high_level=("forecast",)),
        ],
    )
    assert [b.score for b in batch] == pytest.approx([on.score, off.score])


def test_gate_rules_question_and_min(tiny):
    _, index, embedder = tiny
    question = "What is the capital city of Australia?"
    made_up = Keywords(low_level=("Nobel Prize",), high_level=("award",))  # a small model copying examples
    q_expected = (
        _best(index, embedder, "entity_mix", [question]) + _best(index, embedder, "relation_mix", [question])
    ) / 2
    kw = RefusalGate(index, embedder, 0.25).score(question, made_up)
    q = RefusalGate(index, embedder, 0.25, rule="question").score(question, made_up)
    m = RefusalGate(index, embedder, 0.25, rule="min").score(question, made_up)
    assert kw.rule == "keywords" and kw.question_score is None and kw.keyword_score == pytest.approx(kw.score)
    assert q.score == pytest.approx(q_expected) and q.keyword_score is None and q.basis == "question"
    assert m.keyword_score == pytest.approx(kw.score) and m.question_score == pytest.approx(q_expected)
    assert m.score == pytest.approx(min(kw.score, q_expected))
    assert not kw.refused and m.refused  # made-up keywords pass the reference rule, not min
    assert m.to_dict()["rule"] == "min"
    with pytest.raises(ValueError, match="unknown refusal rule"):
        RefusalGate(index, embedder, 0.25, rule="max")


def test_gate_checks_its_threshold_and_families(tiny):
    _, index, embedder = tiny
    with pytest.raises(ValueError, match="between -1 and 1"):
        RefusalGate(index, embedder, threshold=3)
    with pytest.raises(Exception, match="not_a_family"):
        RefusalGate(index, embedder, threshold=0.2, entity_family="not_a_family")


class _EmptyFamily:
    dim = DIM
    count = 0

    def search(self, queries, k):
        return [[] for _ in range(len(queries))]


class _Index:
    def __init__(self, families):
        self.families = families

    def family(self, name):
        return self.families[name]


def test_gate_with_empty_families_scores_zero():
    embedder = HashingEmbedder(dim=DIM)
    gate = RefusalGate(_Index({"entity_mix": _EmptyFamily(), "relation_mix": _EmptyFamily()}), embedder, 0.2)
    s = gate.score("anything", Keywords(low_level=("x",), high_level=("y",)))
    assert (s.score, s.basis, s.refused) == (0.0, "none", True)


# ----------------------------------------------------------------------------------------- calibration


def test_calibration_hand_checked():
    # good scores 0.9 0.8 0.6 0.4, bad 0.5 0.3 0.2 0.1. Accepting score >= t:
    #   t=0.6: P 3/3 R 3/4 F1 .857;  t=0.5: P 3/4 R 3/4 F1 .75;  t=0.4: P 4/5 R 1 F1 .889 (best);  t=0.3: P 4/6 ...
    cal = calibrate_threshold([0.9, 0.8, 0.6, 0.4], [0.5, 0.3, 0.2, 0.1])
    assert cal.cut_score == pytest.approx(0.4)
    assert cal.threshold == pytest.approx(0.35)  # halfway to the next lower score (0.3)
    assert (cal.precision, cal.recall) == pytest.approx((0.8, 1.0))
    assert cal.f1 == pytest.approx(8 / 9)
    assert cal.counts == {"tp": 4, "fn": 0, "fp": 1, "tn": 3}
    assert (cal.n_good, cal.n_bad) == (4, 4)
    by_t = {round(p["threshold"], 6): p for p in cal.curve}
    assert by_t[0.6]["f1"] == pytest.approx(6 / 7) and by_t[0.5]["precision"] == pytest.approx(0.75)
    assert json.loads(json.dumps(cal.to_dict()))["threshold"] == pytest.approx(0.35)


def test_calibration_perfect_separation_and_ties():
    cal = calibrate_threshold([0.7, 0.8], [0.1, 0.2])
    assert (cal.precision, cal.recall, cal.f1) == (1.0, 1.0, 1.0)
    assert cal.cut_score == pytest.approx(0.7) and cal.threshold == pytest.approx(0.45)
    # the lowest score of all is good: no lower score to go halfway to
    cal = calibrate_threshold([0.1, 0.9], [0.5])
    assert cal.threshold == pytest.approx(cal.cut_score)


def test_calibration_needs_both_sets():
    with pytest.raises(ValueError, match="good and bad"):
        calibrate_threshold([0.5], [])
    with pytest.raises(ValueError, match="finite"):
        calibrate_threshold([float("nan")], [0.1])


def test_plot_is_written(tmp_path):
    cal = calibrate_threshold([0.9, 0.8, 0.6, 0.4], [0.5, 0.3, 0.2, 0.1])
    out = plot_calibration(cal, tmp_path / "sub" / "calibration.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5_000


# --------------------------------------------------------------------------------------------- the CLI


def _write_config(tiny, path: Path) -> Path:
    path.write_text(yaml.safe_dump(tiny.cfg.model_dump(mode="json"), allow_unicode=True), encoding="utf-8")
    return path


def test_calibrate_command(tiny, tmp_path, capsys):
    from jobs import calibrate

    t, _, _ = tiny
    good = tmp_path / "good.jsonl"
    bad = tmp_path / "bad.jsonl"
    good.write_text(
        "\n".join(
            json.dumps({"question": q})
            for q in [
                "Thomas Südhof Nobel Prize",
                "Brian Kobilka Stanford University",
                "Robert Malenka synaptic transmission",
            ]
        )
        + "\n# a comment\n\n",
        encoding="utf-8",
    )
    bad.write_text(
        json.dumps("What is the weather in Paris?") + "\n" + json.dumps({"query": "Recommend a pizza recipe"}) + "\n",
        encoding="utf-8",
    )
    out = tmp_path / "out"
    rc = calibrate.main(
        [
            "--index",
            str(t.root),
            "--config",
            str(_write_config(t, tmp_path / "c.yaml")),
            "--good",
            str(good),
            "--bad",
            str(bad),
            "--out",
            str(out),
        ]
    )
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert captured.out.startswith("threshold ") and "precision" in captured.out and "F1" in captured.out
    report = json.loads((out / "calibration.json").read_text(encoding="utf-8"))
    assert report["n_good"] == 3 and report["n_bad"] == 2 and len(report["questions"]) == 5
    assert {q["label"] for q in report["questions"]} == {"good", "bad"}
    assert all("score" in q and "basis" in q for q in report["questions"])
    # the scripted LLM's keywords are the questions' capitalised names, so every question is scored by its
    # low-level keywords (the reference's rule)
    assert {q["basis"] for q in report["questions"]} == {"low"}
    assert -1 <= report["threshold"] <= 1 and report["f1"] > 0
    assert (out / "calibration.png").read_bytes()[:4] == b"\x89PNG"


def test_calibrate_command_question_mode_and_bad_input(tiny, tmp_path, capsys):
    from jobs import calibrate

    t, _, _ = tiny
    cfg = str(_write_config(t, tmp_path / "c.yaml"))
    out = tmp_path / "o"
    rc = calibrate.main(
        [
            "--index",
            str(t.root),
            "--config",
            cfg,
            "--good",
            str(SAMPLE / "refusal_good.jsonl"),
            "--bad",
            str(SAMPLE / "refusal_bad.jsonl"),
            "--out",
            str(out),
            "--rule",
            "question",
        ]
    )
    assert rc == 0, capsys.readouterr().err
    report = json.loads((out / "calibration.json").read_text(encoding="utf-8"))
    assert report["n_good"] == 16 and report["n_bad"] == 16 and report["rule"] == "question"
    assert all(q["question_score"] is not None and q["keyword_score"] is None for q in report["questions"])

    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    assert (
        calibrate.main(
            ["--index", str(t.root), "--config", cfg, "--good", str(empty), "--bad", str(SAMPLE / "refusal_bad.jsonl")]
        )
        == 2
    )
    assert (
        calibrate.main(
            ["--index", str(t.root), "--config", cfg, "--good", str(tmp_path / "missing.jsonl"), "--bad", str(empty)]
        )
        == 2
    )
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"question": 3}\n', encoding="utf-8")
    assert (
        calibrate.main(
            ["--index", str(t.root), "--config", cfg, "--good", str(broken), "--bad", str(SAMPLE / "refusal_bad.jsonl")]
        )
        == 2
    )
    assert (
        calibrate.main(
            [
                "--index",
                str(tmp_path / "no-index"),
                "--config",
                cfg,
                "--good",
                str(SAMPLE / "refusal_good.jsonl"),
                "--bad",
                str(SAMPLE / "refusal_bad.jsonl"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "need at least one good" in err and "no such file" in err and "broken.jsonl:1" in err


def test_sample_question_files_are_readable():
    from jobs.calibrate import read_questions

    good = read_questions(SAMPLE / "refusal_good.jsonl")
    bad = read_questions(SAMPLE / "refusal_bad.jsonl")
    assert len(good) >= 10 and len(bad) >= 10 and not set(good) & set(bad)
    assert any("\u4e00" <= ch <= "\u9fff" for q in good for ch in q)  # both corpus languages are covered
