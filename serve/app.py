"""Serve application builder: ``import_path: serve.app:build_app`` in a Serve config file, or ``hxd2 serve``.

``build_app(args)`` takes the typed :class:`~serve.schemas.ServeAppArgs` (Serve validates the config file's
``args`` block into it) and returns the bound application::

    Ingress(Retriever(LLM, Embedder[, LogicPlanner, LogicExecutor, LogicVerifier]))

(no Embedder deployment with ``args.embedder: in_replica``: the Retriever and LogicExecutor replicas embed).

The hxd2 config (``args.config`` + ``args.overrides``, or ``args.config_data``) is read and validated here, at
build time, and handed to the deployments as data, so replicas never need the file. API keys are *not* read
here: the Ingress replica reads them from its environment or secrets file, so they never appear in the Serve
config, the controller's checkpoint or the dashboard.

Deployment sizing (replicas, autoscaling, max_ongoing_requests, max_queued_requests, resources) has defaults in
:mod:`serve.deployments`; a Serve config file's ``deployments:`` list overrides them by name (``Ingress``,
``Retriever``, ``LLM``, ``Embedder``, ``LogicPlanner``, ``LogicExecutor``, ``LogicVerifier``), and
``args.deployment_options`` does the same when the app is built in code.

Note: no ``from __future__ import annotations`` here; Serve reads ``build_app``'s parameter annotation as a
class to validate the args into the pydantic model.
"""

import os
from typing import Any, Union

from ray.serve import Application

from hxd2_ray.config import HxdConfig, load_config, validate_config
from serve.deployments import (
    EmbedderServer,
    Ingress,
    LLMServer,
    LogicExecutor,
    LogicPlanner,
    LogicVerifier,
    Retriever,
)
from serve.schemas import ServeAppArgs

DEPLOYMENTS = {d.name: d for d in (Ingress, Retriever, LLMServer, EmbedderServer, LogicPlanner, LogicExecutor,
                                   LogicVerifier)}


def load_hxd_config(args: ServeAppArgs) -> HxdConfig:
    if args.config_data is not None and args.config is not None:
        raise ValueError("give either config (a file) or config_data (a mapping), not both")
    if args.config_data is not None:
        base = validate_config(dict(args.config_data), source="args.config_data")
        if not args.overrides:
            return base
        # Overrides are applied by load_config on a file's data; reuse it on the mapping through a temp file.
        import tempfile

        import yaml

        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
            yaml.safe_dump(base.model_dump(mode="json"), fh)
        try:
            return load_config(fh.name, args.overrides)
        finally:
            os.unlink(fh.name)
    return load_config(args.config, args.overrides)


def _resolve(location: str) -> str:
    """Local index folders become absolute (replicas may run in another working directory)."""
    if "://" in location:
        return location
    return os.path.abspath(os.path.expanduser(location))


def _options(deployment: Any, args: ServeAppArgs, extra: dict[str, Any] | None = None) -> Any:
    opts = dict(extra or {})
    opts.update(args.deployment_options.get(deployment.name, {}))
    return deployment.options(**opts) if opts else deployment


def build_app(args: Union[ServeAppArgs, dict]) -> Application:
    """The hxd2 Serve application (see the module docstring)."""
    if not isinstance(args, ServeAppArgs):
        args = ServeAppArgs.model_validate(args)
    unknown = sorted(set(args.deployment_options) - set(DEPLOYMENTS))
    if unknown:
        raise ValueError(f"deployment_options for unknown deployments {unknown}; valid: {sorted(DEPLOYMENTS)}")
    if args.embedder == "in_replica" and "Embedder" in args.deployment_options:
        raise ValueError("deployment_options name the Embedder, but args.embedder is in_replica (no Embedder "
                         "deployment): drop the Embedder entry or set embedder: deployment")
    cfg = load_hxd_config(args)
    cfg_json = cfg.model_dump(mode="json")
    indexes = {name: _resolve(loc) for name, loc in args.indexes.items()}

    llm_extra: dict[str, Any] = {}
    if cfg.llm.backend == "vllm":
        # GPUs per engine replica from the hxd2 config (0 on CPU builds; tensor_parallel_size on GPUs).
        gpus = float(cfg.ray.gpus_per_ner_actor)
        cpus = max(1.0, float(cfg.ray.cpus_per_ner_actor))
        llm_extra["ray_actor_options"] = {"num_cpus": cpus, "num_gpus": gpus} if gpus else {"num_cpus": cpus}
        llm_extra["max_ongoing_requests"] = max(64, cfg.llm.max_num_seqs)
    llm = _options(LLMServer, args, llm_extra).bind(cfg_json["llm"], args.scripted.model_dump())
    embedder = (None if args.embedder == "in_replica"
                else _options(EmbedderServer, args).bind(cfg_json["embedding"], args.embed_batch.model_dump()))
    stages: dict[str, Any] = {}
    if args.logic:
        stages = {
            "planner": _options(LogicPlanner, args).bind(cfg_json, llm),
            "executor": _options(LogicExecutor, args).bind(cfg_json, indexes, llm, embedder),
            "verifier": _options(LogicVerifier, args).bind(cfg_json, llm),
        }
    retriever = _options(Retriever, args, {"max_ongoing_requests": args.pipeline_threads}).bind(
        cfg_json, indexes, llm, embedder, args.pipeline, args.pipeline_threads, stages)
    settings = {
        "indexes": list(indexes), "default_index": args.default, "request_deadline_s": args.request_deadline_s,
        "retry_after_s": args.retry_after_s, "max_body_bytes": args.max_body_bytes,
        "max_question_chars": args.max_question_chars, "auth": args.auth, "api_keys_env": args.api_keys_env,
        "api_keys_file": args.api_keys_file,
    }
    return _options(Ingress, args).bind(retriever, settings)
