"""Prometheus metrics of the index and evaluation jobs, recorded through ``ray.util.metrics``.

Ray's metrics agent on each node exports them on the node's metrics port (``ray start
--metrics-export-port``; ``ray.init(_metrics_export_port=...)`` for a local Ray) with a ``ray_`` prefix, and
counters with a ``_total`` suffix, so a Prometheus scraping the cluster and the Ray dashboard see e.g.
``ray_hxd2_chunks_processed_total{job="index",run="runs/idx",stage="extract"}`` (``run``: the command's
``--output``, so concurrent jobs stay apart). They are recorded in one place, the job's telemetry actor
(``jobs/telemetry.py``), from the counts the stages report; every metric also has the labels Ray adds
(``SessionName``, ``NodeAddress``, ``WorkerId``...).

| metric (as exported) | type | labels | what |
|---|---|---|---|
| ``ray_hxd2_files_ingested_total`` | counter | job, run, stage | input files parsed (or quarantined) |
| ``ray_hxd2_chunks_processed_total`` | counter | job, run, stage | chunks through loop-NER |
| ``ray_hxd2_texts_embedded_total`` | counter | job, run, stage | texts embedded into vectors |
| ``ray_hxd2_questions_answered_total`` | counter | job, run, stage, mode | evaluation questions answered, scored |
| ``ray_hxd2_questions_correct_total`` | counter | job, run, stage, mode | ... of which scored correct |
| ``ray_hxd2_llm_calls_total`` | counter | job, run, stage, mode | LLM requests (NER rounds, summaries, answers) |
| ``ray_hxd2_llm_tokens_total`` | counter | job, run, stage, mode, kind | tokens, ``kind`` = prompt or completion |
| ``ray_hxd2_malformed_records_total`` | counter | job, run, stage | LLM output records not parsed (skipped) |
| ``ray_hxd2_failures_total`` | counter | job, run, stage, mode | items with an error (chunks, texts, questions) |
| ``ray_hxd2_stage_duration_seconds`` | histogram | job, run, stage, mode | wall time of each run of a stage |

The histogram is exported as ``_sum``, ``_count`` and ``_bucket`` series.

Durations are a histogram rather than a gauge: Ray drops a gauge's series once it is not set again within a
TTL, and a stage that finished an hour ago must still show in the job's metrics.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TAGS = ("job", "run", "stage", "mode")
# The ``done`` count of a stage is exported under the metric of its unit.
DONE_METRIC_BY_UNIT = {
    "files": "hxd2_files_ingested",
    "chunks": "hxd2_chunks_processed",
    "texts": "hxd2_texts_embedded",
    "questions": "hxd2_questions_answered",
}
COUNTERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "hxd2_files_ingested": ("Input files parsed or quarantined by the index job", TAGS),
    "hxd2_chunks_processed": ("Chunks through loop-NER extraction", TAGS),
    "hxd2_texts_embedded": ("Texts embedded into vectors", TAGS),
    "hxd2_questions_answered": ("Evaluation questions answered and scored", TAGS),
    "hxd2_questions_correct": ("Evaluation questions scored correct (primary metric >= 0.5)", TAGS),
    "hxd2_llm_calls": ("LLM requests made by the job", TAGS),
    "hxd2_llm_tokens": ("LLM tokens, kind=prompt|completion", (*TAGS, "kind")),
    "hxd2_malformed_records": ("LLM output records that could not be parsed and were skipped", TAGS),
    "hxd2_failures": ("Items recorded with an error (failed chunks, texts, questions)", TAGS),
}
HISTOGRAMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "hxd2_stage_duration_seconds": ("Wall time of each run of a stage, seconds", TAGS),
}
DURATION_BOUNDARIES: list[float] = [1, 10, 60, 300, 1800, 7200, 36000]
# counter name reported by a stage -> (metric, extra tags)
_BY_COUNT: dict[str, tuple[str, dict[str, str]]] = {
    "correct": ("hxd2_questions_correct", {}),
    "llm_calls": ("hxd2_llm_calls", {}),
    "prompt_tokens": ("hxd2_llm_tokens", {"kind": "prompt"}),
    "completion_tokens": ("hxd2_llm_tokens", {"kind": "completion"}),
    "malformed": ("hxd2_malformed_records", {}),
    "failed": ("hxd2_failures", {}),
}


def exported_name(metric: str) -> str:
    """The name Prometheus sees: Ray prefixes ``ray_``; counters get ``_total`` (histograms: their ``_sum``)."""
    return f"ray_{metric}_total" if metric in COUNTERS else f"ray_{metric}_sum"


class JobMetrics:
    """The job's ``ray.util.metrics`` objects; create it inside a Ray worker (the telemetry actor)."""

    def __init__(self) -> None:
        from ray.util.metrics import Counter, Histogram

        self.counters = {
            name: Counter(name, description=desc, tag_keys=tags) for name, (desc, tags) in COUNTERS.items()
        }
        self.histograms = {
            name: Histogram(name, description=desc, boundaries=DURATION_BOUNDARIES, tag_keys=tags)
            for name, (desc, tags) in HISTOGRAMS.items()
        }

    def record(self, tags: Mapping[str, str], unit: str, counts: Mapping[str, float]) -> None:
        base = {k: str(tags.get(k, "")) for k in TAGS}
        for key, value in counts.items():
            if not value or value < 0:
                continue
            if key == "done":
                metric, extra = DONE_METRIC_BY_UNIT.get(unit, ""), dict[str, str]()
            else:
                metric, extra = _BY_COUNT.get(key, ("", {}))
            if metric:
                self.counters[metric].inc(float(value), tags={**base, **extra})

    def stage_seconds(self, tags: Mapping[str, str], seconds: float) -> None:
        base = {k: str(tags.get(k, "")) for k in TAGS}
        self.histograms["hxd2_stage_duration_seconds"].observe(float(seconds), tags=base)


def parse_prometheus(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """``name -> [(labels, value), ...]`` from Prometheus text exposition (enough for tests and the bench)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return out


def metric_value(samples: Mapping[str, list[tuple[dict[str, str], float]]], name: str, **labels: Any) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    want = {k: str(v) for k, v in labels.items()}
    return sum(v for lab, v in samples.get(name, []) if all(lab.get(k) == x for k, x in want.items()))
