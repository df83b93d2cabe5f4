"""The refusal gate's two error rates, reported with every evaluation run.

* **in-corpus refusals**: the share of a benchmark's questions answered with the path ``refused`` (a benchmark's
  questions are about its corpus, so every refusal is one too many); read from the traces, per mode
  (:func:`hxd2_ray.evaluation.report.aggregate`'s ``refused``);
* **off-topic refusals**: the share of held-out off-topic questions the gate refuses, scored by the gate the run's
  config builds for the run's index (:meth:`~hxd2_ray.retrieval.refusal.RefusalGate.for_index`). The questions
  are :data:`HELD_OUT_FILE`, written for this measurement and never used to calibrate (the calibration's
  negatives are ``off_topic_questions.jsonl``). The gate scores them without the keyword call: the question's
  own embedding, its names and its lexical match, which is what the calibrated ``question`` rule uses.

An error here is recorded in the report, never raised: the run's answers are what matters.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hxd2_ray.retrieval.index import open_index
from hxd2_ray.retrieval.refusal import RefusalGate
from hxd2_ray.wiring import build_embedder

__all__ = ["GATED_MODES", "HELD_OUT_FILE", "held_out_off_topic", "off_topic_refusals"]

HELD_OUT_FILE = "off_topic_heldout.jsonl"
GATED_MODES = ("auto", "auto_post")  # the modes whose flow runs the gate


def held_out_off_topic() -> list[str]:
    path = Path(__file__).resolve().parents[1] / "sample_data" / HELD_OUT_FILE
    return [json.loads(line)["question"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def off_topic_refusals(index_location: str, cfg: Any) -> dict[str, Any]:
    """``{"refused", "n", "rule", "threshold", "threshold_source", "lexical_level", "questions"}`` for the gate of
    ``cfg`` over the index, or ``{"error": ...}``."""
    questions = held_out_off_topic()
    embedder = None
    try:
        embedder = build_embedder(cfg.embedding)
        with open_index(index_location, cfg) as index:
            gate = RefusalGate.for_index(index, embedder, cfg.multistage)
            scores = gate.scores(questions, [None] * len(questions))
        return {
            "refused": round(sum(s.refused for s in scores) / len(scores), 4),
            "n": len(scores),
            "rule": gate.rule,
            "threshold": gate.threshold,
            "threshold_source": gate.threshold_source,
            "lexical_level": gate.lexical_level,
            "questions": f"hxd2_ray/sample_data/{HELD_OUT_FILE}",
        }
    except Exception as exc:  # noqa: BLE001 - a report line, not a failed run
        return {"error": f"{type(exc).__name__}: {exc}"[:500]}
    finally:
        close = getattr(embedder, "close", None)
        if callable(close):
            close()
