"""The multi-stage pipeline: intent, logic form, verifier, fallback (its refusal gate: ``refusal.py``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from hxd2_ray.config.refusal import RefusalGate


class MultiStageConfig(RefusalGate):
    """Settings of the multi-stage pipeline (intent, refusal gate, logic form, verifier, fallback)."""

    intent_enabled: bool = Field(True, description="Run intent recognition first (auto mode only).")
    intent_use_llm: bool = Field(
        True, description="Ask the LLM when no fixed phrase matched; False: rules only, everything else is a question."
    )
    verifier_mode: Literal["pre", "post", "none"] = Field(
        "pre",
        description="pre: check question + evidence before answering (paper's choice); post: check the "
        "answer too; none: trust any executed plan.",
    )
    logic_timeout_s: float = Field(60.0, gt=0, description="Deadline of planning + execution, then fall back.")
    history_turns: int = Field(
        6,
        ge=0,
        description="A conversation's earlier messages the LLM reads to rewrite the last question into one that "
        "stands alone, before retrieval (the latest ones; 0: the last question is used as it is).",
    )
    history_max_chars: int = Field(
        4000, gt=0, description="Characters of earlier messages the rewrite reads at most (the latest ones kept)."
    )
    rewrite_max_tokens: int = Field(96, gt=0, description="Completion cap of the rewrite call.")
    max_plan_steps: int = Field(
        8, ge=2, le=12, description="Longest plan accepted (output step included; the planner caps plans at 12)."
    )
    plan_max_tokens: int = Field(1024, gt=0, description="Completion cap of the planning (and repair) call.")
    plan_max_text_chars: int = Field(
        512,
        ge=8,
        le=512,
        description=(
            "Longest string the plan schema allows while decoding (names, predicates, step texts); lower it for "
            "small models whose strings run on."
        ),
    )
    direct_max_tokens: int = Field(256, gt=0, description="Completion cap of direct replies (greetings, identity).")
    logic_answer_max_tokens: int | None = Field(
        None,
        gt=0,
        description="Completion cap of the logic-form answer; None (and never more than): retrieval.answer_max_tokens.",
    )
    planner_relation_hints: int = Field(
        64, ge=0, description="Most frequent relation keywords of the graph shown to the planner (0: none)."
    )
    knowledge_base_description: str = Field(
        "", description="One line on what the knowledge base covers, for the intent and direct-reply prompts."
    )
    prompt_version: str = Field("v1", description="prompts/multistage_<version>.yaml")
    logic_workers: int = Field(4, ge=1, description="Worker threads running plan + execute (per pipeline).")
    overlap_steps: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Mode auto: start the logic form's plan and the dual-level retrieval while the intent is "
        "classified, instead of one after the other. The decisions and the answer are the same; the "
        "latency is the longest of the three instead of their sum; a question answered directly or "
        "refused has spent a planning call for nothing. auto: on when the LLM takes concurrent calls "
        "(its thread_safe: Serve's LLM deployment, the threaded vLLM engine, an API), off when they "
        "would only queue behind one lock.",
    )
    graph_walk: bool = Field(
        False,
        description="After a failed or rejected logic form, walk the graph with the GraphFlow policy (graphflow) "
        "before falling back to dual-level retrieval; its paths are verified and answered from like a "
        "plan's evidence. Needs a policy for the index.",
    )
