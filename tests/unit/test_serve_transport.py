"""``args.transport``: how the deployments call each other. The handles every deployment receives are set to it
(:func:`serve.handles.over`), and ``build_app`` hands it to each deployment that calls another."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from serve.handles import TRANSPORTS, over
from serve.schemas import ServeAppArgs


class RecordingHandle:
    def __init__(self) -> None:
        self.options_calls: list[dict[str, Any]] = []

    def options(self, **kwargs: Any) -> "RecordingHandle":
        self.options_calls.append(kwargs)
        return RecordingHandle()


def test_grpc_makes_by_value_handles_and_actor_keeps_the_handle():
    handle = RecordingHandle()
    direct = over(handle, "grpc")
    assert direct is not handle and handle.options_calls == [{"_by_reference": False}]
    plain = RecordingHandle()
    assert over(plain, "actor") is plain and plain.options_calls == []
    assert over(None, "grpc") is None  # no Embedder deployment (args.embedder: in_replica)


def test_an_unknown_transport_is_refused_with_the_valid_ones():
    with pytest.raises(ValueError, match="grpc, actor"):
        over(RecordingHandle(), "http")
    assert TRANSPORTS == ("grpc", "actor")
    assert ServeAppArgs(indexes={"sample": "/x"}).transport == "grpc"
    with pytest.raises(ValidationError, match="'grpc' or 'actor'"):
        ServeAppArgs(indexes={"sample": "/x"}, transport="http")


def test_build_app_hands_the_transport_to_every_deployment_that_calls_another(monkeypatch):
    import serve.app as app_module

    monkeypatch.setattr(app_module, "check_local_indexes", lambda indexes, cfg: None)  # no index on disk here
    app = app_module.build_app(
        {
            "indexes": {"tiny": "/nonexistent/index"},
            "transport": "actor",
            "config_data": {"llm": {"backend": "scripted"}, "embedding": {"backend": "hashing", "dim": 64}},
        }
    )

    def bound(app: Any) -> Any:  # Serve's bound-app structure, read-only
        return app._bound_deployment

    ingress = bound(app)
    retriever = bound(ingress.init_args[0])
    assert ingress.init_args[1]["transport"] == "actor"
    assert retriever.init_args[-1] == "actor"
    parts = retriever.init_args[4]
    assert {name: bound(part).init_args[-1] for name, part in parts.items()} == {
        "planner": "actor",
        "executor": "actor",
        "verifier": "actor",
    }
