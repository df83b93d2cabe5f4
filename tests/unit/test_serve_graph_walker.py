"""The GraphWalker deployment's seam without Ray: ``HandleGraphRetriever`` over a fake handle (the request's deadline
goes along, the result comes back, errors propagate), the retriever's own result crosses the handle and is read
without torch, and ``flow_parts`` / ``build_app`` choose the deployment only with a policy."""

from __future__ import annotations

import contextvars
import pickle
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hxd2_ray.config import HxdConfig
from hxd2_ray.retrieval.graph_walk import GraphWalkStep, WalkOutcome
from hxd2_ray.retrieval.run_trace import RunTrace
from serve.handles import (
    DeadlineExceeded,
    HandleGraphRetriever,
    RequestCancelled,
    RequestScope,
    _scope,
)

ROOT = Path(__file__).resolve().parents[2]


class FakeResponse:
    def __init__(self, value: Any = None, error: BaseException | None = None):
        self.value, self.error = value, error
        self.timeouts: list[float | None] = []
        self.cancelled = False

    def result(self, timeout_s: float | None = None) -> Any:
        self.timeouts.append(timeout_s)
        if self.error is not None:
            raise self.error
        return self.value

    def cancel(self) -> None:
        self.cancelled = True


class FakeMethod:
    def __init__(self, response: FakeResponse):
        self.response = response
        self.calls: list[tuple[Any, ...]] = []

    def remote(self, *args: Any) -> FakeResponse:
        self.calls.append(args)
        return self.response


class FakeHandle:
    def __init__(self, response: FakeResponse):
        self.retrieve = FakeMethod(response)


def in_scope(scope: RequestScope | None, fn: Any, *args: Any) -> Any:
    """``fn(*args)`` as a pipeline thread runs it: with the request's scope in its context."""
    ctx = contextvars.copy_context()
    ctx.run(_scope.set, scope)
    return ctx.run(fn, *args)


def graphflow_result() -> Any:
    from hxd2_ray.graphflow.linking import StartNode
    from hxd2_ray.graphflow.results import GraphFlowResult, PathStep, RankedTarget

    start = StartNode(
        node=3, key="e:public_eye", name="The Public Eye", method="exact", score=1.0, mention="The Public Eye"
    )
    return GraphFlowResult(
        question="who directed The Public Eye",
        targets=(
            RankedTarget(
                "e:howard",
                "Howard Franklin",
                "entity",
                0.6180339887,
                (PathStep("The Public Eye", "directed by", "Howard Franklin"),),
            ),
            RankedTarget(
                "c:7",
                "Public Eye (film)",
                "chunk",
                0.25,
                (PathStep("The Public Eye", "~mentions", "Public Eye (film)"),),
                source_id="doc7.md",
            ),
        ),
        starts=(start,),
        results=("e:howard", "c:7", "e:howard"),
        reason="",
        timings_ms={"walk": 1.25},
    )


# ------------------------------------------------------------------------------------------- the adapter


def test_the_adapter_sends_index_question_and_the_request_deadline_and_returns_the_result():
    expected = graphflow_result()
    handle = FakeHandle(FakeResponse(expected))
    walker = HandleGraphRetriever(handle, "movies")
    scope = RequestScope.after(30.0)
    assert in_scope(scope, walker.retrieve, "who directed [The Public Eye]") is expected
    # the request's deadline and generation (none pinned here) travel with it
    assert handle.retrieve.calls == [("movies", "who directed [The Public Eye]", scope.deadline, None, None)]
    (timeout,) = handle.retrieve.response.timeouts
    assert timeout is not None and 29.0 < timeout <= 30.0  # waits at most the time the request has left

    # Outside a request (no scope): no deadline, an unbounded wait.
    assert walker.retrieve("q") is expected
    assert handle.retrieve.calls[-1] == ("movies", "q", None, None, None)
    assert handle.retrieve.response.timeouts[-1] is None


def test_the_deployments_errors_propagate_and_a_passed_deadline_is_a_deadline_error():
    walker = HandleGraphRetriever(FakeHandle(FakeResponse(error=ValueError("no GraphFlow policy for index"))), "x")
    with pytest.raises(ValueError, match="no GraphFlow policy"):
        in_scope(RequestScope.after(30.0), walker.retrieve, "q")

    late = RequestScope(time.time() + 0.05)
    timing_out = FakeHandle(FakeResponse(error=TimeoutError("timed out")))

    def wait_then_retrieve() -> Any:
        time.sleep(0.1)  # the response times out only once the deadline has passed
        return HandleGraphRetriever(timing_out, "x").retrieve("q")

    with pytest.raises(DeadlineExceeded):
        in_scope(late, wait_then_retrieve)

    gone = RequestScope.after(30.0)
    gone.cancel()
    never = FakeHandle(FakeResponse(value="unused"))
    with pytest.raises(RequestCancelled):
        in_scope(gone, HandleGraphRetriever(never, "x").retrieve, "q")
    assert never.retrieve.response.cancelled  # the call was cancelled, not awaited


