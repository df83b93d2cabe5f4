"""The HTTP API of the app: OpenAI-compatible chat completions (SSE streaming), ``/v1/query``, ``/v1/models``,
``/healthz``, the index views (:mod:`serve.index_routes`) and the web UI (:mod:`serve.web_ui`); request validation
at the edge, and error and status mapping (the Retriever's payloads: :mod:`serve.payloads`; the Ingress's client
of the Retriever: :mod:`serve.retriever_client`).

``make_api`` builds the ASGI app over a backend (:class:`RetrieverBackend` in Serve, a fake in unit tests), so
everything here is tested without Ray. Every text that enters (a question, a message, a header) is checked once,
here, before any work: what cannot be processed gets a 4xx with a reason, never a 500 after the pipeline ran.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Iterable

from fastapi import Request  # module level: FastAPI resolves the routes' string annotations in these globals

from hxd2_ray.text_validation import find_lone_surrogate
from serve.front_door import ARRIVED_HEADER, arrival_of
from serve.index_routes import INDEX_ROUTES, add_index_routes
from serve.metrics import Metrics
from serve.openapi import DEADLINE_HEADER, positive_seconds
from serve.payloads import ApiError
from serve.rate_limit import KeyRateLimiter
from serve.schemas import ERROR_TYPES
from serve.web_ui import OPEN_UI_PATH, UI_ROUTES, add_ui_routes

log = logging.getLogger("hxd2.serve")


# ============================================================================================ HTTP API


@dataclass(frozen=True)
class ApiSettings:
    indexes: tuple[str, ...]
    default_index: str
    request_deadline_s: float = 120.0
    retry_after_s: int = 1
    max_body_bytes: int = 1 << 20
    max_question_chars: int = 32_000
    rate_limit_per_key: float | None = None  # requests/s per API key in this replica; None: no limit
    rate_limit_burst: int = 20
    model_created: int = field(default_factory=lambda: int(time.time()))


def _sse(data: Any) -> bytes:
    import json

    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


class HttpMetricsMiddleware:
    """Counts every HTTP request by route and status and times it (streams: until their last byte)."""

    def __init__(self, app: Any, metrics: Metrics, routes: Iterable[str]):
        self.app = app
        self.metrics = metrics
        self.routes = frozenset(routes)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :] or "/"
        status = {"code": 500}
        started = time.perf_counter()

        async def send_wrapper(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            # A route with path parameters by its template (the router leaves the route it matched in the scope).
            template = getattr(scope.get("route"), "path", None)
            route = path if path in self.routes else template if template in self.routes else "other"
            tenant = (scope.get("state") or {}).get("tenant")  # by tenant, never by key
            tags = {"route": route, "status": str(status["code"]), "tenant": getattr(tenant, "name", "") or "-"}
            self.metrics.http_requests.inc(tags=tags)
            self.metrics.http_latency.observe((time.perf_counter() - started) * 1000, tags={"route": route})


ROUTES = (
    "/v1/chat/completions",
    "/v1/query",
    "/v1/models",
    "/healthz",
    "/openapi.json",
    "/v1/admin/reload",
    *INDEX_ROUTES,
    *UI_ROUTES,
)


def make_api(
    backend: Any,
    settings: ApiSettings,
    keys: Any,
    metrics: Metrics | None = None,
    budgets: Any = None,
    audit: Any = None,
) -> Any:
    """The ASGI app: FastAPI routes behind the auth/size guard and the HTTP metrics.

    ``backend`` offers ``answer(index, question, trace, deadline, mode)``, ``answer_stream(...)`` (async iterator
    of events), ``index_view(kind, index, params, deadline)`` and ``health()``: a :class:`RetrieverBackend` in
    Serve, a fake in unit tests. ``budgets`` (:mod:`serve.budgets`) holds limited tenants to their budgets;
    ``audit`` (:class:`serve.tenant_gate.AuditLog`) gets a line per request.
    """
    import json

    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse
    from pydantic import ValidationError
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from hxd2_ray import __version__
    from serve import openapi
    from serve.auth import OPEN_PATHS, GuardMiddleware
    from serve.readiness import Readiness
    from serve.schemas import (
        AssistantMessage,
        ChatCompletion,
        ChatCompletionChunk,
        ChatCompletionRequest,
        Choice,
        ChunkChoice,
        Delta,
        ModelCard,
        ModelList,
        QueryRequest,
        QueryResponse,
        Usage,
        completion_id,
        error_body,
    )
    from serve.tenant_gate import TenantGate, record_answer
    from serve.tenants import request_tenant, unknown_index_message

    readiness = Readiness()

    metrics = metrics or Metrics(enabled=False)
    # The document is served (behind the key, like everything but /healthz) for clients and contract tests; no
    # docs UI (it would load scripts from a CDN).
    # /openapi.json is a route of its own (below): the document names only the indexes the request's key may read.
    api = FastAPI(title="hxd2", version=__version__, docs_url=None, redoc_url=None, openapi_url=None)

    @api.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(error_body(exc.message, exc.type, exc.code), status_code=exc.status, headers=exc.headers)

    # The framework's own errors (a query parameter of the wrong type, an unknown path, a wrong method) are error
    # objects like ours, not FastAPI's {"detail": ...}.
    @api.exception_handler(RequestValidationError)
    async def _invalid_parameters(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(
            error_body(f"invalid request: {_problems(exc.errors())}", ERROR_TYPES[422], "invalid_request"),
            status_code=422,
        )

    @api.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(
            error_body(str(exc.detail), ERROR_TYPES.get(exc.status_code, "invalid_request_error")),
            status_code=exc.status_code,
            headers=exc.headers,
        )

    async def parse(request: Request, model: Any) -> Any:
        raw = await request.body()
        try:
            data = json.loads(raw or b"", parse_constant=_not_json)
        except RecursionError:
            raise ApiError(400, "the request body is nested too deeply", code="invalid_json") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise ApiError(400, f"the request body is not valid JSON: {exc}", code="invalid_json") from None
        if not isinstance(data, dict):
            raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
        check_text(data)
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise ApiError(422, f"invalid request: {_problems(exc.errors())}", code="invalid_request") from None

    def deadline_of(request: Request) -> float:
        seconds = settings.request_deadline_s
        asked = request.headers.get(DEADLINE_HEADER)
        if asked is not None:
            value = positive_seconds(asked)  # sent empty, it is refused
            if value is None:
                raise ApiError(
                    400,
                    f"{DEADLINE_HEADER} must be a positive, finite number of seconds; got {asked[:40]!r}",
                    code="invalid_deadline",
                )
            seconds = min(seconds, value)
        # From the arrival at Serve's proxy (serve/front_door.py), not here: it may have waited there for a replica.
        return arrival_of(request.headers.get(ARRIVED_HEADER), time.time()) + seconds

    def check_question(request: Request, index: str, question: str) -> None:
        tenant = request_tenant(request)
        if index not in settings.indexes or not tenant.may_read(index):
            raise ApiError(404, unknown_index_message(index, tenant, settings.indexes), code="model_not_found")
        if not question.strip():
            raise ApiError(400, "the question is empty: send a user message with text", code="empty_question")
        if len(question) > settings.max_question_chars:
            raise ApiError(
                413,
                f"the question has {len(question):,} characters, over the limit of {settings.max_question_chars:,}",
                code="question_too_long",
            )

    @api.get(
        "/healthz",
        operation_id="health",
        summary="Readiness (no key needed): 200 once the application can answer; ?deep=true also names the served "
        "generations (key needed)",
        response_model=None,
        responses=openapi.responses(
            openapi.ok_json(
                "Health",
                "Ready: a Retriever replica answers, and it answered one question per index through the LLM, the "
                "embedder and the parts before it took requests (with ?deep=true: the index generations it serves).",
            ),
            401,
            422,
            503,
            s401="?deep=true without a valid key.",
            s422="The deep parameter is not a boolean.",
            s503="Not ready yet (starting: the models load and answer a first question), or the retriever is not "
            "answering.",
        ),
    )
    async def healthz(deep: bool = False) -> dict[str, Any]:
        # Ready means able to answer: a Retriever replica answers only once it has answered a first question per
        # index (serve.warm_up). Without a key (the guard lets only the plain form through) it shows no counter, and
        # a ready answer is remembered for READY_CACHE_S, so probes cost the deployments nothing.
        out: dict[str, Any] = {"status": "ok"}
        if deep or not readiness.fresh():
            try:
                info = await backend.health()
            except Exception as exc:  # noqa: BLE001 - any failure to answer is "not ready", said in the body
                raise ApiError(
                    503,
                    f"not ready: the retriever is not answering yet ({type(exc).__name__}); it answers once the "
                    "models have loaded and answered a first question",
                    code="starting" if not readiness.ever else "not_ready",
                    headers={"Retry-After": str(settings.retry_after_s)},
                ) from None
            readiness.mark()
            if deep:
                out["indexes"] = {name: ix.get("generation") for name, ix in (info.get("indexes") or {}).items()}
        return out

    @api.post(
        "/v1/admin/reload",
        operation_id="reload",
        summary="Switch the served indexes to their newly published generations now",
        response_model=None,
        responses=openapi.responses(
            openapi.ok_json("Reload", "The generation each index is served from now."),
            *openapi.GUARDED,
            503,
            s400="Content-Length is not a number.",
            s413="The declared Content-Length is over the server's byte limit.",
            s503="The retriever is not answering.",
        ),
    )
    async def reload() -> dict[str, Any]:
        try:
            return await backend.reload()
        except Exception as exc:  # noqa: BLE001
            raise ApiError(
                503,
                f"the retriever did not reload: {type(exc).__name__}: {str(exc)[:300]}",
                headers={"Retry-After": str(settings.retry_after_s)},
            ) from None

    @api.get(
        "/v1/models",
        operation_id="listModels",
        summary="The served indexes",
        response_model=None,
        responses=openapi.responses(
            openapi.ok_json("ModelList", "The served indexes, as OpenAI models."),
            *openapi.GUARDED,
            s400="Content-Length is not a number.",
            s413="The declared Content-Length is over the server's byte limit.",
        ),
    )
    async def models(request: Request) -> dict[str, Any]:
        visible = request_tenant(request).visible(settings.indexes)
        cards = [ModelCard(id=name, created=settings.model_created) for name in visible]
        return ModelList(data=cards).model_dump()

    @api.post(
        "/v1/query",
        operation_id="query",
        summary="Answer a question from an index",
        response_model=None,
        openapi_extra=openapi.request_body("QueryRequest"),
        responses=openapi.responses(
            openapi.ok_json("QueryResponse", "The answer, its references and timings."),
            *openapi.GUARDED,
            *openapi.QUESTION,
        ),
    )
    async def query(request: Request) -> dict[str, Any]:
        req = await parse(request, QueryRequest)
        index = req.index or settings.default_index
        check_question(request, index, req.question)
        history = {"history": [m.model_dump() for m in req.history]} if req.history else {}
        result = await backend.answer(
            index, req.question, req.trace, deadline_of(request), req.mode, req.topic, **history
        )
        record_answer(request, index, req.question, result.get("usage"))
        return QueryResponse(
            index=index,
            question=result.get("question", req.question),
            answer=result.get("answer", ""),
            path=result.get("path", "dual_level"),
            mode=result.get("mode"),
            fallback_reason=result.get("fallback_reason"),
            refused=bool(result.get("refused")),
            references=result.get("references", []),
            notices=result.get("notices", []),
            usage=result.get("usage", {}),
            timings_ms=result.get("timings_ms", {}),
            trace=result.get("trace") if req.trace else None,
            generation=result.get("generation"),
        ).model_dump(exclude_none=True)

    @api.post(
        "/v1/chat/completions",
        operation_id="createChatCompletion",
        summary="Answer the last user message from the index named by model (OpenAI-compatible)",
        response_model=None,
        openapi_extra=openapi.request_body("ChatCompletionRequest"),
        responses=openapi.responses(openapi.ok_chat(), *openapi.GUARDED, *openapi.QUESTION),
    )
    async def chat(request: Request) -> Any:
        req = await parse(request, ChatCompletionRequest)
        question = req.question()
        check_question(request, req.model, question)
        deadline = deadline_of(request)
        cid = completion_id()
        # The earlier turns: the question is rewritten to stand alone from them before retrieval.
        history = {"history": req.history()} if req.history() else {}
        if not req.stream:
            result = await backend.answer(req.model, question, req.trace, deadline, req.mode, req.topic, **history)
            usage = result.get("usage", {})
            record_answer(request, req.model, question, usage)
            return ChatCompletion(
                id=cid,
                model=req.model,
                choices=[
                    Choice(
                        message=AssistantMessage(content=result.get("answer", "")),
                        finish_reason=_finish_reason(usage.get("finish_reason")),
                    )
                ],
                usage=Usage.of(usage),
                path=result.get("path"),
                mode=result.get("mode"),
                fallback_reason=result.get("fallback_reason"),
                references=result.get("references"),
                notices=result.get("notices") or None,
                trace=result.get("trace") if req.trace else None,
                generation=result.get("generation"),
            ).model_dump(exclude_none=True)

        events = backend.answer_stream(req.model, question, req.trace, deadline, req.mode, req.topic, **history)
        try:
            first = await events.__anext__()  # errors before the first event still get a real status
        except StopAsyncIteration:
            raise ApiError(502, "the answer stream ended without an answer") from None
        created = int(time.time())
        include_usage = bool(req.stream_options and req.stream_options.include_usage)

        def chunk(delta: Delta, finish: str | None = None, **extra: Any) -> bytes:
            body = ChatCompletionChunk(
                id=cid,
                created=created,
                model=req.model,
                choices=[ChunkChoice(delta=delta, finish_reason=finish)],
                **extra,
            )
            return _sse(body.model_dump(exclude_none=True))

        def error_event(status: int, message: str) -> bytes:
            return _sse(error_body(message, ERROR_TYPES.get(status, "server_error"), status))

        async def sse() -> AsyncIterator[bytes]:
            try:
                yield chunk(Delta(role="assistant", content=""))
                event = first
                while True:
                    kind = event.get("type")
                    if kind == "delta":
                        yield chunk(Delta(content=event["text"]))
                    elif kind == "final":
                        usage = event.get("usage", {})
                        record_answer(request, req.model, question, usage)
                        yield chunk(
                            Delta(),
                            _finish_reason(usage.get("finish_reason")),
                            path=event.get("path"),
                            mode=event.get("mode"),
                            fallback_reason=event.get("fallback_reason"),
                            references=event.get("references"),
                            trace=event.get("trace") if req.trace else None,
                            generation=event.get("generation"),
                        )
                        if include_usage:
                            yield _sse(
                                ChatCompletionChunk(
                                    id=cid, created=created, model=req.model, choices=[], usage=Usage.of(usage)
                                ).model_dump(exclude_none=True)
                            )
                        break
                    elif kind == "error":
                        err = event["error"]
                        yield error_event(int(err.get("status", 500)), err.get("message", "error"))
                        break
                    try:
                        event = await events.__anext__()
                    except StopAsyncIteration:
                        # Ended before its final event: say so, rather than end as if the answer were whole.
                        yield error_event(502, "the answer stream ended before the answer was complete")
                        break
                yield _sse("[DONE]")
            finally:
                await events.aclose()  # on a client disconnect too: cancels the retriever stream → engine abort

        return StreamingResponse(
            sse(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )

    add_index_routes(api, backend, settings, ApiError)
    add_ui_routes(api, ApiError)

    documents: dict[tuple[str, ...], dict[str, Any]] = {}

    def document(indexes: tuple[str, ...] = settings.indexes) -> dict[str, Any]:
        """The OpenAPI document naming ``indexes`` (each tenant's own: its key's document lists no other index)."""
        if indexes not in documents:
            from fastapi.openapi.utils import get_openapi

            base = get_openapi(title=api.title, version=api.version, routes=api.routes)
            documents[indexes] = openapi.build_document(
                base,
                indexes=indexes,
                max_question_chars=settings.max_question_chars,
                max_body_bytes=settings.max_body_bytes,
                open_paths=OPEN_PATHS,
            )
        return documents[indexes]

    api.openapi = document  # type: ignore[method-assign]

    @api.get("/openapi.json", include_in_schema=False)
    async def openapi_document(request: Request) -> JSONResponse:
        return JSONResponse(document(tuple(request_tenant(request).visible(settings.indexes))))

    limiter = (
        KeyRateLimiter(settings.rate_limit_per_key, settings.rate_limit_burst) if settings.rate_limit_per_key else None
    )
    guarded = GuardMiddleware(
        TenantGate(api, budgets, audit),
        keys=keys,
        max_body_bytes=settings.max_body_bytes,
        open_pattern=OPEN_UI_PATH,
        on_reject=lambda status, path: None,
        rate_limiter=limiter,
    )
    return HttpMetricsMiddleware(guarded, metrics, ROUTES)


def check_text(data: Any) -> None:
    """Every string of a request body must be encodable text: a lone surrogate (JSON allows ``\\ud800``) is
    refused here, once, for every route, rather than failing at the end of the pipeline."""
    found = find_lone_surrogate(data, "body")
    if found is not None:
        field, char, _ = found
        raise ApiError(
            400, f"{field} holds a character that is not text ({char}, a lone surrogate)", code="invalid_text"
        )


def _not_json(constant: str) -> Any:
    """``parse_constant`` of the body's parser: NaN and Infinity are Python's, not JSON."""
    raise ValueError(f"{constant} is not a JSON value")


def _problems(errors: Any) -> str:
    """Pydantic's errors (at most ten), one ``where: what`` each."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in list(errors)[:10])


def _finish_reason(reason: str | None) -> str:
    return reason if reason in ("stop", "length", "content_filter") else "stop"
