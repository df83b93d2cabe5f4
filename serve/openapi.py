"""The OpenAPI document of the HTTP API: what each route accepts and every status it can answer with.

The routes read their bodies themselves (to answer 400/413/422 with a reason, and to validate before any work), so
FastAPI cannot see their request models. Each route names its body and its responses with the helpers here, and
:func:`build_document` adds the component schemas (from the pydantic models of :mod:`serve.schemas`: request models
as validated, response models as dumped), the bearer scheme, and what only the deployment knows: the served index
names (the ``model`` of a chat completion, the ``index`` of a query) and the question length limit.

The document is OpenAPI 3.2, the first version that can describe a stream of server-sent events item by item
(``itemSchema``): every event of ``/v1/chat/completions`` with ``"stream": true`` is a completion chunk or an error,
and the last one is ``[DONE]``.
"""

from __future__ import annotations

import copy
import math
import re
from typing import Any

from serve.schemas import ERROR_TYPES

OPENAPI_VERSION = "3.2.0"
BEARER = "bearer"
DEADLINE_HEADER = "x-hxd2-deadline-s"
_DECIMAL = re.compile(r"[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")


def positive_seconds(text: str) -> float | None:
    """A header's positive, finite number of seconds, written as the document says (digits, an optional fraction
    and exponent; not Python's float(): "1_0", " 5", "nan", "inf"); None for anything else."""
    if not _DECIMAL.fullmatch(text):
        return None
    value = float(text)
    return value if math.isfinite(value) and value > 0 else None


_SCHEMAS = "#/components/schemas/"

# What can cause each error status, route by route (the descriptions the document gives).
_ERROR_CAUSES: dict[int, str] = {
    400: "The request cannot be processed: the body is not JSON, is nested too deeply or is not an object; a string "
    "holds a lone surrogate (not text); x-hxd2-deadline-s is not a positive, finite number of seconds; "
    "Content-Length is not a number; the question is blank; or the mode is not available for this index.",
    401: "No API key, or not one of the server's (`Authorization: Bearer <key>`).",
    404: "The model (index) is not served here (GET /v1/models lists them).",
    413: "The body is over the server's byte limit, or the question over its character limit.",
    422: "The body does not match the request schema; the message names the fields.",
    500: "An internal error: a defect of the server, never a property of the request. The message names the "
    "exception type; the server logs it.",
    502: "A backend the answer needs (LLM, embedder, stores) failed after its retries.",
    503: "A deployment is at capacity, or a replica went away: retry after Retry-After seconds.",
    504: "The request's deadline passed (the server's request deadline, or x-hxd2-deadline-s when shorter).",
}

RETRY_AFTER = {
    "description": "Seconds to wait before retrying.",
    "required": True,
    "schema": {"type": "integer", "minimum": 0},
}
WWW_AUTHENTICATE = {
    "description": "The scheme to authenticate with.",
    "required": True,
    "schema": {"type": "string", "const": "Bearer"},
}

# What every route behind the key guard can answer before the route runs (the guard reads the headers first).
GUARDED = (400, 401, 413)
# What a question can end in, beyond the guard's statuses.
QUESTION = (404, 422, 500, 502, 503, 504)


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": _SCHEMAS + name}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def error_response(status: int, description: str | None = None) -> dict[str, Any]:
    """The documented response of one error status: the error body with this status's ``type``, and its headers."""
    schema = {
        "allOf": [
            _ref("ErrorResponse"),
            {
                "type": "object",
                "properties": {"error": {"type": "object", "properties": {"type": {"const": ERROR_TYPES[status]}}}},
            },
        ]
    }
    out: dict[str, Any] = {"description": description or _ERROR_CAUSES[status], "content": _json(schema)}
    if status == 503:
        out["headers"] = {"Retry-After": RETRY_AFTER}
    elif status == 401:
        out["headers"] = {"WWW-Authenticate": WWW_AUTHENTICATE}
    return out


def responses(ok: dict[str, Any], *errors: int, **described: str) -> dict[int | str, dict[str, Any]]:
    """FastAPI ``responses=`` of a route: its 200 and the error statuses it can answer with (``described``:
    ``s503="..."`` gives one status its own description)."""
    out: dict[int | str, dict[str, Any]] = {200: ok}
    for status in sorted(set(errors)):
        out[status] = error_response(status, described.get(f"s{status}"))
    return out


