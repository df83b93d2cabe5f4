"""The one place where configuration becomes concrete classes: backends, and the query flow of every mode.

Everything heavy (vLLM, torch, FlagEmbedding) is imported inside the branch that needs it, so importing this
module, or building the scripted LLM and the hashing embedder, loads none of them. Ray actors call these
builders in ``__init__``, so each actor pays only for the backend it actually runs.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from hxd2_ray.config import (
    EmbeddingConfig,
    FlagEmbeddingConfig,
    FlagRerankerConfig,
    HashingEmbeddingConfig,
    HxdConfig,
    LLMConfig,
    NoRerankerConfig,
    OpenAILLMConfig,
    OverlapRerankerConfig,
    RerankConfig,
    ScriptedLLMConfig,
    VllmLLMConfig,
)

if TYPE_CHECKING:
    from hxd2_ray.embedding.base import Embedder
    from hxd2_ray.llm.base import LLMClient
    from hxd2_ray.logic import EvidenceVerifier, LogicFormExecutor, LogicFormPlanner
    from hxd2_ray.rerank.base import Reranker
    from hxd2_ray.retrieval.flow import QueryFlow
    from hxd2_ray.retrieval.index import OpenIndex
    from hxd2_ray.retrieval.parts import FlowParts, GraphRetriever

log = logging.getLogger(__name__)


def build_llm(cfg: LLMConfig, *, concurrent: bool = False) -> "LLMClient":
    """``concurrent``: the caller will call from many threads at once and wants the calls batched together
    (vLLM: the async engine behind a thread-safe facade; the scripted LLM is used as it is)."""
    match cfg:
        case ScriptedLLMConfig():
            from hxd2_ray.llm.scripted import ScriptedLLM

            # from_config builds the built-in deterministic extraction mode (no script given).
            return ScriptedLLM.from_config(cfg)
        case VllmLLMConfig() if concurrent:
            from hxd2_ray.llm.threaded import ThreadedVllmLLM

            return ThreadedVllmLLM(cfg)
        case VllmLLMConfig():
            from hxd2_ray.llm.vllm_engine import VllmEngineLLM

            return VllmEngineLLM(cfg)
        case OpenAILLMConfig():
            from hxd2_ray.llm.openai_backend import OpenAILLM

            return OpenAILLM(cfg)  # thread-safe and concurrent either way
    raise TypeError(f"no LLM backend for {type(cfg).__name__}")


def check_llm_server(cfg: LLMConfig) -> None:
    """Before any work starts: a remote LLM server (``llm.backend: openai``) must answer, or an
    :class:`~hxd2_ray.errors.HxdError` of one line names its URL. In-process backends have nothing to check."""
    if isinstance(cfg, OpenAILLMConfig):
        from hxd2_ray.llm.openai_backend import check_server

        check_server(cfg)


def build_embedder(cfg: EmbeddingConfig) -> "Embedder":
    match cfg:
        case HashingEmbeddingConfig():
            from hxd2_ray.embedding.hashing import HashingEmbedder

            return HashingEmbedder(dim=cfg.dim, model_id=cfg.model_id)
        case FlagEmbeddingConfig():
            from hxd2_ray.embedding.flag_model import FlagModelEmbedder

            return FlagModelEmbedder(cfg)
    raise TypeError(f"no embedding backend for {type(cfg).__name__}")


# ------------------------------------------------------------------------------------------- query flow


def build_planner(llm: "LLMClient", cfg: HxdConfig) -> "LogicFormPlanner":
    """The logic-form planner (in-process, or inside the Planner deployment's replicas)."""
    from hxd2_ray.logic import LogicFormPlanner

    ms = cfg.multistage
    return LogicFormPlanner(
        llm,
        max_steps=ms.max_plan_steps,
        max_tokens=ms.plan_max_tokens,
        max_relations_in_prompt=max(1, ms.planner_relation_hints),
        max_text_chars=ms.plan_max_text_chars,
    )


def build_plan_executor(index: "OpenIndex", llm: "LLMClient", embedder: "Embedder") -> "LogicFormExecutor":
    """The logic-form executor over one open index: entity linking by name vectors and fuzzy names, predicates
    matched with the embedder."""
    from hxd2_ray.logic import LOGIC_TEMPLATES, EntityLinker, GraphQueries, LogicFormExecutor, PredicateMatcher

    queries = GraphQueries(index.graph, LOGIC_TEMPLATES)
    name_index = index.families.get("entity_name")
    linker = EntityLinker(
        queries,
        embedder=embedder if name_index is not None else None,
        name_index=name_index,
        entity_count=int(index.manifest.counts.get("entities", 0)) or None,
    )
    return LogicFormExecutor(queries, linker, llm, matcher=PredicateMatcher(embedder))


def build_verifiers(llm: "LLMClient") -> dict[str, "EvidenceVerifier"]:
    """Pre-check and post-check verifiers (``auto`` uses the configured one, ``auto_post`` the post-check)."""
    from hxd2_ray.logic import EvidenceVerifier

    return {mode: EvidenceVerifier(llm, mode=mode) for mode in ("pre", "post")}


def build_graph_retriever(index: "OpenIndex", embedder: "Embedder", cfg: HxdConfig) -> "GraphRetriever | None":
    """The GraphFlow retriever of ``graphflow.policy`` over ``index`` (None when no policy is configured).

    The policy's own training config says which embedder made its features: the index's (``embedder``), or
    ``graphflow.feature_embedding`` when it was trained with another one, which is built here. A policy trained on
    another index is refused (:class:`~hxd2_ray.errors.IndexMismatchError`) before any feature is read. torch is
    imported only when a policy is configured.
    """
    gcfg = cfg.graphflow
    if gcfg.policy is None:
        return None
    from hxd2_ray.config import GraphFlowConfig
    from hxd2_ray.graphflow.policy import read_policy_meta
    from hxd2_ray.graphflow.retriever import GraphFlowRetriever

    trained = GraphFlowConfig(**read_policy_meta(gcfg.policy).config)
    feature_cfg = trained.feature_embedding
    feature_embedder = None if feature_cfg is None else build_embedder(gcfg.feature_embedding or feature_cfg)
    # On the CPU: a walk is a few small matrix products per step, and a query replica need not hold a GPU.
    return GraphFlowRetriever.open(index, embedder, gcfg.policy, gcfg, feature_embedder=feature_embedder)


def build_parts(index: "OpenIndex", llm: "LLMClient", embedder: "Embedder", cfg: HxdConfig) -> "FlowParts":
    """The flow's parts in this process (Serve builds the same parts inside their deployments instead); the graph
    retriever when ``graphflow.policy`` names a policy."""
    from hxd2_ray.retrieval.parts import FlowParts

    return FlowParts(
        planner=build_planner(llm, cfg),
        executor=build_plan_executor(index, llm, embedder),
        verifiers=build_verifiers(llm),
        graph_retriever=build_graph_retriever(index, embedder, cfg),
    )


def build_pipeline(
    mode: str,
    index: "OpenIndex | None",
    llm: "LLMClient | None",
    embedder: "Embedder | None",
    cfg: HxdConfig,
    parts: "FlowParts | None" = None,
) -> "QueryFlow":
    """THE query flow for ``mode`` (the default of its ``answer`` calls; other modes it can run are per call).

    The only place that turns configuration into a pipeline: the CLI, the evaluation job and Serve call it.
    What it builds follows from what it is given: without an index only ``llm_only`` runs, without an LLM only
    ``chunk_vector`` and (with a policy) ``graphflow``; ``parts`` (planner, executor, verifiers) default to
    in-process ones, and Serve passes adapters over its deployments' handles. The LLM is wrapped in a
    :class:`~hxd2_ray.llm.wrappers.SerializedLLM` (one call at a time unless the backend is thread-safe, and
    cancellable for the logic form's deadline); the planner's relation hints are read from the graph once, here.
    """
    from hxd2_ray.embedding.cached import CachedEmbedder
    from hxd2_ray.index_store.manifest import check_compatible
    from hxd2_ray.llm.wrappers import SerializedLLM
    from hxd2_ray.logic import load_logic_prompts
    from hxd2_ray.retrieval.budget import DEFAULT_CONTEXT_LENGTH, context_limits
    from hxd2_ray.retrieval.flow import QueryFlow
    from hxd2_ray.retrieval.graph_walk import GraphWalkStep
    from hxd2_ray.retrieval.intent import IntentClassifier, load_multistage_prompts
    from hxd2_ray.retrieval.logic_form import LogicFormStep
    from hxd2_ray.retrieval.pipeline import QueryPipeline
    from hxd2_ray.retrieval.refusal import RefusalGate

    ms, rc = cfg.multistage, cfg.retrieval
    guarded = None if llm is None else (llm if isinstance(llm, SerializedLLM) else SerializedLLM(llm))
    if index is not None and embedder is not None:
        check_compatible(index.manifest, embedder.model_id, embedder.dim)
    if embedder is not None and rc.embedding_cache_texts and not isinstance(embedder, CachedEmbedder):
        embedder = CachedEmbedder(embedder, rc.embedding_cache_texts)
    dual = None
    if index is not None and guarded is not None and embedder is not None:
        dual = QueryPipeline(index, guarded, embedder, rc, reranker=build_reranker(cfg.rerank))
    if dual is not None:
        limits = dual.limits
    else:
        context_length = rc.context_length or (guarded.max_model_len if guarded else None) or DEFAULT_CONTEXT_LENGTH
        limits = context_limits(int(context_length), rc.answer_reserve_tokens, rc.answer_max_tokens)
    prompts = load_multistage_prompts(ms.prompt_version)
    logic = intent = gate = None
    walk = None
    if dual is not None and index is not None and guarded is not None and embedder is not None:
        parts = parts or build_parts(index, guarded, embedder, cfg)
        relations: list[str] = []
        if ms.planner_relation_hints:
            try:
                relations = [k for k in index.graph.top_relation_keywords(ms.planner_relation_hints) if k.strip()]
            except Exception as exc:  # noqa: BLE001 - a hint, not a requirement
                log.warning("the planner goes without relation hints: %s: %s", type(exc).__name__, exc)
                relations = []
        if parts.planner is not None and parts.executor is not None:
            logic = LogicFormStep(
                parts.planner,
                parts.executor,
                parts.verifiers,
                guarded,
                index.graph,
                limits,
                ms,
                prompts,
                relations=relations,
                temperature=rc.temperature,
                guards=[guarded],
            )
        if parts.graph_retriever is not None:
            walk = GraphWalkStep(parts.graph_retriever, index.graph)
        if ms.intent_enabled:
            intent = IntentClassifier(
                guarded, prompts, use_llm=ms.intent_use_llm, kb_description=ms.knowledge_base_description
            )
        if ms.refusal_enabled:
            gate = RefusalGate.for_index(index, embedder, ms)
    elif index is not None and embedder is not None:
        # No LLM: the learned walk still runs (mode graphflow makes no LLM call), so the CLI need not start one.
        retriever = parts.graph_retriever if parts is not None else build_graph_retriever(index, embedder, cfg)
        if retriever is not None:
            walk = GraphWalkStep(retriever, index.graph)
    versions = {
        "multistage": prompts.version_hash,
        "logic": load_logic_prompts().version_hash,
        "query": dual.prompts.version_hash if dual is not None else "",
    }
    return QueryFlow(
        mode=mode,
        llm=guarded,
        limits=limits,
        temperature=rc.temperature,
        dual=dual,
        index=index,
        embedder=embedder,
        logic=logic,
        walk=walk,
        intent=intent,
        refusal_gate=gate,
        cfg=ms,
        prompts=prompts,
        prompt_versions=versions,
    )


def build_reranker(cfg: RerankConfig) -> "Reranker | None":
    """The configured reranker; None when reranking is off (``rerank.backend: none``)."""
    match cfg:
        case NoRerankerConfig():
            return None
        case OverlapRerankerConfig():
            from hxd2_ray.rerank.overlap import OverlapReranker

            return OverlapReranker(cfg.model_id)
        case FlagRerankerConfig():
            from hxd2_ray.rerank.flag_reranker import FlagRerankerBackend

            return FlagRerankerBackend(cfg)
    raise TypeError(f"no reranker backend for {type(cfg).__name__}")
