"""Pairwise LLM-as-judge: the tolerant verdict parser, order swapping (position bias cancels), exact totals,
batching, prompts, and ``hxd2 eval judge`` on tiny run folders written with the TRACES schema."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pytest

from hxd2_ray.evaluation.judge import (
    JSON_SCHEMA,
    TAG,
    JudgeItem,
    PairwiseJudge,
    bootstrap_interval,
    combine,
    criteria_of,
    load_judge_prompts,
    load_judge_prompts_file,
    pair_items,
    parse_verdict,
    reference_text,
    wilson_interval,
    write_judge_report,
)
from hxd2_ray.llm.base import LLMRequest
from hxd2_ray.llm.scripted import ScriptedLLM

ROOT = Path(__file__).resolve().parents[2]
HOTPOT = ROOT / "tests" / "data" / "eval" / "hotpotqa"
_SHOWN = re.compile(
    r"\[(?:Answer|回答) A\]\n(.*?)\n\[(?:End of answer A|回答 A 结束)\].*?"
    r"\[(?:Answer|回答) B\]\n(.*?)\n\[(?:End of answer B|回答 B 结束)\]",
    re.S,
)


def _shown(req: LLMRequest) -> tuple[str, str]:
    """(text shown as A, text shown as B) of a judge request."""
    m = _SHOWN.search(req.messages[-1]["content"])
    assert m, req.messages[-1]["content"]
    return m.group(1), m.group(2)


def prefers(marker: str, tie_reply: str = "tie"):
    """A judge that picks whichever shown answer contains ``marker``, in either order."""

    def handler(req: LLMRequest) -> str:
        first, second = _shown(req)
        if marker in first and marker not in second:
            return json.dumps({"winner": "A", "reason": "has the marker"})
        if marker in second and marker not in first:
            return json.dumps({"winner": "B", "reason": "has the marker"})
        return tie_reply

    return handler


def _items(n: int, good_in_a: set[int]) -> list[JudgeItem]:
    return [
        JudgeItem(
            id=f"q{i}",
            question=f"Question number {i}?",
            answer_a=f"answer {i} from A" + (" GOOD" if i in good_in_a else ""),
            answer_b=f"answer {i} from B" + ("" if i in good_in_a else " GOOD"),
        )
        for i in range(n)
    ]


# ------------------------------------------------------------------------------------------------ parser


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("A", "A"),
        ("b", "B"),
        ("Tie", "tie"),
        (" tie. ", "tie"),
        ("平局", "tie"),
        ("Answer B", "B"),
        ("答案B", "B"),
        ('{"winner": "B", "reason": "more complete"}', "B"),
        ('{"winner": "a", "reason": "cut off', "A"),
        ('```json\n{"winner": "tie", "reason": ""}\n```', "tie"),
        ("[[A]]", "A"),
        ("Verdict: [[C]]", "tie"),
        ("Winner: B", "B"),
        ("A is better than B.", "A"),
        ("Response B wins", "B"),
        ("B更好", "B"),
        ("更好的回答是A", "A"),
        ("不分上下", "tie"),
        ("Both answers are equally good.", "tie"),
        ("A. It cites the reference.", "A"),
        # unreadable: no answer named, contradicting itself, another label, not JSON-winner
        ("", None),
        ("I cannot decide", None),
        ("A, but B is also fine", None),
        ("The answer is C", None),
        ('{"reason": "x"}', None),
        ('{"winner": "maybe"}', None),
        ("[[A]] or [[B]]", None),
    ],
)
def test_parse_verdict(reply, expected):
    assert parse_verdict(reply) == expected


def test_combine_and_intervals():
    assert combine("A", "A") == ("A", True)
    assert combine("tie", "tie") == ("tie", True)
    assert combine("A", "B") == ("tie", False)
    assert combine("B", "tie") == ("tie", False)
    assert combine(None, "A") == ("invalid", None)
    lo, hi = wilson_interval(5, 10)
    assert lo == pytest.approx(0.2366, abs=1e-4) and hi == pytest.approx(0.7634, abs=1e-4)
    assert wilson_interval(0, 0) is None
    assert bootstrap_interval([1.0] * 4) == (1.0, 1.0)
    assert bootstrap_interval([0.0, 1.0] * 10, seed=3) == bootstrap_interval([0.0, 1.0] * 10, seed=3)


# ------------------------------------------------------------------------------------------------ judge


def test_first_position_bias_cancels_into_inconsistent_ties():
    llm = ScriptedLLM(lambda req: "A")  # always the answer shown first
    result = PairwiseJudge(llm).judge(_items(5, good_in_a={0, 1, 2}))
    t = result.totals["overall"]
    assert (t["wins_a"], t["wins_b"], t["ties"], t["inconsistent"], t["invalid"]) == (0, 0, 5, 5, 0)
    assert t["win_rate_a"] == 0.5 and t["win_rate_a_ci95"] == [0.5, 0.5]
    assert (t["first_position_picks"], t["second_position_picks"]) == (10, 0)
    assert t["a_share_of_decisive"] is None
    assert all(
        v.verdict == "tie" and v.consistent is False and (v.a_first, v.b_first) == ("A", "B") for v in result.verdicts
    )
    # Both orders of every pair were asked, each answer once in each position.
    assert len(llm.requests) == 10
    for i in range(5):
        a_first, b_first = (_shown(r) for r in llm.requests[2 * i : 2 * i + 2])
        assert a_first == (b_first[1], b_first[0]) and a_first[0].startswith(f"answer {i} from A")


def test_content_preference_wins_in_both_orders():
    llm = ScriptedLLM(prefers("GOOD"))
    result = PairwiseJudge(llm).judge(_items(5, good_in_a={0, 1, 2}))
    t = result.totals["overall"]
    assert (t["wins_a"], t["wins_b"], t["ties"], t["inconsistent"], t["invalid"]) == (3, 2, 0, 0, 0)
    assert t["win_rate_a"] == pytest.approx(0.6)
    assert t["a_share_of_decisive"] == pytest.approx(0.6)
    assert (t["first_position_picks"], t["second_position_picks"]) == (5, 5)
    assert [v.verdict for v in result.verdicts] == ["A", "A", "A", "B", "B"]
    assert result.verdicts[0].reason_a_first == "has the marker"
    lo, hi = t["win_rate_a_ci95"]
    assert 0.0 <= lo <= 0.6 <= hi <= 1.0
    assert result.info["llm_requests"] == 10 and result.info["pairs"] == 5


def test_invalid_replies_errors_and_identical_answers_are_counted():
    def handler(req: LLMRequest) -> str:
        first, second = _shown(req)
        if "answer 1" in first and "from B" in first:  # q1, B shown first: gibberish
            return "I refuse to pick"
        return prefers("GOOD")(req)

    items = _items(4, good_in_a={0, 1, 2, 3})
    items[2] = JudgeItem("q2", "POISON question?", "answer 2 from A GOOD", "answer 2 from B")
    items[3] = JudgeItem("q3", "Question 3?", "same text", "  same text ")
    llm = ScriptedLLM(handler, fail_when=["POISON"])
    result = PairwiseJudge(llm).judge(items)
    t = result.totals["overall"]
    assert [v.verdict for v in result.verdicts] == ["A", "invalid", "invalid", "tie"]
    assert (t["wins_a"], t["wins_b"], t["ties"], t["inconsistent"], t["invalid"], t["identical"]) == (1, 0, 1, 0, 2, 1)
    assert (t["valid"], t["replies"], t["invalid_replies"], t["llm_errors"]) == (2, 6, 3, 2)
    assert t["win_rate_a"] == pytest.approx(0.75)
    assert len(llm.requests) == 6  # identical answers: no call
    v1, v2 = result.verdicts[1], result.verdicts[2]
    assert (v1.a_first, v1.b_first, v1.raw_b_first) == ("A", None, "I refuse to pick")
    assert len(v2.errors) == 2 and "scripted failure" in v2.errors[0]


def test_requests_are_batched_structured_and_tagged():
    llm = ScriptedLLM(prefers("GOOD"))
    PairwiseJudge(llm, batch_size=3).judge(_items(4, good_in_a={0}))
    assert llm.batch_sizes == [3, 3, 2]
    assert all(r.tag == TAG and r.json_schema == JSON_SCHEMA and r.temperature == 0.0 for r in llm.requests)
    assert '"winner"' in llm.requests[0].messages[0]["content"]

    class NoSchema(ScriptedLLM):
        supports_json_schema = False

    plain = NoSchema(prefers("GOOD"))
    result = PairwiseJudge(plain).judge(_items(2, good_in_a={0}))
    assert all(r.json_schema is None for r in plain.requests)
    assert "Reply with one word only: A, B or tie." in plain.requests[0].messages[-1]["content"]
    assert [v.verdict for v in result.verdicts] == ["A", "B"]


def test_reference_language_criteria_and_clipping():
    llm = ScriptedLLM(prefers("GOOD"))
    items = [
        JudgeItem("q0", "Who wrote it?", "Ann GOOD", "Bob", reference="Ann"),
        JudgeItem("q1", "水稻的主要病害是什么？", "稻瘟病 GOOD", "不知道" * 2000),
    ]
    judge = PairwiseJudge(llm, criteria=["correctness", "brevity=Which answer is shorter?"], max_answer_chars=50)
    result = judge.judge(items)
    assert list(result.totals) == ["correctness", "brevity"]
    assert [(v.id, v.criterion, v.verdict) for v in result.verdicts] == [
        ("q0", "correctness", "A"),
        ("q0", "brevity", "A"),
        ("q1", "correctness", "A"),
        ("q1", "brevity", "A"),
    ]
    en = llm.requests[0].messages
    assert "Reference answer (treat it as correct): Ann" in en[1]["content"]
    assert "Criterion: Which answer is more correct" in en[0]["content"]
    assert "Criterion: Which answer is shorter?" in llm.requests[2].messages[0]["content"]
    zh = llm.requests[4].messages
    assert "评判标准" in zh[0]["content"] and "参考答案" not in zh[1]["content"]
    assert "\n\n\n" not in zh[1]["content"]
    assert len(zh[1]["content"]) < 400  # the long answer was cut to 50 characters
    assert "问题：水稻的主要病害是什么？" in zh[1]["content"]
    with pytest.raises(ValueError, match="unknown criterion"):
        PairwiseJudge(llm, criteria=["elegance"])
    no_ref = ScriptedLLM(prefers("GOOD"))
    PairwiseJudge(no_ref, use_reference=False).judge(items[:1])
    assert "Reference answer" not in no_ref.requests[0].messages[1]["content"]


def test_answer_text_with_placeholders_is_not_expanded():
    llm = ScriptedLLM(lambda req: "tie")
    PairwiseJudge(llm).judge([JudgeItem("q", "What is {answer_b}?", "{question} GOOD", "{reference}")])
    user = llm.requests[0].messages[1]["content"]
    assert "Question: What is {answer_b}?" in user and "{question} GOOD" in user and "\n{reference}\n" in user


def test_prompt_set_and_file(tmp_path):
    prompts = load_judge_prompts()
    assert prompts.version_hash.startswith("v1-") and len(prompts.version_hash) == 15
    assert criteria_of(prompts) == ("overall", "correctness", "comprehensiveness", "faithfulness")
    assert set(prompts.languages) == {"en", "zh"}
    assert prompts.for_language("fr") is prompts.languages["en"]
    with pytest.raises(FileNotFoundError, match="judge_v9.yaml"):
        load_judge_prompts("v9")
    src = ROOT / "hxd2_ray" / "evaluation" / "prompts" / "judge_v1.yaml"
    copy = tmp_path / "judge_exp.yaml"
    copy.write_bytes(src.read_bytes())
    loaded = load_judge_prompts_file(copy)
    assert loaded.version == "exp" and loaded.version_hash.split("-")[1] == prompts.version_hash.split("-")[1]
    bad = tmp_path / "judge_bad.yaml"
    bad.write_text(src.read_text(encoding="utf-8").replace("{answer_b}", "answer b"), encoding="utf-8")
    with pytest.raises(ValueError, match="answer_b"):
        load_judge_prompts_file(bad)


def test_pairing_and_reference_text():
    qs = {
        "1": {"question": "Q1?", "answers": ["B"], "choices": [["A", "wheat"], ["B", "rice"]]},
        "2": {"question": "Q2?", "answers": ["x", "y"]},
        "3": {"question": ""},
    }
    assert reference_text(qs["1"]) == "B. rice" and reference_text(qs["2"]) == "x / y"
    ta = [{"id": i, "answer": f"a{i}"} for i in ("1", "2", "3", "4")]
    tb = [{"id": i, "answer": f"b{i}"} for i in ("5", "3", "2", "1")]
    items, stats = pair_items(ta, tb, qs)
    assert [(i.id, i.answer_a, i.answer_b, i.reference) for i in items] == [
        ("1", "a1", "b1", "B. rice"),
        ("2", "a2", "b2", "x / y"),
    ]
    assert stats == {"paired": 3, "only_in_a": 1, "only_in_b": 1, "no_question": 1, "judged": 2}
    items, _ = pair_items(ta, tb, qs, limit=1, use_reference=False)
    assert [(i.id, i.reference) for i in items] == [("1", "")]


def test_write_judge_report(tmp_path):
    result = PairwiseJudge(ScriptedLLM(prefers("GOOD"))).judge(_items(3, good_in_a={0}))
    paths = write_judge_report(result, tmp_path / "out", "dual", "auto")
    assert {k: p.name for k, p in paths.items()} == {"json": "judge.json", "markdown": "judge.md", "plot": "judge.png"}
    doc = json.loads(paths["json"].read_text())
    assert doc["label_a"] == "dual" and doc["totals"]["overall"]["wins_b"] == 2 and len(doc["verdicts"]) == 3
    md = paths["markdown"].read_text()
    assert "A = dual, B = auto" in md and "| overall | 3 | 1 | 2 | 0 | 0 | 0 |" in md
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------------------------------------ CLI


def _write_run(
    folder: Path,
    answers: dict[str, dict[str, str]],
    *,
    questions: bool = True,
    benchmark: str = "generic",
    ids: list[str] | None = None,
) -> None:
    """A run folder as ``hxd2 eval run`` leaves it: run.json, questions.json and one trace shard per mode."""
    from hxd2_ray.stages import staging as st
    from hxd2_ray.stages.eval_stage import TRACES, shard_path

    ids = ids or list(next(iter(answers.values())))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.json").write_text(
        json.dumps({"benchmark": benchmark, "modes": list(answers), "limit": None, "questions": len(ids)})
    )
    if questions:
        (folder / "questions.json").write_text(
            json.dumps(
                [
                    {"id": q, "position": i, "question": f"What about {q}?", "answers": [f"gold {q}"], "choices": []}
                    for i, q in enumerate(ids)
                ]
            )
        )
    import pyarrow.fs as pafs

    for mode, by_id in answers.items():
        rows = [
            {
                "id": q,
                "position": i,
                "shard": 0,
                "mode": mode,
                "path": "dual_level",
                "answer": by_id[q],
                "scores": json.dumps({"f1": 0.5}),
                "correct": False,
                "latency_s": 0.1,
                "prompt_tokens": 10,
                "completion_tokens": 5,
                "verifier": "",
                "evidence_ids": [],
                "llm_errors": 0,
                "error": "",
            }
            for i, q in enumerate(ids)
            if q in by_id
        ]
        st.write_table_atomic(
            pafs.LocalFileSystem(), shard_path(str(folder), mode, 0), pa.Table.from_pylist(rows, schema=TRACES)
        )


@pytest.fixture
def scripted_judge(monkeypatch):
    """``build_llm`` of the judge command returns a ScriptedLLM preferring answers that contain GOOD."""
    made: list[ScriptedLLM] = []

    def build(cfg, **kwargs):
        made.append(ScriptedLLM(prefers("GOOD")))
        return made[-1]

    import hxd2_ray.runs.judging

    monkeypatch.setattr(hxd2_ray.runs.judging, "build_llm", build)
    return made


def test_cli_two_runs(tmp_path, capsys, scripted_judge):
    from jobs import evaluate as eval_job

    _write_run(tmp_path / "base", {"dual": {"q1": "b1 GOOD", "q2": "b2 GOOD", "q3": "b3", "q4": "same"}})
    _write_run(tmp_path / "new", {"auto": {"q1": "n1", "q2": "n2", "q3": "n3 GOOD", "q4": "same"}})
    code = eval_job.main(["judge", str(tmp_path / "base"), str(tmp_path / "new"), "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    summary = json.loads(out.out)
    t = summary["totals"]["overall"]
    assert (t["n"], t["wins_a"], t["wins_b"], t["ties"], t["inconsistent"], t["invalid"]) == (4, 2, 1, 1, 0, 0)
    assert (summary["label_a"], summary["label_b"]) == ("base/dual", "new/auto")
    assert summary["pairing"] == {"paired": 4, "only_in_a": 0, "only_in_b": 0, "no_question": 0, "judged": 4}
    out_dir = tmp_path / "base" / "judge-dual-vs-new-auto"
    assert sorted(p.name for p in out_dir.iterdir()) == ["judge.json", "judge.md", "judge.png"]
    doc = json.loads((out_dir / "judge.json").read_text())
    assert [v["verdict"] for v in doc["verdicts"]] == ["A", "A", "B", "tie"]
    assert doc["info"]["mode_a"] == "dual" and doc["info"]["judge_model"] == "scripted-echo"
    llm = scripted_judge[0]
    assert (
        len(llm.requests) == 6
        and "Reference answer (treat it as correct): gold q1" in llm.requests[0].messages[1]["content"]
    )

    # Text output, --limit and --output.
    code = eval_job.main(
        [
            "judge",
            str(tmp_path / "base"),
            str(tmp_path / "new"),
            "--limit",
            "2",
            "--output",
            str(tmp_path / "j2"),
            "--no-reference",
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "judged 2 pairs" in out.out and "A = base/dual, B = new/auto" in out.out
    assert json.loads((tmp_path / "j2" / "judge.json").read_text())["totals"]["overall"]["wins_a"] == 2
    assert "Reference answer" not in scripted_judge[1].requests[0].messages[1]["content"]


def test_cli_two_modes_of_one_run_and_errors(tmp_path, capsys, scripted_judge):
    from jobs import evaluate as eval_job

    run = tmp_path / "run"
    _write_run(
        run,
        {
            "dual": {"q1": "d1", "q2": "d2 GOOD", "q3": "d3"},
            "auto": {"q1": "a1 GOOD", "q2": "a2", "q3": "a3 GOOD"},
            "llm_only": {"q1": "l1", "q2": "l2", "q3": "l3"},
        },
    )
    code = eval_job.main(
        [
            "judge",
            str(run),
            "--mode-a",
            "dual",
            "--mode-b",
            "auto",
            "--json",
            "--criterion",
            "overall",
            "--criterion",
            "faithfulness",
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    summary = json.loads(out.out)
    for crit in ("overall", "faithfulness"):
        t = summary["totals"][crit]
        assert (t["wins_a"], t["wins_b"], t["ties"], t["invalid"]) == (1, 2, 0, 0)
    assert (summary["label_a"], summary["label_b"]) == ("dual", "auto")
    assert (run / "judge-dual-vs-auto" / "judge.md").is_file()

    for argv, message in [
        (["judge", str(run)], "needs --mode-a and --mode-b"),
        (["judge", str(run), "--mode-a", "dual", "--mode-b", "logic"], "no mode 'logic'"),
        (["judge", str(tmp_path / "missing"), "--mode-a", "a", "--mode-b", "b"], "run.json is missing"),
        (["judge", str(run), "--mode-a", "dual", "--mode-b", "auto", "--criterion", "elegance"], "unknown criterion"),
    ]:
        assert eval_job.main(argv) == 2
        assert message in capsys.readouterr().err


def test_cli_reloads_questions_for_runs_without_questions_file(tmp_path, capsys, scripted_judge):
    from hxd2_ray.evaluation.datasets import get_benchmark
    from jobs import evaluate as eval_job

    items = get_benchmark("hotpotqa").load(questions=HOTPOT / "questions.json", corpus=HOTPOT / "corpus.json").items
    ids = [it.id for it in items[:3]]
    run = tmp_path / "old"
    _write_run(
        run,
        {"dual": {q: f"{q} GOOD" for q in ids}, "auto": {q: q for q in ids}},
        questions=False,
        benchmark="hotpotqa",
        ids=ids,
    )
    base = ["judge", str(run), "--mode-a", "dual", "--mode-b", "auto", "--json"]
    assert eval_job.main([*base, "--data-root", str(tmp_path / "no-data")]) == 2
    assert "has no questions.json" in capsys.readouterr().err
    code = eval_job.main(
        [*base, "--questions", str(HOTPOT / "questions.json"), "--corpus", str(HOTPOT / "corpus.json")]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    assert json.loads(out.out)["totals"]["overall"]["wins_a"] == 3
    first = scripted_judge[-1].requests[0].messages[1]["content"]
    assert f"Question: {items[0].question}" in first
    assert f"Reference answer (treat it as correct): {items[0].answers[0]}" in first


def test_write_questions_round_trip(tmp_path):
    import pyarrow.fs as pafs

    from hxd2_ray.evaluation.datasets import EvalItem
    from hxd2_ray.runs import evaluation as runs

    fs = pafs.LocalFileSystem()
    items = [
        EvalItem("a", "Pick one: A. x B. y", ("B",), choices=(("A", "x"), ("B", "y")), task="qa1"),
        EvalItem("b", "Why?", ("because",)),
    ]
    runs.write_questions(fs, str(tmp_path), items)
    got = runs.load_questions(fs, str(tmp_path), {"benchmark": "generic"})
    assert list(got) == ["a", "b"]
    assert reference_text(got["a"]) == "B. y" and got["b"]["position"] == 1
