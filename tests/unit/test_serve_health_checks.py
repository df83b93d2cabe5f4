"""Every deployment is health-checked every HEALTH_CHECK_PERIOD_S: Serve replaces a dead replica only once a check
finds it gone, and at Serve's default of 10 s a killed Retriever kept queries waiting past a 10 s deadline
(tests/integration/test_serve_overload.py measures the whole)."""

from __future__ import annotations

from serve.app import DEPLOYMENTS
from serve.replica_failures import HEALTH_CHECK_PERIOD_S


def test_every_deployment_is_checked_often_enough_to_replace_a_lost_replica_within_a_deadline():
    # Serve has no public accessor for the period: the deployment config it will apply.
    periods = {name: d._deployment_config.health_check_period_s for name, d in DEPLOYMENTS.items()}
    assert HEALTH_CHECK_PERIOD_S <= 2.0
    assert periods == dict.fromkeys(DEPLOYMENTS, HEALTH_CHECK_PERIOD_S), periods
    assert {"Ingress", "Retriever", "LLM", "Planner", "Verifier"} <= set(periods)
