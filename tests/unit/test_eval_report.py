"""Evaluation reports: aggregation by hand, the files written, valid PNGs, and run comparison."""

from __future__ import annotations

import json

import pytest

from hxd2_ray.evaluation.report import (
    aggregate,
    compare_runs,
    confusion,
    infer_primary_metric,
    is_correct,
    markdown_table,
    percentile,
    verifier_decision,
    write_report,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _t(qid, mode, acc, *, lenient=1.0, lat=None, ptok=None, ctok=None, verifier=None, path=None, error=""):
    t = {"id": qid, "mode": mode, "scores": {"accuracy": acc, "accuracy_lenient": lenient}, "error": error}
    for k, v in (
        ("latency_s", lat),
        ("prompt_tokens", ptok),
        ("completion_tokens", ctok),
        ("verifier", verifier),
        ("path", path),
    ):
        if v is not None:
            t[k] = v
    return t


def _traces():
    return [
        _t("q1", "dual-level", 1.0, lat=1.0, ptok=9000, ctok=50, path="dual_level"),
        _t("q2", "dual-level", 0.0, lat=2.0, ptok=10000, ctok=70, path="dual_level"),
        _t("q3", "dual-level", 1.0, lat=3.0, ptok=11000, ctok=60, path="dual_level"),
        _t("q4", "dual-level", 1.0, lat=4.0, ptok=10000, ctok=20, path="dual_level", error="timeout"),
        _t("q1", "logic", 1.0, lat=0.5, ptok=1700, ctok=40, verifier="YES", path="logic_form"),
        _t("q2", "logic", 1.0, lat=0.7, ptok=1600, ctok=40, verifier="no", path="fallback"),
        _t("q3", "logic", 0.0, lat=0.9, ptok=1800, ctok=40, verifier=True, path="logic_form"),
        _t("q4", "logic", 0.0, lat=1.1, ptok=1700, ctok=40, verifier="No, the context lacks it", path="fallback"),
    ]


def test_percentile_matches_numpy_linear():
    assert percentile([4, 1, 3, 2], 50) == pytest.approx(2.5)
    assert percentile([1, 2, 3, 4], 95) == pytest.approx(3.85)  # pos 2.85 -> 3 + 0.85
    assert percentile([7], 95) == 7 and percentile([], 50) is None


def test_verifier_decisions():
    assert [
        verifier_decision(v) for v in (True, "YES", "yes.", "Y", "no", "NO, missing", False, None, "", "maybe")
    ] == [True, True, True, True, False, False, False, None, None, None]


def test_confusion_reproduces_reference_numbers():
    # HuixiangDou2 evaluation/analyze/test_diff.py log: TP 71 / FN 39 / FP 10 / TN 76
    dec = [True] * 71 + [False] * 39 + [True] * 10 + [False] * 76
    cor = [True] * 71 + [True] * 39 + [False] * 10 + [False] * 76
    c = confusion(dec, cor)
    assert (c["tp"], c["fn"], c["fp"], c["tn"], c["n"]) == (71, 39, 10, 76, 196)
    assert c["precision"] == pytest.approx(0.8765, abs=1e-4)
    assert c["recall"] == pytest.approx(0.6455, abs=1e-4)
    # exactly 2*71/(2*71+10+39) = 142/191 = 0.7435 (the reference notes print 0.7437)
    assert c["f1"] == pytest.approx(142 / 191)


def test_aggregate_by_hand():
    s = aggregate(_traces())
    assert list(s) == ["dual-level", "logic"]  # first-appearance order
    d, lg = s["dual-level"], s["logic"]
    assert d["n"] == 4 and d["errors"] == 1 and d["correct"] == 3
    assert d["metrics"]["accuracy"] == pytest.approx(0.75)
    assert d["metrics"]["accuracy_lenient"] == 1.0
    assert d["latency_s"]["p50"] == pytest.approx(2.5) and d["latency_s"]["p95"] == pytest.approx(3.85)
    assert d["prompt_tokens_mean"] == 10000 and d["completion_tokens_mean"] == 50
    assert d["verifier"] is None and d["paths"] == {"dual_level": 4}
    assert lg["metrics"]["accuracy"] == pytest.approx(0.5)
    # logic: q1 yes&correct TP, q2 no&correct FN, q3 yes&wrong FP, q4 no&wrong TN
    v = lg["verifier"]
    assert (v["tp"], v["fp"], v["fn"], v["tn"]) == (1, 1, 1, 1)
    assert lg["paths"] == {"logic_form": 2, "fallback": 2}


def test_correctness_rules():
    assert infer_primary_metric(_traces()) == "accuracy"
    assert is_correct({"scores": {"f1": 0.5}}, "f1") is True
    assert is_correct({"scores": {"f1": 0.49}}, "f1") is False
    assert is_correct({"correct": False, "scores": {"f1": 1.0}}, "f1") is False
    assert is_correct({"scores": {}}, "f1") is None
    assert is_correct({"em": 1}, "em") is True  # flat metric keys are read too


def test_markdown_table_shape():
    s = aggregate(_traces())
    table = markdown_table(s, ["accuracy", "accuracy_lenient"])
    lines = table.splitlines()
    assert lines[0].startswith("| Mode | Accuracy (strict) | Accuracy (lenient†) | Avg prompt tokens |")
    assert "p50 latency (s)" in lines[0]
    assert lines[2] == "| dual-level | 0.750 | 1.000 | 10,000 | 50 | 2.50 | 3.85 | 4 | 1 |"
    assert len(lines) == 4


def test_write_report_files_and_pngs(tmp_path):
    paths = write_report(
        _traces(),
        tmp_path / "rep",
        "SeedBench QA-1 (rice, 4 questions)",
        skipped_rows=[("1-1.json#7", "answer 'E' is not one of the options ABCD")],
        run_info={"benchmark": "seedbench-qa1", "model": "scripted"},
    )
    assert set(paths) == {"markdown", "html", "json", "score_by_mode", "latency", "tokens", "verifier_confusion"}
    for name in ("score_by_mode", "latency", "tokens", "verifier_confusion"):
        data = paths[name].read_bytes()
        assert data[:8] == PNG_SIGNATURE and len(data) > 1000, name
    md = paths["markdown"].read_text(encoding="utf-8")
    assert md.startswith("# SeedBench QA-1 (rice, 4 questions)")
    assert "lenient = the reference's rule" in md
    assert "| logic | 1 | 1 | 1 | 1 | 0.500 | 0.500 | 0.500 |" in md
    assert "`1-1.json#7`" in md and "![latency](latency.png)" in md
    doc = json.loads(paths["json"].read_text(encoding="utf-8"))
    assert doc["primary_metric"] == "accuracy" and doc["lenient_metrics"] == ["accuracy_lenient"]
    assert doc["modes"]["logic"]["verifier"]["tp"] == 1 and doc["n_traces"] == 8
    assert doc["skipped_rows"] == [["1-1.json#7", "answer 'E' is not one of the options ABCD"]]
    assert doc["run_info"]["model"] == "scripted"


def test_write_report_without_optional_data(tmp_path):
    traces = [{"id": "a", "mode": "m", "scores": {"f1": 0.25}}, {"id": "b", "mode": "m", "scores": {"f1": 0.75}}]
    paths = write_report(traces, tmp_path, "Minimal")
    assert set(paths) == {"markdown", "html", "json", "score_by_mode"}  # no latency, tokens or verifier: no plot
    assert paths["score_by_mode"].read_bytes()[:8] == PNG_SIGNATURE
    md = paths["markdown"].read_text(encoding="utf-8")
    assert "| m | 0.500 | – | – | – | – | 2 | 0 |" in md and "lenient" not in md
    empty = write_report([], tmp_path / "empty", "Nothing")
    assert set(empty) == {"markdown", "html", "json"}
    assert json.loads(empty["json"].read_text())["modes"] == {}


def test_compare_runs_same_modes():
    a = _traces()
    b = [dict(t, scores=dict(t["scores"])) for t in a]
    b[1]["scores"]["accuracy"] = 1.0  # dual-level q2 fixed
    b[4]["scores"]["accuracy"] = 0.0  # logic q1 broken
    b = b[:-1]  # logic q4 missing in B
    cmp = compare_runs(a, b)
    assert cmp.keyed_by == "id+mode" and cmp.metric == "accuracy"
    assert [(r["id"], r["mode"], r["change"], r["delta"]) for r in cmp.rows] == [
        ("q2", "dual-level", "fixed", 1.0),
        ("q1", "logic", "broken", -1.0),
    ]
    assert cmp.summary == {
        "paired": 7,
        "fixed": 1,
        "broken": 1,
        "score_changed": 0,
        "mean_delta": 0.0,
        "only_in_a": 1,
        "only_in_b": 0,
    }
    md = cmp.to_markdown("baseline", "candidate")
    assert "| q2 | dual-level | 0.000 | 1.000 | 1.000 | fixed |" in md and "only in baseline: 1" in md


def test_compare_runs_across_modes_by_id():
    a = [{"id": "q1", "mode": "hybrid", "scores": {"f1": 0.4}}, {"id": "q2", "mode": "hybrid", "scores": {"f1": 1.0}}]
    b = [{"id": "q1", "mode": "logic", "scores": {"f1": 0.6}}, {"id": "q2", "mode": "logic", "scores": {"f1": 0.9}}]
    cmp = compare_runs(a, b)
    assert cmp.keyed_by == "id"
    assert [(r["id"], r["mode"], r["change"]) for r in cmp.rows] == [
        ("q1", "hybrid → logic", "fixed"),
        ("q2", "hybrid → logic", "score"),
    ]
    assert cmp.rows[1]["delta"] == pytest.approx(-0.1)
    assert cmp.summary["mean_delta"] == pytest.approx(0.05)
    assert json.dumps(cmp.to_dict())  # JSON-ready


def test_path_reasons_are_grouped_by_kind():
    from hxd2_ray.evaluation.report import aggregate, reason_category, render_markdown

    assert reason_category("fallback: plan failed: step 2 uses an unknown alias 'x'") == "fallback: plan failed"
    assert reason_category("fallback: timeout: planning and execution took longer than 61.5 s") == "fallback: timeout"
    assert reason_category("refusal score 0.12 < threshold 0.30 (best entity)") == "refusal score N < threshold N"
    assert reason_category("") is None and reason_category(None) is None
    base = {"mode": "auto", "scores": {"accuracy": 0.0}, "latency_s": 1.0, "path": "dual_level"}
    traces = [
        {**base, "id": "a", "path_reason": "fallback: plan failed: bad alias"},
        {**base, "id": "b", "path_reason": "fallback: plan failed: unknown operator 'x'"},
        {**base, "id": "c", "path_reason": "fallback: timeout: took longer than 600.0 s"},
        {**base, "id": "d", "path_reason": None},  # a shard written before the column existed
        {**base, "id": "e", "path": "logic_form", "path_reason": "pre-check verifier said yes"},
    ]
    summary = aggregate(traces, ["accuracy"], "accuracy")
    assert summary["auto"]["path_reasons"] == {
        "fallback: plan failed": 2,
        "fallback: timeout": 1,
        "pre-check verifier said yes": 1,
    }
    md = render_markdown("t", summary, ["accuracy"])
    assert "| auto | fallback: plan failed | 2 |" in md.split("## Why each path was taken")[1]


def test_report_has_a_row_per_question_with_gold_answer_hit_path_latency_and_references(tmp_path):
    traces = [dict(t, answer=f"answer to {t['id']} | with a pipe", evidence_ids=["doc-a", "doc-b"]) for t in _traces()]
    questions = {f"q{i}": {"question": f"What is <q{i}>?", "answers": [f"gold {i}"]} for i in range(1, 5)}
    paths = write_report(traces, tmp_path, "Per question", questions=questions)
    md = paths["markdown"].read_text(encoding="utf-8")
    table = md[md.index("## Questions") :]
    assert "| Question | Mode | Gold | Answer | Hit | Path | Latency (s) | References |" in table
    # q2 in dual-level scored 0: a miss, with its gold, the answer (pipe escaped), path, latency and references
    assert (
        "| q2: What is <q2>? | dual-level | gold 2 | answer to q2 \\| with a pipe | ✗ | dual_level | 2.00 | "
        "doc-a, doc-b |" in table
    )
    assert "| q1: What is <q1>? | logic | gold 1 |" in table and table.count("| ✓ |") == 5
    page = paths["html"].read_text(encoding="utf-8")
    assert page.count('<tr class="hit">') + page.count('<tr class="miss">') == 8
    assert "What is &lt;q2&gt;?" in page and "<q2>" not in page  # escaped, never markup
    assert 'src="score_by_mode.png"' in page and "http" not in page  # self-contained: nothing from outside


def test_markdown_question_table_keeps_the_first_rows_of_each_mode(tmp_path):
    from hxd2_ray.evaluation.question_table import markdown_question_table, question_rows

    traces = [{"id": f"q{i}", "mode": m, "answer": "x"} for m in ("a", "b") for i in range(60)]
    rows = question_rows(traces, {}, [None] * len(traces))
    table = markdown_question_table(rows, limit=50)
    assert table.count("\n| q") == 100 and "20 more rows" in table
    assert "| q0 | a | – | x | – |" in table  # unknown question, gold and hit are shown as missing


def test_score_plot_runs_zero_to_one_and_leaves_a_missing_value_undrawn(tmp_path):
    from hxd2_ray.evaluation import report_plots as report

    drawn = {}
    real_save = report.save_figure

    def keep(fig, path):
        drawn["fig"] = fig
        return real_save(fig, path)

    summary = {"a": {"metrics": {"f1": 0.5, "em": None}}, "b": {"metrics": {"f1": 1.0, "em": 0.25}}}
    report.save_figure, saved = keep, report.save_figure
    try:
        report.plot_scores(summary, ["f1", "em"], tmp_path / "s.png")
    finally:
        report.save_figure = saved
    ax = drawn["fig"].axes[0]
    assert ax.get_ylim() == (0.0, 1.0) and ax.get_ylabel() and ax.get_xlabel()
    heights = sorted(round(p.get_height(), 3) for p in ax.patches)
    assert heights == [0.25, 0.5, 1.0]  # three bars: the missing em of mode a is not drawn as 0
    assert "n/a" in [t.get_text() for t in ax.texts] and "0.000" not in [t.get_text() for t in ax.texts]
