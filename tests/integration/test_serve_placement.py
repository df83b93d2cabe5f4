"""Issue 35: an upscale the cluster cannot place is said once and shown on Ray's metrics endpoint.

A real Serve application whose deployment asks for a resource no node has: Serve keeps its replica starting,
silently. The placement watch ``hxd2 serve`` runs in its wait loop says it (once) and sets the gauge
``hxd2_serve_replicas_unplaced{deployment}``, which Prometheus scrapes from Ray's metrics agent."""

from __future__ import annotations

import time
import urllib.request

import pytest

from tests.integration.servers import free_port

pytestmark = pytest.mark.integration

APP = "placement"


def test_an_unplaceable_replica_is_said_once_and_counted_on_the_metrics_endpoint(ray_local, ray_metrics_url):
    from ray import serve

    from jobs.job_metrics import metric_value, parse_prometheus
    from jobs.serve_placement import PlacementWatch

    @serve.deployment(ray_actor_options={"num_cpus": 0, "resources": {"hxd2_absent_accelerator": 1}})
    class Stuck:
        def __call__(self) -> str:
            return "never"

    options = {"Stuck": {"ray_actor_options": {"num_cpus": 0, "resources": {"hxd2_absent_accelerator": 1}}}}
    serve.start(http_options={"host": "127.0.0.1", "port": free_port()})
    serve.run_many(
        [serve.RunTarget(Stuck.bind(), name=APP, route_prefix=f"/{APP}")],
        wait_for_ingress_deployment_creation=False,
        wait_for_applications_running=False,
    )
    said: list[str] = []
    watch = PlacementWatch(APP, options, said.append, after_s=1.0)
    try:
        found = []
        until = time.monotonic() + 60
        while not found:
            assert time.monotonic() < until, "the unplaced replica was never found"
            time.sleep(1.0)
            found = watch.poll()
        assert found[0].deployment == "Stuck" and found[0].replicas == 1
        for _ in range(3):
            watch.poll()
        assert len(said) == 1 and "hxd2_absent_accelerator 1; free: hxd2_absent_accelerator 0" in said[0], said
        shown = 0.0
        until = time.monotonic() + 60
        while shown < 1:
            assert time.monotonic() < until, "the gauge never reached the metrics endpoint"
            with urllib.request.urlopen(ray_metrics_url, timeout=10) as resp:
                samples = parse_prometheus(resp.read().decode("utf-8"))
            shown = metric_value(samples, "ray_hxd2_serve_replicas_unplaced", deployment="Stuck")
            watch.poll()  # as the wait loop does every few seconds: a gauge not set again expires
            time.sleep(1.0)
    finally:
        serve.shutdown()  # the next module starts Serve on a port of its own