def test_the_flows_walk_step_records_the_same_trace_through_the_adapter():
    """GraphWalkStep (the flow's caller) over the adapter: the trace, the evidence text and the references' chunk ids
    are those of the retriever's own result; an error of the deployment is a failed walk, not a failed query."""
    result = graphflow_result()
    remote = HandleGraphRetriever(FakeHandle(FakeResponse(pickle.loads(pickle.dumps(result)))), "movies")

    class Local:
        def retrieve(self, question: str, topic: str | None = None) -> Any:
            return result

    outcomes: list[WalkOutcome] = []
    traces: list[dict[str, Any]] = []
    for retriever in (Local(), remote):
        trace = RunTrace(result.question, "graphflow", "en", result.question)
        outcomes.append(GraphWalkStep(retriever, graph=None).run(trace, result.question))  # type: ignore[arg-type]
        traces.append(trace["graphflow"])
    local, served = outcomes
    assert traces[0] == traces[1] == result.to_dict()
    assert served.failure == local.failure == ""
    assert served.entity_names == local.entity_names == ("Howard Franklin",)
    assert served.chunk_ids == local.chunk_ids == ("c:7",)
    assert served.evidence(5).format() == local.evidence(5).format()

    failing = HandleGraphRetriever(FakeHandle(FakeResponse(error=RuntimeError("replica died"))), "movies")
    trace = RunTrace("q", "graphflow", "en", "q")
    outcome = GraphWalkStep(failing, graph=None).run(trace, "q")  # type: ignore[arg-type]
    assert outcome.failure == "exception: RuntimeError: replica died" and not outcome.result.targets


def test_a_walk_result_pickles_and_unpickles_without_torch(tmp_path):
    result = graphflow_result()
    back = pickle.loads(pickle.dumps(result))
    assert back == result and back.ok and back.to_dict() == result.to_dict()
    back.to_dict()["targets"].clear()
    assert back.to_dict() == result.to_dict()  # each call is a fresh record: a trace may change its copy
    data = tmp_path / "walk.pickle"
    data.write_bytes(pickle.dumps(result))
    # What the Retriever replica does with the reply: unpickle it, read it; torch must stay out of that process.
    code = (
        "import pickle, sys; r = pickle.loads(open(sys.argv[1], 'rb').read()); "
        "assert r.targets[0].path[0].relation == 'directed by', r; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(data)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# ------------------------------------------------------------------------------------------- the wiring


def with_policy(policy: str | None) -> HxdConfig:
    cfg = HxdConfig()
    return cfg.model_copy(update={"graphflow": cfg.graphflow.model_copy(update={"policy": policy})})


def test_flow_parts_use_the_walker_deployment_only_for_an_index_with_a_policy():
    from serve.deployments import flow_parts

    handles = {"planner": object(), "executor": object(), "verifier": object(), "walker": FakeHandle(FakeResponse())}
    parts = flow_parts(handles, "movies", None, None, with_policy("/policies/movies"))
    assert isinstance(parts.graph_retriever, HandleGraphRetriever)
    assert parts.graph_retriever.index == "movies" and parts.graph_retriever._handle is handles["walker"]
    # An index served without the policy (configs_per_index took it away): no walk, mode graphflow says why.
    assert flow_parts(handles, "other", None, None, with_policy(None)).graph_retriever is None
    no_walker = {k: v for k, v in handles.items() if k != "walker"}
    assert flow_parts(no_walker, "movies", None, None, with_policy(None)).graph_retriever is None
    assert flow_parts(None, "movies", None, None, with_policy("/policies/movies")) is None  # parts in_replica


def test_build_app_refuses_to_size_a_walker_the_app_would_not_have():
    from serve.app import DEPLOYMENTS, PART_DEPLOYMENTS, build_app

    assert "GraphWalker" in DEPLOYMENTS and "GraphWalker" in PART_DEPLOYMENTS
    args = {
        "indexes": {"movies": "/nonexistent/index"},
        "config_data": {"llm": {"backend": "scripted"}},
        "deployment_options": {"GraphWalker": {"num_replicas": 1}},
    }
    with pytest.raises(ValueError, match="no graphflow.policy"):
        build_app(args)
    with pytest.raises(ValueError, match=r"\['GraphWalker'\], but args.parts is in_replica"):
        build_app({**args, "parts": "in_replica"})
