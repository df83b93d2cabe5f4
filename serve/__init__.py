"""Ray Serve application of hxd2: ``serve.app:build_app`` (see :mod:`serve.app` and :mod:`serve.deployments`).

Modules: :mod:`serve.app` (typed app builder), :mod:`serve.deployments` (Ingress, Retriever, LLM, Embedder and
the optional logic-form stages, plus the HTTP API and metrics), :mod:`serve.handles` (handle adapters that give
the sync pipeline the LLMClient / Embedder protocols), :mod:`serve.schemas` (request/response and builder-args
models), :mod:`serve.auth` (API keys and body limits). Nothing is imported here: ``import serve.auth`` stays light.
"""
