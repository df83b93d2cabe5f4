"""Typed requests of the evaluation runs (``hxd2 eval run``, ``eval grid``, ``eval judge``).

``jobs/evaluate.py`` parses arguments into these and hands them to the library functions of
:mod:`hxd2_ray.runs.evaluation` and :mod:`hxd2_ray.runs.judging`; a notebook or another job builds them
directly. Frozen, and checked where they are built: a bad value fails before anything runs.
"""

from __future__ import annotations

import json
import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hxd2_ray.retrieval.flow import MODES

GRID_DEFAULT_MODES = ("llm_only", "dual", "logic", "auto")


def policy_overrides(policy: str | None) -> tuple[str, ...]:
    """``--policy DIR`` as the config override it stands for (``graphflow.policy``); the folder made absolute so
    that Ray workers started elsewhere find it, and quoted so that YAML reads any name as a string."""
    if not policy:
        return ()
    return (f"graphflow.policy={json.dumps(os.path.abspath(policy))}",)


class _Request(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    config: str | None = Field(None, description="hxd2 YAML config; None: the index's recorded config")
    overrides: tuple[str, ...] = Field((), description="section.key=value overrides of the config")


def _check_modes(modes: tuple[str, ...]) -> tuple[str, ...]:
    if bad := [m for m in modes if m not in MODES]:
        raise ValueError(f"unknown mode(s) {bad}; valid: {', '.join(MODES)}")
    return tuple(dict.fromkeys(modes))


class EvalRunRequest(_Request):
    """One benchmark, answered by one or more modes over one index, in resumable shards."""

    benchmark: str
    output: str = Field(description="run folder or s3:// URI (traces, report)")
    index: str | None = Field(None, description="index folder or s3:// URI (not needed for llm_only alone)")
    modes: tuple[str, ...] = ("auto",)
    limit: int | None = Field(None, ge=1, description="first N questions only")
    data_root: str | None = None
    questions: str | None = Field(None, description="questions file (overrides the benchmark's default)")
    corpus: str | None = None
    workers: int = Field(1, ge=1, description="answering actors (each loads its own LLM)")
    concurrency: int = Field(1, ge=1, description="questions answered at once per worker")
    shards: int | None = Field(None, ge=1, description="question shards (default min(n, 4 x workers))")
    cpus_per_worker: float = Field(1.0, ge=0)
    gpus_per_worker: float = Field(0.0, ge=0)
    policy: str | None = Field(
        None,
        description="GraphFlow policy folder for mode graphflow / multistage.graph_walk; added to the "
        "overrides as graphflow.policy (so the run records it)",
    )

    _modes = field_validator("modes")(_check_modes)

    @field_validator("modes")
    @classmethod
    def _some_mode(cls, modes: tuple[str, ...]) -> tuple[str, ...]:
        return modes or ("auto",)

    @model_validator(mode="before")
    @classmethod
    def _policy_is_an_override(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("policy"):
            extra = policy_overrides(data["policy"])
            overrides = tuple(data.get("overrides") or ())
            if extra[0] not in overrides:
                data = {**data, "overrides": (*overrides, *extra)}
        return data


class EvalGridRequest(_Request):
    """An ablation: index variants (``LABEL=PATH``) x query-time axes (``KEY=V1,V2``) x modes."""

    benchmark: str
    output: str
    indexes: tuple[str, ...] = Field((), description="LABEL=PATH index variants")
    axes: tuple[str, ...] = Field((), description="SECTION.KEY=V1,V2 settings to vary")
    modes: tuple[str, ...] = GRID_DEFAULT_MODES
    limit: int | None = Field(None, ge=1)
    data_root: str | None = None
    questions: str | None = None
    corpus: str | None = None
    workers: int = Field(1, ge=1)
    concurrency: int = Field(1, ge=1)
    shards: int | None = Field(None, ge=1)
    cpus_per_worker: float = Field(1.0, ge=0)
    gpus_per_worker: float = Field(0.0, ge=0)

    _modes = field_validator("modes")(_check_modes)

    @field_validator("modes")
    @classmethod
    def _some_mode(cls, modes: tuple[str, ...]) -> tuple[str, ...]:
        return modes or GRID_DEFAULT_MODES

    def cell_run(
        self, modes: tuple[str, ...], index: str | None, output: str, overrides: tuple[str, ...]
    ) -> EvalRunRequest:
        """The ordinary run of one cell."""
        return EvalRunRequest(
            benchmark=self.benchmark,
            output=output,
            index=index,
            modes=modes,
            limit=self.limit,
            data_root=self.data_root,
            questions=self.questions,
            corpus=self.corpus,
            workers=self.workers,
            concurrency=self.concurrency,
            shards=self.shards,
            cpus_per_worker=self.cpus_per_worker,
            gpus_per_worker=self.gpus_per_worker,
            config=self.config,
            overrides=(*self.overrides, *overrides),
        )


class JudgeRequest(_Request):
    """Pairwise LLM-as-judge of mode A of run A against mode B of run B (or of two modes of one run)."""

    a: str = Field(description="run folder A")
    b: str | None = Field(None, description="run folder B (default: A, judging mode_a vs mode_b)")
    mode_a: str | None = None
    mode_b: str | None = None
    limit: int | None = Field(None, ge=1)
    output: str | None = None
    criteria: tuple[str, ...] = ("overall",)
    language: str = "auto"
    no_reference: bool = False
    batch_size: int = Field(256, ge=1)
    max_tokens: int = Field(128, ge=1)
    max_answer_chars: int = Field(2000, ge=1)
    prompt_version: str = "v1"
    prompts: str | None = None
    seed: int = 0
    data_root: str | None = None
    questions: str | None = None
    corpus: str | None = None

    @field_validator("criteria")
    @classmethod
    def _some_criterion(cls, criteria: tuple[str, ...]) -> tuple[str, ...]:
        return criteria or ("overall",)
