"""The Serve application over the tiny index of the unit tests, with the scripted LLM and the hashing embedder: the
fixture of the serving tests that need their own application (sizes, replicas, latencies of their own)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator

from tests.integration.servers import free_port
from tests.unit.retrieval_fixtures import DIM, build_tiny_index


@contextlib.contextmanager
def served_tiny_app(tmp: Path, name: str, key: str, names: tuple[str, ...] = ("tiny",), **args: Any) -> Iterator[str]:
    """Serves the tiny index as ``tiny`` (or under each of ``names``) on a free port, one API key; ``args`` are the
    app's (``serve.app`` ``build_app``) beside those, ``config_data`` merged over the scripted LLM and the hashing
    embedder. Yields the base URL; Serve is shut down after."""
    from ray import serve

    from serve.app import build_app

    root = build_tiny_index(tmp / "index").root
    keys = tmp / "api_keys"
    keys.write_text(f"{key}\n")
    config = {"llm": {"backend": "scripted"}, "embedding": {"backend": "hashing", "dim": DIM}}
    config.update(args.pop("config_data", {}))
    port = free_port()
    serve.shutdown()  # a Serve left running by an earlier module would keep its own port and ignore this one
    serve.start(http_options={"host": "127.0.0.1", "port": port, "request_timeout_s": 60})
    indexes = {served: str(root) for served in names}
    app = build_app({"indexes": indexes, "config_data": config, "api_keys_file": str(keys), **args})
    serve.run(app, name=name, route_prefix="/")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
