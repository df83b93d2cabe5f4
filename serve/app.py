"""Serve application builder: ``import_path: serve.app:build_app`` in a Serve config file, or ``hxd2 serve``.

``build_app(args)`` takes the typed :class:`~serve.schemas.ServeAppArgs` (Serve validates the config file's
``args`` block into it) and returns the bound application::

    Ingress(Retriever(LLM, Embedder, Planner(LLM), PlanExecutor(LLM, Embedder), Verifier(LLM),
                      GraphWalker(Embedder)))

(no Embedder deployment with ``args.embedder: in_replica``: the Retriever, PlanExecutor and GraphWalker replicas
embed; no part deployments with ``args.parts: in_replica``: the Retriever replicas run the parts; no GraphWalker
without a GraphFlow policy, ``graphflow.policy``).

The hxd2 config (``args.config`` + ``args.overrides``, or ``args.config_data``, or else the config the first index
was built with, from its manifest) is read and validated here, at build time, and handed to the deployments as
data, so replicas never need the file. API keys are *not* read
here: the Ingress replica reads them from its environment or secrets file, so they never appear in the Serve
config, the controller's checkpoint or the dashboard.

Deployment sizing (replicas, autoscaling, max_ongoing_requests, max_queued_requests, resources) has defaults in
:mod:`serve.deployments`; a Serve config file's ``deployments:`` list overrides them by name (``Ingress``,
``Retriever``, ``LLM``, ``Embedder``, ``Planner``, ``PlanExecutor``, ``Verifier``, ``GraphWalker``), and
``args.deployment_options`` does the same when the app is built in code.

Note: no ``from __future__ import annotations`` here; Serve reads ``build_app``'s parameter annotation as a
class to validate the args into the pydantic model.
"""

import os
from typing import Any, Union

from ray.serve import Application

from hxd2_ray.config import HxdConfig, config_from_data, load_config
from hxd2_ray.wiring import check_llm_server
from serve.deployments import (
    EmbedderServer,
    GraphWalkerServer,
    Ingress,
    LLMServer,
    PlanExecutorServer,
    PlannerServer,
    Retriever,
    VerifierServer,
)
from serve.schemas import ServeAppArgs

_ALL: tuple[Any, ...] = (
    Ingress,
    Retriever,
    LLMServer,
    EmbedderServer,
    PlannerServer,
    PlanExecutorServer,
    VerifierServer,
    GraphWalkerServer,
)
DEPLOYMENTS: dict[str, Any] = {d.name: d for d in _ALL}
PART_DEPLOYMENTS = ("Planner", "PlanExecutor", "Verifier", "GraphWalker")
# A Retriever replica's default max_ongoing_requests, per pipeline thread: queries beyond its threads wait in the
# replica (handed a thread at once when one frees) rather than in Serve's router, which polls full replicas with a
# backoff of up to 0.5 s and so leaves freed slots idle under overload.
QUEUED_PER_THREAD = 4


def load_hxd_config(args: ServeAppArgs) -> HxdConfig:
    if args.config_data is not None and args.config is not None:
        raise ValueError("give either config (a file) or config_data (a mapping), not both")
    if args.config_data is not None:
        return config_from_data(dict(args.config_data), args.overrides, source="args.config_data")
    if args.config is not None:
        return load_config(args.config, args.overrides)
    from hxd2_ray.retrieval.query_config import load_query_config

    return load_query_config(_resolve(args.indexes[args.default]), None, args.overrides)


def _resolve(location: str) -> str:
    """Local index folders become absolute (replicas may run in another working directory)."""
    if "://" in location:
        return location
    return os.path.abspath(os.path.expanduser(location))


def check_local_indexes(indexes: dict[str, str], cfg: HxdConfig) -> None:
    """What can be checked before anything is deployed: a local index exists, is complete and was built with the
    configured embedder (otherwise a replica would fail to start and Serve would only say which deployment)."""
    from hxd2_ray.config import embedding_model_id
    from hxd2_ray.errors import IndexMismatchError
    from hxd2_ray.index_store.manifest import check_compatible, read_manifest

    for name, location in indexes.items():
        if "://" in location:
            continue  # read by each replica with its own credentials
        try:
            check_compatible(
                read_manifest(location), embedding_model_id(cfg.embedding), cfg.embedding.dim, cfg.graph.backend
            )
        except IndexMismatchError as exc:
            raise IndexMismatchError(f"index {name!r} at {location}: {exc}") from None


