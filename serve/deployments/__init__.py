"""The Serve deployments: the query flow's parts as a graph of deployments behind one HTTP ingress.

Where things are: :mod:`ingress` is the HTTP ingress (the FastAPI app of :mod:`serve.api` over the Retriever's
handle); :mod:`retriever` the Retriever (opens every served index read-only, following its generations, and runs the
query flow in worker threads for answers, streams and the index views); :mod:`parts` the flow's parts as deployments
of their own (Planner, PlanExecutor, Verifier, GraphWalker); :mod:`models` the LLM (vLLM's async engine) and the
Embedder (``@serve.batch`` across requests); :mod:`wiring` how a Retriever replica composes the query flow (its parts
as handles of the other deployments or built in the replica, each index's config from its manifest). The four
deployment modules never import each other; :mod:`retriever` and :mod:`parts` share :mod:`wiring`, which the
ingress never imports.

Request flow (``serve.app:build_app`` wires it)::

    HTTP ─► proxy ─► Ingress (serve.api: auth, limits, text validation, OpenAI shapes, SSE)
                       │ handle: answer / answer_stream (index, question, trace, deadline, mode),
                       │         index_view (a chunk, the graph around entities, statistics: the web UI's reads)
                       ▼
                     Retriever ×N: opens every index read-only and runs THE query flow
                       │          (hxd2_ray.wiring.build_pipeline, the CLI's and the evaluation job's object),
                       │          in worker threads; dual-level retrieval and the budgeted prompt happen here
                       ├─► Planner ×N    plan(question)            LogicFormPlanner ─┐
                       ├─► PlanExecutor  execute(index, plan)      LogicFormExecutor │ (its own index copies)
                       ├─► Verifier ×N   verify(question, evidence, mode)            ├─► LLM (AsyncVllmEngine:
                       ├─► GraphWalker   retrieve(index, question)  GraphFlow policy  │   continuous batching,
                       ├─► Embedder      embed(texts), @serve.batch                   │   streaming, abort)
                       └─► LLM           complete / stream (keywords, answers) ◄──────┘

The flow reaches every part through the seams of :mod:`hxd2_ray.retrieval.parts` (and the LLM/Embedder seams);
here those are handle adapters (:mod:`serve.handles`), in the CLI the library objects themselves, so the
orchestration is one object in both places. The GraphWalker deployment exists only when the config names a
GraphFlow policy (``graphflow.policy``). ``args.parts: in_replica`` builds the parts inside each Retriever
replica instead; ``args.embedder: in_replica`` embeds there too (a CPU embedder: the hop costs more than batching
across requests saves). Each deployment's replicas, ``max_ongoing_requests`` and autoscaling are in
``configs/serve.yaml`` (and ``cluster/kuberay/rayservice.yaml``).

How streaming flows: vLLM ``AsyncLLM.generate`` (DELTA outputs) ─► ``LLM.stream`` (async generator) ─► Serve
streaming handle ─► ``HandleLLM.stream`` (sync iterator in the flow's thread) ─► the flow's ``answer_stream``
events ─► a queue into the Retriever's event loop ─► ``Retriever.answer_stream`` (async generator) ─► Serve
streaming handle ─► Ingress SSE ``data: {chunk}`` lines ─► client. When the client hangs up, each step cancels
the one below it, down to ``AsyncLLM.abort``.
"""

from __future__ import annotations

from serve.deployments.ingress import Ingress
from serve.deployments.models import EmbedderServer, LLMServer
from serve.deployments.parts import GraphWalkerServer, PlanExecutorServer, PlannerServer, VerifierServer
from serve.deployments.retriever import Retriever
from serve.deployments.wiring import configs_per_index, default_pipeline, flow_parts

__all__ = [
    "EmbedderServer",
    "GraphWalkerServer",
    "Ingress",
    "LLMServer",
    "PlanExecutorServer",
    "PlannerServer",
    "Retriever",
    "VerifierServer",
    "configs_per_index",
    "default_pipeline",
    "flow_parts",
]
