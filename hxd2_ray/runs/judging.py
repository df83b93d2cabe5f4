"""``hxd2 eval judge`` as a library function: pairwise LLM-as-judge of two runs, or of two modes of one run."""

from __future__ import annotations

import contextlib
import posixpath
import time
from typing import Any

from hxd2_ray.config import load_config
from hxd2_ray.errors import HxdError
from hxd2_ray.evaluation.judge import (
    PairwiseJudge,
    load_judge_prompts,
    load_judge_prompts_file,
    pair_items,
    write_judge_report,
)
from hxd2_ray.runs.evaluation import Log, load_questions, open_run_folder, publish, read_run
from hxd2_ray.runs.requests import JudgeRequest
from hxd2_ray.stages.eval_traces import load_traces
from hxd2_ray.wiring import build_llm


def judge_modes(
    run_a: dict[str, Any], run_b: dict[str, Any], mode_a: str | None, mode_b: str | None, one_run: bool
) -> tuple[str, str]:
    """The two modes to judge, from the request and what the runs hold; a clear error when it is ambiguous."""
    modes_a, modes_b = list(run_a.get("modes") or []), list(run_b.get("modes") or [])
    if one_run:
        if mode_a is None and mode_b is None and len(modes_a) == 2:
            mode_a, mode_b = modes_a
        if mode_a is None or mode_b is None or mode_a == mode_b:
            raise HxdError(f"judging two modes of one run needs --mode-a and --mode-b, two different ones of {modes_a}")
    else:
        if mode_a is None and len(modes_a) == 1:
            mode_a = modes_a[0]
        if mode_b is None:
            mode_b = modes_b[0] if len(modes_b) == 1 else (mode_a if mode_a in modes_b else None)
        if mode_a is None or mode_b is None:
            raise HxdError(
                f"pick the modes to judge with --mode-a (run A has {modes_a}) and --mode-b (run B has {modes_b})"
            )
    for mode, modes, which in ((mode_a, modes_a, "A"), (mode_b, modes_b, "B")):
        if mode not in modes:
            raise HxdError(f"run {which} has no mode {mode!r}; it has {modes}")
    return mode_a, mode_b


def judge_runs(req: JudgeRequest, llm: Any = None, log: Log = lambda _: None) -> dict[str, Any]:
    """Pairwise LLM-as-judge of mode A of run A against mode B of run B (or of two modes of one run).

    ``llm``: the judge (default: the config's LLM, built and closed here).
    """
    cfg = load_config(req.config, req.overrides)
    one_run = req.b is None
    sides = []
    for d in (req.a, req.a if one_run else req.b):
        assert d is not None
        fs, root = open_run_folder(d, cfg)
        sides.append((d, fs, root, read_run(fs, root, d)))
    (dir_a, fs_a, root_a, run_a), (dir_b, fs_b, root_b, run_b) = sides
    mode_a, mode_b = judge_modes(run_a, run_b, req.mode_a, req.mode_b, one_run)
    questions = load_questions(fs_a, root_a, run_a, req.data_root, req.questions, req.corpus, log)
    if not one_run:  # questions of B that A lacks (the pairing needs both, so this only helps odd cases)
        with contextlib.suppress(HxdError):
            for qid, q in load_questions(fs_b, root_b, run_b, req.data_root, req.questions, req.corpus, log).items():
                questions.setdefault(qid, q)
    items, pairing = pair_items(
        load_traces(fs_a, root_a, [mode_a]),
        load_traces(fs_b, root_b, [mode_b]),
        questions,
        limit=req.limit,
        use_reference=not req.no_reference,
    )
    if not items:
        raise HxdError(f"no question answered by both {dir_a}:{mode_a} and {dir_b}:{mode_b} ({pairing})")
    name_a, name_b = (posixpath.basename(r.rstrip("/")) or r for r in (root_a, root_b))
    label_a, label_b = (mode_a, mode_b) if one_run else (f"{name_a}/{mode_a}", f"{name_b}/{mode_b}")
    prompts = load_judge_prompts_file(req.prompts) if req.prompts else load_judge_prompts(req.prompt_version)
    own_llm = llm is None
    if own_llm:
        llm = build_llm(cfg.llm)
    try:
        judge = PairwiseJudge(
            llm,
            criteria=list(req.criteria),
            prompts=prompts,
            language=req.language,
            batch_size=req.batch_size,
            max_tokens=req.max_tokens,
            max_answer_chars=req.max_answer_chars,
            seed=req.seed,
        )
        log(f"judging {len(items)} pairs x {len(judge.criteria)} criteria x 2 orders: {label_a} vs {label_b}")
        t0 = time.perf_counter()
        result = judge.judge(items)
        seconds = time.perf_counter() - t0
    finally:
        if own_llm and hasattr(llm, "close"):
            llm.close()
    result.info.update(
        {
            "run_a": dir_a,
            "run_b": dir_b,
            "mode_a": mode_a,
            "mode_b": mode_b,
            "pairing": pairing,
            "seconds": round(seconds, 3),
        }
    )
    if req.output:
        fs_out, root_out = open_run_folder(req.output, cfg)
    else:
        suffix = f"{mode_a}-vs-{mode_b}" if one_run else f"{mode_a}-vs-{name_b}-{mode_b}"
        fs_out, root_out = fs_a, posixpath.join(root_a, f"judge-{suffix}")
    paths = publish(fs_out, root_out, lambda folder: write_judge_report(result, folder, label_a, label_b))
    return {
        "label_a": label_a,
        "label_b": label_b,
        "pairing": pairing,
        "info": result.info,
        "totals": result.totals,
        "report": paths,
    }
