"""The HTTP ingress deployment: the FastAPI app of :mod:`serve.api` over the Retriever's handle."""

from __future__ import annotations

import logging
from typing import Any

from ray import serve

from serve.api import ApiSettings, make_api
from serve.handles import (
    over,
)
from serve.metrics import Metrics
from serve.replica_failures import HEALTH_CHECK_PERIOD_S
from serve.retriever_client import RetrieverBackend

log = logging.getLogger("hxd2.serve")


@serve.deployment(
    name="Ingress",
    max_ongoing_requests=64,
    max_queued_requests=128,
    backpressure_config={"retry_after_s": 1},
    ray_actor_options={"num_cpus": 0.25},
    health_check_period_s=HEALTH_CHECK_PERIOD_S,
)
@serve.ingress()
class Ingress:
    """HTTP ingress: OpenAI-compatible chat completions (SSE streaming), /v1/query, /v1/models, /healthz, the
    index views (/v1/indexes/...) and the web UI (/ui)."""

    def __init__(self, retriever: Any, settings: dict[str, Any]):
        from serve.auth import ApiKeys, AuthConfigError, load_api_keys
        from serve.budgets import ActorBudgets
        from serve.tenant_gate import AuditLog
        from serve.tenants import ReloadingKeys, TenantKeys

        self.settings = ApiSettings(
            indexes=tuple(settings["indexes"]),
            default_index=settings["default_index"],
            request_deadline_s=float(settings["request_deadline_s"]),
            retry_after_s=int(settings["retry_after_s"]),
            max_body_bytes=int(settings["max_body_bytes"]),
            max_question_chars=int(settings["max_question_chars"]),
            rate_limit_per_key=settings.get("rate_limit_per_key"),
            rate_limit_burst=int(settings.get("rate_limit_burst", 20)),
        )
        self.keys: Any = None
        if settings.get("auth", True):
            keys = load_api_keys(settings.get("api_keys_env"), settings.get("api_keys_file"))
            if settings.get("keys_file"):
                # Tenants from the keys file, the plain keys beside them as the one tenant that sees every index.
                plain = TenantKeys.of_plain_keys(keys) if keys else None
                self.keys = ReloadingKeys(settings["keys_file"], plain, poll_s=float(settings.get("keys_poll_s", 2.0)))
                log.info("ingress: %d tenant key(s) from %s", len(self.keys), settings["keys_file"])
            elif not keys:
                raise AuthConfigError(
                    f"auth is on but no API key is configured: set ${settings.get('api_keys_env')} (comma-separated)"
                    ", api_keys_file or keys_file on the replicas, or set auth: false for a local-only server"
                )
            else:
                self.keys = ApiKeys(keys)
                log.info("ingress: %d API key(s) loaded", len(self.keys))
        else:
            log.warning("ingress: auth is OFF (auth: false); bind to 127.0.0.1 only")
        transport = settings.get("transport", "grpc")
        self.backend = RetrieverBackend(over(retriever, transport), self.settings.retry_after_s)
        self.metrics = Metrics()
        # Tenants' budgets hold across the Ingress replicas: one ledger per application, a named Ray actor.
        self.budgets = (
            ActorBudgets(budget_ledger(serve.get_replica_context().app_name)) if settings.get("keys_file") else None
        )
        self.audit = (
            AuditLog(settings["audit_log"], bool(settings.get("audit_questions")))
            if settings.get("audit_log")
            else None
        )

    def __serve_build_asgi_app__(self) -> Any:
        return make_api(self.backend, self.settings, self.keys, self.metrics, self.budgets, self.audit)


def budget_ledger(app_name: str) -> Any:
    """The application's :class:`~serve.budgets.BudgetLedger` actor, created by the first replica that asks.

    Detached, so the counts outlive any one Ingress replica; one call at a time (``max_concurrency=1``), so the
    counts need no lock. It uses no CPU of its own (``num_cpus=0``): a few dictionary updates per request."""
    import ray

    from serve.budgets import BudgetLedger

    ledger = ray.remote(BudgetLedger).options(
        name=f"hxd2-budgets-{app_name}",
        namespace="hxd2",
        lifetime="detached",
        get_if_exists=True,
        num_cpus=0,
        max_concurrency=1,
    )
    return ledger.remote()
