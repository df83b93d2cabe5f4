"""Per-question scoring and the benchmark registry: each benchmark's loader, task and metrics."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hxd2_ray.evaluation import metrics as M
from hxd2_ray.evaluation.datasets.generic import load_corpus_jsonl, load_generic
from hxd2_ray.evaluation.datasets.hotpotqa import load_corpus_hotpotqa, load_hotpotqa
from hxd2_ray.evaluation.datasets.items import (
    DatasetError,
    EvalItem,
    LoadReport,
)
from hxd2_ray.evaluation.datasets.metaqa import load_metaqa, load_metaqa_kb
from hxd2_ray.evaluation.datasets.seedbench import (
    SEEDBENCH_SUBSETS,
    load_seedbench,
    load_seedbench_segments,
)

# --------------------------------------------------------------------------------------------------------------
# predictions and scoring
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Prediction:
    answer_text: str
    retrieved_passage_ids: tuple[str, ...] = ()  # source ids of the retrieved documents, best first
    answers: tuple[str, ...] = ()  # ranked candidate answers (KGQA), when the system gives a list
    error: str = ""


DEFAULT_KS = (2, 5)


def score_item(spec: "BenchmarkSpec | str", item: EvalItem, prediction: Prediction) -> dict[str, float]:
    """Per-question scores, keyed by the spec's metric names (retrieval metrics only when the item has gold
    passages). An errored prediction is scored like an empty answer: 0, never skipped."""
    spec = get_benchmark(spec) if isinstance(spec, str) else spec
    text = prediction.answer_text or ""
    task = item.task
    out: dict[str, float] = {}
    if task == "qa1":
        valid = "".join(c[0] for c in item.choices) or "ABCD"
        choice = M.extract_choice(text, valid) or M.match_option_text(text, item.choices)
        out["accuracy"] = float(choice == item.answers[0])
        out["accuracy_lenient"] = float(M.choice_correct_lenient(text, item.answers[0]))
        out["parsed"] = float(choice is not None)
    elif task == "qa2":
        valid = "".join(c[0] for c in item.choices) or "ABCD"
        got = M.extract_choice_set(text, valid)
        out["f1"] = M.set_f1(got, item.answers)
        out["exact_match"] = float(got == frozenset(item.answers))
        out["parsed"] = float(got is not None)
    elif task in ("qa3", "qa4"):
        out["rouge_l"] = M.rouge_l(M.extract_answer_text(text), item.answers)
    elif task == "kgqa":
        top = prediction.answers[0] if prediction.answers else M.top_answer(text)
        out["hits@1"] = M.hits_at_1(top, item.answers)
        out["hit"] = M.answer_hit(text or " | ".join(prediction.answers), item.answers)
    else:  # multihop, generic
        answer = M.extract_answer_text(text)
        out["em"] = M.exact_match(answer, item.answers) if item.answers else 0.0
        out["f1"] = M.token_f1(answer, item.answers) if item.answers else 0.0
        if task == "generic":
            out["rouge_l"] = M.rouge_l(answer, item.answers) if item.answers else 0.0
    if item.gold_passages:
        for k in spec.ks:
            out[f"recall@{k}"] = M.recall_at_k(prediction.retrieved_passage_ids, item.gold_passages, k)
            out[f"perfect@{k}"] = M.perfect_retrieval_at_k(prediction.retrieved_passage_ids, item.gold_passages, k)
    return out


# --------------------------------------------------------------------------------------------------------------
# registry
# --------------------------------------------------------------------------------------------------------------

_REPO_ROOT = Path(__file__).resolve().parents[3]
DEFAULT_DATA_ROOT = Path("../shared/data")


def default_data_root() -> Path:
    """``../shared/data`` relative to the working directory, else relative to the repository root."""
    if DEFAULT_DATA_ROOT.is_dir():
        return DEFAULT_DATA_ROOT
    return (_REPO_ROOT / DEFAULT_DATA_ROOT).resolve()


@dataclass(frozen=True)
class BenchmarkSpec:
    name: str
    task: str
    description: str
    metrics: tuple[str, ...]  # per-question score keys, as score_item returns them
    primary_metric: str
    questions_path: str | None  # relative to the data root; None: must be given
    corpus_path: str | None
    loader: Callable[..., LoadReport] = field(repr=False)  # (questions: Path, corpus: Path | None, **options)
    corpus_loader: Callable[..., list[dict[str, str]]] | None = field(default=None, repr=False)
    options: Mapping[str, Any] = field(default_factory=dict, compare=False)  # default loader options
    ks: tuple[int, ...] = DEFAULT_KS
    lenient_metrics: tuple[str, ...] = ()  # reported only for comparison with the reference, labelled lenient

    def paths(
        self,
        data_root: str | Path | None = None,
        *,
        questions: str | Path | None = None,
        corpus: str | Path | None = None,
    ) -> tuple[Path | None, Path | None]:
        root = Path(data_root) if data_root is not None else default_data_root()
        q = Path(questions) if questions is not None else (root / self.questions_path if self.questions_path else None)
        c = Path(corpus) if corpus is not None else (root / self.corpus_path if self.corpus_path else None)
        return q, c

    def load(
        self,
        data_root: str | Path | None = None,
        *,
        questions: str | Path | None = None,
        corpus: str | Path | None = None,
        **options: Any,
    ) -> LoadReport:
        q, c = self.paths(data_root, questions=questions, corpus=corpus)
        if q is None:
            raise DatasetError(f"benchmark {self.name!r} has no default questions file; pass questions=")
        return self.loader(q, c, **{**self.options, **options})

    def load_corpus(
        self,
        data_root: str | Path | None = None,
        *,
        corpus: str | Path | None = None,
        skipped: list[tuple[str, str]] | None = None,
    ) -> list[dict[str, str]]:
        _, c = self.paths(data_root, corpus=corpus)
        if c is None or self.corpus_loader is None:
            raise DatasetError(f"benchmark {self.name!r} has no default corpus; pass corpus=")
        return self.corpus_loader(c, skipped)

    def score(self, item: EvalItem, prediction: Prediction) -> dict[str, float]:
        return score_item(self, item, prediction)


def _seedbench_loader(subset: str) -> Callable[..., LoadReport]:
    def load(questions: Path, corpus: Path | None, rice_only: bool = False) -> LoadReport:
        return load_seedbench(questions, subsets=(subset,), rice_only=rice_only)

    return load


def _hotpot_loader(questions: Path, corpus: Path | None) -> LoadReport:
    return load_hotpotqa(questions, corpus)


def _metaqa_loader(hops: int) -> Callable[..., LoadReport]:
    def load(questions: Path, corpus: Path | None) -> LoadReport:
        return load_metaqa(questions, default_hops=hops)

    return load


def _generic_loader(questions: Path, corpus: Path | None) -> LoadReport:
    return load_generic(corpus, questions)


def _retrieval_metrics(ks: tuple[int, ...]) -> tuple[str, ...]:
    return tuple(f"{m}@{k}" for k in ks for m in ("recall", "perfect"))


def _build_registry() -> dict[str, BenchmarkSpec]:
    specs = []
    seed_desc = {
        "1-1": "QA-1 single choice (accuracy; strict letter extraction, lenient substring for comparison)",
        "1-2": "QA-2 multiple answer (mean per-question set F1, set exact match)",
        "1-3": "QA-3 fill-in-the-blank (ROUGE-L, jieba tokens)",
        "1-4": "QA-4 generation (ROUGE-L, jieba tokens)",
    }
    seed_metrics = {
        "qa1": (("accuracy", "accuracy_lenient", "parsed"), "accuracy"),
        "qa2": (("f1", "exact_match", "parsed"), "f1"),
        "qa3": (("rouge_l",), "rouge_l"),
        "qa4": (("rouge_l",), "rouge_l"),
    }
    for subset, task in SEEDBENCH_SUBSETS.items():
        metrics, primary = seed_metrics[task]
        # "-rice": only the rice items (split.level2 "Oryza sativa"), as the paper evaluated.
        for suffix, rice_only in (("", False), ("-rice", True)):
            specs.append(
                BenchmarkSpec(
                    name=f"seedbench-{task}{suffix}",
                    task=task,
                    description=f"SeedBench zero-shot {seed_desc[subset]}{', rice items only' if rice_only else ''}",
                    metrics=metrics,
                    primary_metric=primary,
                    questions_path=f"seedbench/zero-shot/{subset}.json",
                    corpus_path="seedbench/279segments.jsonl",
                    loader=_seedbench_loader(subset),
                    corpus_loader=load_seedbench_segments,
                    options={"rice_only": rice_only},
                    lenient_metrics=("accuracy_lenient",) if task == "qa1" else (),
                )
            )
    specs.append(
        BenchmarkSpec(
            name="hotpotqa",
            task="multihop",
            description="HotpotQA 100-question train subset with its 994-passage corpus (HippoRAG copy): "
            "SQuAD EM/F1, supporting-passage recall@k and perfect retrieval@k",
            metrics=("em", "f1") + _retrieval_metrics(DEFAULT_KS),
            primary_metric="f1",
            questions_path="hipporag-multihop/hotpotqa_train.json",
            corpus_path="hipporag-multihop/hotpotqa_train_corpus.json",
            loader=_hotpot_loader,
            corpus_loader=load_corpus_hotpotqa,
        )
    )
    for h in (1, 2, 3):
        specs.append(
            BenchmarkSpec(
                name=f"metaqa-{h}hop",
                task="kgqa",
                description=f"MetaQA {h}-hop: 200 dev questions answerable in the rebuilt KB (Hits@1, answer hit)",
                metrics=("hits@1", "hit"),
                primary_metric="hits@1",
                questions_path=f"metaqa/{h}-hop/fixture_dev_200_reachable.tsv",
                corpus_path="metaqa/kb.txt",
                loader=_metaqa_loader(h),
                corpus_loader=load_metaqa_kb,
            )
        )
    specs.append(
        BenchmarkSpec(
            name="generic",
            task="generic",
            description="Your own corpus JSONL {id,title,text} and questions JSONL {id,question,answers,gold_passages?}"
            ": EM/F1/ROUGE-L, plus recall@k when gold passages are given",
            metrics=("em", "f1", "rouge_l") + _retrieval_metrics(DEFAULT_KS),
            primary_metric="f1",
            questions_path=None,
            corpus_path=None,
            loader=_generic_loader,
            corpus_loader=load_corpus_jsonl,
        )
    )
    return {s.name: s for s in specs}


BENCHMARKS: dict[str, BenchmarkSpec] = _build_registry()


def get_benchmark(name: str) -> BenchmarkSpec:
    """The spec of a benchmark; an unknown name raises ValueError listing the valid ones."""
    try:
        return BENCHMARKS[name]
    except KeyError:
        raise ValueError(f"unknown benchmark {name!r}; valid: {', '.join(sorted(BENCHMARKS))}") from None