def ok_json(model: str, description: str) -> dict[str, Any]:
    return {"description": description, "content": _json(_ref(model))}


def ok_chat() -> dict[str, Any]:
    """200 of /v1/chat/completions: a completion, or with ``"stream": true`` server-sent events."""
    data = {
        "type": "string",
        "if": {"const": "[DONE]"},
        "then": True,
        "else": {
            "contentMediaType": "application/json",
            "contentSchema": {"anyOf": [_ref("ChatCompletionChunk"), _ref("ErrorResponse")]},
        },
    }
    return {
        "description": 'The answer: a chat.completion, or with "stream": true a stream of server-sent events. Each '
        "event's data is a chat.completion.chunk (the first carries the role; the one with a "
        "finish_reason carries path, mode, references; with stream_options.include_usage a last "
        "chunk carries the usage), or an error object when the answer failed after the stream began "
        "(its code is the HTTP status it would have had); the stream always ends with "
        "`data: [DONE]`.",
        "content": {
            "application/json": {"schema": _ref("ChatCompletion")},
            "text/event-stream": {"itemSchema": {"type": "object", "required": ["data"], "properties": {"data": data}}},
        },
    }


def request_body(model: str) -> dict[str, Any]:
    """``openapi_extra`` of a route whose body is ``model`` (a JSON object), with the deadline header."""
    return {
        "requestBody": {"required": True, "content": _json(_ref(model))},
        "parameters": [
            {
                "name": DEADLINE_HEADER,
                "in": "header",
                "required": False,
                "description": "Seconds this request may take (at most the server's request deadline); 504 after.",
                "schema": {"type": "number", "exclusiveMinimum": 0},
            }
        ],
    }


def component_schemas() -> dict[str, Any]:
    """JSON schemas of the API's models, keyed by name: request models as validated, responses as dumped."""
    from pydantic.json_schema import models_json_schema

    from serve.schemas import (
        ChatCompletion,
        ChatCompletionChunk,
        ChatCompletionRequest,
        ChunkView,
        ErrorResponse,
        GraphView,
        Health,
        IndexStats,
        ModelList,
        QueryRequest,
        QueryResponse,
        Reload,
    )

    models = [(ChatCompletionRequest, "validation"), (QueryRequest, "validation")]
    models += [
        (m, "serialization")
        for m in (
            ChatCompletion,
            ChatCompletionChunk,
            QueryResponse,
            ModelList,
            Health,
            Reload,
            ErrorResponse,
            ChunkView,
            GraphView,
            IndexStats,
        )
    ]
    _, schema = models_json_schema(models, ref_template=_SCHEMAS + "{model}")  # type: ignore[arg-type]
    return dict(schema["$defs"])


def build_document(
    base: dict[str, Any],
    *,
    indexes: tuple[str, ...],
    max_question_chars: int,
    max_body_bytes: int,
    open_paths: frozenset[str],
) -> dict[str, Any]:
    """The served document: FastAPI's paths (``base``, from the routes' declarations) with the components, the
    security scheme and the deployment's names and limits."""
    doc = copy.deepcopy(base)
    doc["openapi"] = OPENAPI_VERSION
    doc["info"]["description"] = (
        "OpenAI-compatible chat completions and a plain query route over GraphRAG indexes. Every route but "
        f"{', '.join(sorted(open_paths))} needs `Authorization: Bearer <key>`. Bodies are JSON objects of at most "
        f"{max_body_bytes:,} bytes; every error is an OpenAI-style error object."
    )
    schemas = component_schemas()
    names = list(indexes)
    schemas["ChatCompletionRequest"]["properties"]["model"]["enum"] = names
    query = schemas["QueryRequest"]["properties"]
    query["index"]["anyOf"] = [{"type": "string", "enum": names}, {"type": "null"}]
    query["question"]["maxLength"] = max_question_chars
    doc.setdefault("components", {})["schemas"] = schemas
    doc["components"]["securitySchemes"] = {
        BEARER: {"type": "http", "scheme": "bearer", "description": "An API key of the server (HXD2_API_KEYS)."}
    }
    doc["security"] = [{BEARER: []}]
    for path, item in doc.get("paths", {}).items():
        for operation in item.values():
            if path in open_paths:
                operation["security"] = []
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "path" and parameter["name"] == "index":  # the views' /v1/indexes/{index}
                    parameter["schema"]["enum"] = names
    return doc
