"""How a Retriever replica composes the query flow: its parts as handles of the other deployments (or built
in the replica), each index's configuration from its manifest, and which mode a fallback names."""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from typing import Any, Callable

from hxd2_ray.config import HxdConfig
from serve.handles import (
    HandleEmbedder,
    HandleGraphRetriever,
    HandleLLM,
    HandlePlanExecutor,
    HandlePlanner,
    HandleVerifier,
)

log = logging.getLogger("hxd2.serve")


@dataclass
class PipelineContext:
    """What a pipeline factory gets inside a Retriever replica: one open index, the adapters, the parts."""

    index_name: str
    index: Any  # hxd2_ray.retrieval.OpenIndex
    llm: HandleLLM
    embedder: Any  # HandleEmbedder, or the embedder itself when args.embedder is in_replica
    cfg: HxdConfig
    parts: Any = None  # FlowParts of handle adapters; None: the parts run in this replica
    mode: str = "auto"  # the default mode of a request that names none


def embedder_for(handle: Any, cfg: HxdConfig) -> Any:
    """The Embedder deployment behind its adapter, or (no handle: ``args.embedder`` is in_replica) the configured
    embedder built in this replica."""
    if handle is None:
        from hxd2_ray.wiring import build_embedder

        return build_embedder(cfg.embedding)
    return HandleEmbedder(handle, cfg.embedding)


def default_pipeline(ctx: PipelineContext) -> Any:
    """The query flow, exactly as the CLI and the evaluation job build it."""
    from hxd2_ray.wiring import build_pipeline

    return build_pipeline(ctx.mode, ctx.index, ctx.llm, ctx.embedder, ctx.cfg, ctx.parts)


def flow_parts(
    handles: dict[str, Any] | None,
    index_name: str,
    index: Any = None,
    embedder: Any = None,
    cfg: HxdConfig | None = None,
) -> Any:
    """The flow's parts as adapters over the part deployments' handles (None: build them in this replica). The
    GraphFlow retriever is there only when ``cfg`` (the index's, see :func:`configs_per_index`) has a policy: an
    adapter over the GraphWalker deployment (``handles["walker"]``), or, in an app bound without one, the
    retriever itself built in this replica."""
    if not handles:
        return None
    from hxd2_ray.retrieval.parts import FlowParts

    verifier = handles["verifier"]
    return FlowParts(
        planner=HandlePlanner(handles["planner"]),
        executor=HandlePlanExecutor(handles["executor"], index_name),
        verifiers={mode: HandleVerifier(verifier, mode) for mode in ("pre", "post")},
        graph_retriever=_graph_retriever(handles, index_name, index, embedder, cfg),
    )


def _graph_retriever(handles: dict[str, Any], index_name: str, index: Any, embedder: Any, cfg: HxdConfig | None) -> Any:
    if cfg is None or cfg.graphflow.policy is None:
        return None  # mode graphflow then says it needs a policy
    if handles.get("walker") is not None:
        return HandleGraphRetriever(handles["walker"], index_name)
    if index is None:
        return None
    from hxd2_ray.wiring import build_graph_retriever

    return build_graph_retriever(index, embedder, cfg)


def configs_per_index(cfg: HxdConfig, indexes: dict[str, Any]) -> dict[str, HxdConfig]:
    """The config each served index is queried with. A GraphFlow policy (``graphflow.policy``) is trained for one
    index: the others are served without it (their mode graphflow says it needs a policy); a policy that belongs
    to none of them is an error, as it is for the CLI."""
    policy = cfg.graphflow.policy
    if policy is None or len(indexes) < 2:
        return {name: cfg for name in indexes}
    from hxd2_ray.errors import IndexMismatchError
    from hxd2_ray.graphflow.policy import read_policy_meta

    owner = read_policy_meta(policy).index_fingerprint
    mine = [name for name, index in indexes.items() if index.manifest.fingerprint == owner]
    if not mine:
        raise IndexMismatchError(
            f"the GraphFlow policy at {policy} was trained on index {owner}, none of the served "
            f"indexes ({', '.join(indexes)}); train one with hxd2 graphflow train --index ..."
        )
    without = cfg.model_copy(update={"graphflow": cfg.graphflow.model_copy(update={"policy": None})})
    log.info("GraphFlow policy %s serves index %s only", policy, ", ".join(mine))
    return {name: cfg if name in mine else without for name in indexes}


@dataclass(frozen=True)
class Manifested:
    """What :func:`configs_per_index` reads of an index (its manifest), without opening (or copying) it."""

    manifest: Any


def manifests_of(locations: dict[str, str], cfg: HxdConfig) -> dict[str, Manifested]:
    from hxd2_ray.index_store.manifest import read_manifest
    from hxd2_ray.ingest.sources import resolve_filesystem

    out = {}
    for name, location in locations.items():
        fs, path = resolve_filesystem(location, cfg.s3)
        out[name] = Manifested(read_manifest(path, filesystem=fs))
    return out


@dataclass
class ServedIndex:
    """What a Retriever replica reads one generation of an index through."""

    pipeline: Any
    corpus_root: str  # the folder every local document lies under: answers name documents relative to it

    def close(self) -> None:
        close = getattr(self.pipeline, "close", None)
        if callable(close):
            close()


def import_string(path: str) -> Callable[..., Any]:
    module, sep, name = path.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"import path {path!r} must look like 'package.module:function'")
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def fallback_kind(reason: str | None) -> str | None:
    """A bounded label for the fallbacks metric: the reason up to its first colon ("plan failed", "timeout", "the
    pre-check verifier said no")."""
    if not reason:
        return None
    return reason.split(":", 1)[0].strip()[:48] or "fallback"
