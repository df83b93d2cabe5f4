"""A fault-injecting stand-in for an OpenAI-protocol server, for the unit tests of ``llm.backend: openai``.

A real HTTP server on 127.0.0.1 (``http.server`` in a thread) that speaks ``GET /v1/models`` and
``POST /v1/chat/completions`` (whole, and streamed as server-sent events). Each chat request takes the next
fault from ``faults`` (then answers normally):

* ``"429"`` / ``"500"``: that status, with ``Retry-After: 0``;
* ``"timeout"``: no answer for ``hang_s`` seconds (longer than the client's timeout);
* ``"truncated"``: a body cut off mid-JSON (Content-Length promises more), then the connection closes;
* ``"off_schema"``: a 200 whose message is not JSON.

``persistent`` maps a text to a fault for every request whose messages contain it.

A normal answer is ``reply(request_body)``: by default JSON when the request has a ``response_format``, else
``"echo: <last user message>"``. Every request is recorded (path, headers, body) with the peak number in flight.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

DEFAULT_JSON_REPLY = {"entities": [], "relations": [], "content_keywords": []}


def default_reply(body: dict[str, Any]) -> str:
    if body.get("response_format"):
        return json.dumps(DEFAULT_JSON_REPLY)
    users = [m["content"] for m in body.get("messages", []) if m.get("role") == "user"]
    return f"echo: {users[-1] if users else ''}"


class StubOpenAIServer:
    def __init__(
        self,
        *,
        model: str = "stub-model",
        faults: list[str] | None = None,
        reply: Callable[[dict[str, Any]], str] = default_reply,
        hang_s: float = 3.0,
        delay_s: float = 0.0,
        reject_response_format: bool = False,
        persistent: dict[str, str] | None = None,
    ) -> None:
        self.model = model
        self.faults = list(faults or [])
        self.persistent = dict(persistent or {})
        self.reply = reply
        self.hang_s = hang_s
        self.delay_s = delay_s  # each normal answer waits this long (to see requests overlap)
        self.reject_response_format = reject_response_format
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.peak_in_flight = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"].endswith("/chat/completions")]

    def __enter__(self) -> "StubOpenAIServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _next_fault(self, body: dict[str, Any]) -> str:
        text = json.dumps(body.get("messages", []))
        for needle, fault in self.persistent.items():
            if needle in text:
                return fault
        with self._lock:
            return self.faults.pop(0) if self.faults else ""

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                stub.requests.append({"path": self.path, "headers": dict(self.headers), "body": None})
                if self.path.rstrip("/").endswith("/models"):
                    self._json(
                        200,
                        {
                            "object": "list",
                            "data": [{"id": stub.model, "object": "model", "created": 0, "owned_by": "stub"}],
                        },
                    )
                else:
                    self._json(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                stub.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                with stub._lock:
                    stub.in_flight += 1
                    stub.peak_in_flight = max(stub.peak_in_flight, stub.in_flight)
                try:
                    self._chat(body)
                finally:
                    with stub._lock:
                        stub.in_flight -= 1

            def _chat(self, body: dict[str, Any]) -> None:
                fault = stub._next_fault(body)
                if fault in ("429", "500"):
                    self._json(int(fault), {"error": {"message": f"injected {fault}"}}, {"Retry-After": "0"})
                    return
                if fault == "timeout":
                    time.sleep(stub.hang_s)
                    return
                if stub.reject_response_format and body.get("response_format"):
                    self._json(400, {"error": {"message": "response_format is not supported"}})
                    return
                if stub.delay_s:
                    time.sleep(stub.delay_s)
                text = "this is not JSON" if fault == "off_schema" else stub.reply(body)
                if body.get("stream"):
                    self._stream(text)
                    return
                payload = {
                    "id": "chatcmpl-stub",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body.get("model"),
                    "choices": [
                        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
                    ],
                    "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
                }
                if fault == "truncated":
                    data = json.dumps(payload).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self._json(200, payload)

            def _stream(self, text: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                for word in text.split(" "):
                    chunk = {
                        "id": "chatcmpl-stub",
                        "object": "chat.completion.chunk",
                        "created": 0,
                        "model": stub.model,
                        "choices": [{"index": 0, "delta": {"content": word + " "}, "finish_reason": None}],
                    }
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        return Handler