def _options(deployment: Any, args: ServeAppArgs, extra: dict[str, Any] | None = None) -> Any:
    opts = dict(extra or {})
    opts.update(args.deployment_options.get(deployment.name, {}))
    return deployment.options(**opts) if opts else deployment


def build_app(args: Union[ServeAppArgs, dict[str, Any]]) -> Application:
    """The hxd2 Serve application (see the module docstring)."""
    if not isinstance(args, ServeAppArgs):
        args = ServeAppArgs.model_validate(args)
    unknown = sorted(set(args.deployment_options) - set(DEPLOYMENTS))
    if unknown:
        raise ValueError(f"deployment_options for unknown deployments {unknown}; valid: {sorted(DEPLOYMENTS)}")
    if args.embedder == "in_replica" and "Embedder" in args.deployment_options:
        raise ValueError(
            "deployment_options name the Embedder, but args.embedder is in_replica (no Embedder "
            "deployment): drop the Embedder entry or set embedder: deployment"
        )
    sized_parts = sorted(set(PART_DEPLOYMENTS) & set(args.deployment_options))
    if args.parts == "in_replica" and sized_parts:
        raise ValueError(
            f"deployment_options name {sized_parts}, but args.parts is in_replica (no part "
            "deployments): drop those entries or set parts: deployments"
        )
    cfg = load_hxd_config(args)
    if args.parts == "deployments" and cfg.graphflow.policy is None and "GraphWalker" in args.deployment_options:
        raise ValueError(
            "deployment_options name the GraphWalker, but the config has no graphflow.policy (no "
            "GraphWalker deployment): drop the GraphWalker entry or configure a policy"
        )
    cfg_json = cfg.model_dump(mode="json")
    indexes = {name: _resolve(loc) for name, loc in args.indexes.items()}
    check_local_indexes(indexes, cfg)

    llm_extra: dict[str, Any] = {}
    if cfg.llm.backend == "vllm":
        # An engine needs a core of its own; GPUs are the Serve config's (deployments: LLM: ray_actor_options),
        # not the indexing job's NER actor sizing.
        llm_extra["ray_actor_options"] = {"num_cpus": 1.0}
        llm_extra["max_ongoing_requests"] = max(64, cfg.llm.max_num_seqs)
    elif cfg.llm.backend == "openai":
        check_llm_server(cfg.llm)  # a server that is down fails `hxd2 serve` here, before Ray starts
        llm_extra["max_ongoing_requests"] = max(64, cfg.llm.max_concurrency)
    llm = _options(LLMServer, args, llm_extra).bind(cfg_json["llm"], args.scripted.model_dump())
    embedder = (
        None
        if args.embedder == "in_replica"
        else _options(EmbedderServer, args).bind(cfg_json["embedding"], args.embed_batch.model_dump())
    )
    parts: dict[str, Any] = {}
    if args.parts == "deployments":
        parts = {
            "planner": _options(PlannerServer, args).bind(cfg_json, llm, args.transport),
            "executor": _options(PlanExecutorServer, args).bind(
                cfg_json, indexes, llm, embedder, args.transport, poll_s=args.generation_poll_s
            ),
            "verifier": _options(VerifierServer, args).bind(cfg_json, llm, args.transport),
        }
        if cfg.graphflow.policy is not None:  # no policy, no walker (an idle one would only hold resources)
            parts["walker"] = _options(GraphWalkerServer, args).bind(
                cfg_json, indexes, embedder, args.transport, poll_s=args.generation_poll_s
            )
    retriever = _options(Retriever, args, {"max_ongoing_requests": QUEUED_PER_THREAD * args.pipeline_threads}).bind(
        cfg_json,
        indexes,
        llm,
        embedder,
        parts,
        args.pipeline,
        args.pipeline_threads,
        args.mode,
        args.transport,
        poll_s=args.generation_poll_s,
        source_url_prefix=args.source_url_prefix,
    )
    settings = {
        "indexes": list(indexes),
        "default_index": args.default,
        "request_deadline_s": args.request_deadline_s,
        "retry_after_s": args.retry_after_s,
        "max_body_bytes": args.max_body_bytes,
        "max_question_chars": args.max_question_chars,
        "auth": args.auth,
        "api_keys_env": args.api_keys_env,
        "api_keys_file": args.api_keys_file,
        "keys_file": args.keys_file,
        "keys_poll_s": args.keys_poll_s,
        "audit_log": args.audit_log,
        "audit_questions": args.audit_questions,
        "transport": args.transport,
        "rate_limit_per_key": args.rate_limit_per_key,
        "rate_limit_burst": args.rate_limit_burst,
    }
    return _options(Ingress, args).bind(retriever, settings)
