"""Ray Serve application of hxd2: ``serve.app:build_app`` (see :mod:`serve.app` and :mod:`serve.deployments`).

Where things are: :mod:`app` builds the application from the typed builder arguments and the hxd2 config;
:mod:`deployments` holds the deployments (Ingress, Retriever, LLM, Embedder and the flow's parts). The ingress side:
:mod:`api` is the HTTP app (OpenAI-compatible chat completions with SSE streaming, ``/v1/query``, ``/v1/models``,
``/healthz``), with :mod:`openapi` (its OpenAPI document), :mod:`index_routes` (the routes that read a served index:
a chunk, the graph around entities, statistics) and :mod:`web_ui` (the web UI's page at ``/ui``, from the static
files in ``ui/``); :mod:`front_door` runs in Serve's HTTP proxy, in front of the Ingress replicas (arrival time,
answers for a lost Ingress); :mod:`auth` checks bearer API keys and request sizes, with :mod:`tenants` (keys scoped to
indexes, with budgets, from a keys file), :mod:`rate_limit` (a token bucket per key), :mod:`tenant_gate` (a limited
tenant's budgets and the audit log) and :mod:`budgets` (the budget counts shared by the Ingress replicas);
:mod:`retriever_client` is the Ingress's client of the Retriever, with :mod:`admission` (a query that would miss its
deadline refused at once) and :mod:`readiness` (whether the application has lately been able to answer). The
Retriever's side: :mod:`live_indexes` (a replica's served indexes, each following its generations),
:mod:`index_views` (what the web UI reads of an open index besides answers), :mod:`warm_up` (a Retriever replica's
first question per index). Shared: :mod:`schemas` (the request, response and builder-argument models),
:mod:`payloads` (what the Ingress and the Retriever hand each other), :mod:`handles` (adapters that give the
library's LLM, Embedder and flow-part seams a Serve handle), :mod:`metrics` and :mod:`replica_failures` (Prometheus
metrics). The ingress side never imports the deployment side (open indexes, the Retriever, the parts, the models;
an import-linter contract), and nothing is imported here: ``import serve.auth`` stays light.
"""
