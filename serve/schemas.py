"""Pydantic models of the HTTP API (OpenAI-compatible chat completions, /v1/query, /v1/models) and of the app
builder's arguments.

Requests are validated here; responses are built with these models and dumped with ``exclude_none``. The
OpenAI shapes follow the public Chat Completions API closely enough for the official ``openai`` client
(streaming and not). Our extensions ride along as extra top-level fields the client ignores: ``references``
and ``path`` on a completion (and on the last chunk of a stream).
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, field_validator, model_validator

from hxd2_ray.retrieval.flow import MODES


def _check_mode(value: str | None) -> str | None:
    if value is not None and value not in MODES:
        raise ValueError(f"unknown mode {value!r}; valid: {', '.join(MODES)}")
    return value


# The validator above checks the name; the published schema lists the names.
ModeName = Annotated[str, WithJsonSchema({"type": "string", "enum": list(MODES)})]


def _integral(value: Any) -> Any:
    """JSON has one number type: 5.0 is the integer 5 (as JSON Schema's "integer" says), 5.5 is not."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


JsonInt = Annotated[int, BeforeValidator(_integral)]

# ------------------------------------------------------------------------------------------ requests
# Strict: a request is accepted exactly when the published schema says it is valid ("stream": "true" is not a
# boolean, "n": true not an integer), so the OpenAPI document is the contract the fuzzing holds the API to.


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)  # name, tool_calls, … are accepted and ignored

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text or "" for p in self.content if p.type in ("text", "input_text"))


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    """OpenAI chat completion request. Sampling fields are accepted and ignored: the answer's generation settings
    come from the server's retrieval config, so every client gets the same grounded behaviour."""

    model_config = ConfigDict(extra="allow", strict=True)

    model: str = Field(..., min_length=1, description="The index to answer from (see GET /v1/models).")
    messages: list[ChatMessage] = Field(..., min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: JsonInt = Field(1, ge=1, le=1, description="Only one choice is produced.")
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: JsonInt | None = None
    max_completion_tokens: JsonInt | None = None
    user: str | None = None
    trace: bool = Field(False, description="Extension: include the query's trace in the response.")
    mode: ModeName | None = Field(
        None, description=f"Extension: the query mode ({', '.join(MODES)}); default: the server's (auto)."
    )
    topic: str | None = Field(
        None,
        min_length=1,
        max_length=1000,
        description="Extension: the question's topic entity when the client knows it (a "
        "benchmark's topic, a selected entity); retrieval and the graph walk start "
        "there instead of linking a start from the text.",
    )

    _mode = field_validator("mode")(_check_mode)

    def question(self) -> str:
        """The question is the last user message (the turns before it are its history)."""
        for message in reversed(self.messages):
            if message.role == "user":
                return message.text()
        return ""

    def history(self) -> list[dict[str, str]]:
        """The user and assistant messages before the last user message: what the question may refer to."""
        last = max((i for i, m in enumerate(self.messages) if m.role == "user"), default=0)
        return [
            {"role": m.role, "content": m.text()}
            for m in self.messages[:last]
            if m.role in ("user", "assistant") and m.text().strip()
        ]


class HistoryMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    role: Literal["user", "assistant"] = Field(..., description="Who said it.")
    content: str = Field(..., max_length=100_000, description="What was said.")


class QueryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    question: str = Field(..., min_length=1, description="The question; it must hold a non-space character.")
    history: list[HistoryMessage] | None = Field(
        None,
        max_length=200,
        description="The conversation before the question, oldest first: the question is rewritten to stand alone "
        "from its latest turns before retrieval (the trace shows the rewrite).",
    )
    index: str | None = Field(None, description="Index name; the default index when omitted.")
    trace: bool = Field(False, description="Include the query's trace in the response.")
    mode: ModeName | None = Field(None, description=f"Query mode ({', '.join(MODES)}); default: the server's (auto).")
    topic: str | None = Field(
        None,
        min_length=1,
        max_length=1000,
        description="The question's topic entity when the client knows it (a "
        "benchmark's topic, a selected entity); retrieval and the graph walk start "
        "there instead of linking a start from the text.",
    )

    _mode = field_validator("mode")(_check_mode)


# ----------------------------------------------------------------------------------------- responses


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    @classmethod
    def of(cls, usage: dict[str, Any] | None) -> "Usage":
        usage = usage or {}
        p, c = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        return cls(prompt_tokens=p, completion_tokens=c, total_tokens=p + c)


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class Choice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: str | None = "stop"


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[Choice]
    usage: Usage
    # extensions
    path: str | None = None
    mode: str | None = None
    fallback_reason: str | None = None
    references: list[dict[str, Any]] | None = None
    notices: list[str] | None = None
    trace: dict[str, Any] | None = None
    generation: str | None = None  # the index generation the answer was read from


class Delta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChunkChoice(BaseModel):
    index: int = 0
    delta: Delta
    finish_reason: str | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None
    path: str | None = None
    mode: str | None = None
    fallback_reason: str | None = None
    references: list[dict[str, Any]] | None = None
    trace: dict[str, Any] | None = None
    generation: str | None = None


class QueryResponse(BaseModel):
    index: str
    question: str
    answer: str
    path: str
    mode: str | None = None
    fallback_reason: str | None = None
    refused: bool = False
    references: list[dict[str, Any]]
    notices: list[str] = []
    usage: dict[str, Any] = {}
    timings_ms: dict[str, float] = {}
    trace: dict[str, Any] | None = None
    generation: str | None = None  # the index generation the answer was read from


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "hxd2"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    indexes: dict[str, str] | None = Field(
        None,
        description="With ?deep=true (and a key): each served index and the generation the retriever replica "
        "that replied serves it from.",
    )


class Reload(BaseModel):
    generations: dict[str, str] = Field(description="Each served index and the generation it is served from now.")


# ------------------------------------------------------------------------- views of an index (the web UI's reads)


class ChunkView(BaseModel):
    """One chunk of a served index, with its document: what a reference points at."""

    index: str
    id: str
    doc_id: str
    doc_title: str
    doc_source_id: str
    doc_source_path: str
    header_path: str
    order: int = Field(..., description="The chunk's place in its document (0 first).")
    language: str
    text: str


class GraphNode(BaseModel):
    key: str = Field(..., description="The entity's merge key (its normalised name).")
    name: str
    type: str
    degree: int
    hops: int = Field(..., description="Relations between it and the nearest asked entity (0: asked).")
    description: str = Field(..., description="The entity's description, cut to a few hundred characters.")


class GraphEdge(BaseModel):
    source: str = Field(..., description="Key of one end (relations are undirected).")
    target: str
    description: str
    keywords: list[str]
    weight: float


class GraphView(BaseModel):
    """The entities asked and what lies within ``hops`` relations of them, at most ``max_nodes`` entities."""

    index: str
    title: str
    center: list[str] = Field(..., description="Keys of the asked entities the index holds.")
    hops: int
    max_nodes: int
    nodes: list[GraphNode]
    edges: list[GraphEdge] = Field(..., description="Every relation among the nodes.")
    not_shown: int = Field(..., description="Entities within reach left out for max_nodes.")
    not_found: list[str] = Field(..., description="Asked names no entity of the index has.")


class IndexStats(BaseModel):
    """What a user checks before trusting an index: counts, degrees, components, the best-connected entities and
    entity types, the build's summary, and the manifest."""

    index: str
    counts: dict[str, int] = Field(..., description="Rows per table: documents, chunks, entities, relations, mentions.")
    degree: dict[str, float] = Field(
        ..., description="Relations per entity: mean, median, max; isolated: entities without one."
    )
    degree_histogram: list[dict[str, int]] = Field(..., description="Entities per degree bin (min, max).")
    components: dict[str, Any] = Field(
        ..., description="Connected components: count, largest sizes, singletons, the largest's share of the entities."
    )
    top_entities: list[dict[str, Any]] = Field(..., description="The best-connected entities (name, key, degree).")
    entity_types: list[dict[str, Any]] = Field(..., description="Entities per type, most common first.")
    build: dict[str, Any] = Field(
        ...,
        description="The last build's summary (documents, quarantined files, "
        "failed chunks, models), where the index folder has one.",
    )
    manifest: dict[str, Any] = Field(..., description="fingerprint, created_at, generation, embedding_model.")


# The error ``type`` of each status the API answers with (the ``type`` field of every error body).
ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    500: "server_error",
    502: "upstream_error",
    503: "overloaded_error",
    504: "timeout_error",
}


class ErrorDetail(BaseModel):
    message: str = Field(..., description="What went wrong, for a person to read.")
    type: str = Field(..., description="The kind of error: " + ", ".join(sorted(set(ERROR_TYPES.values()))) + ".")
    param: str | None = None
    code: str | int | None = Field(
        None,
        description="A stable name of the error (invalid_json, invalid_text, "
        "model_not_found, overloaded, ...); in a stream's error event, "
        "the HTTP status the error would have had.",
    )


class ErrorResponse(BaseModel):
    """OpenAI-style error object (the openai client reads ``error.message``)."""

    error: ErrorDetail


def error_body(message: str, type_: str, code: int | str | None = None, param: str | None = None) -> dict[str, Any]:
    """OpenAI-style error object (the openai client reads ``error.message``); :class:`ErrorResponse` is its schema."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


# ------------------------------------------------------------------------------------- app builder


class ScriptedServeOptions(BaseModel):
    """Latency injection for the scripted LLM (load tests and the overhead benchmark). Ignored with vLLM."""

    model_config = ConfigDict(extra="forbid")

    delay_s: float = Field(0.0, ge=0, description="Sleep before every completion (simulated LLM time).")
    token_delay_s: float = Field(0.0, ge=0, description="Sleep before every streamed word.")
    slow_marker: str | None = Field(None, description="Requests whose text contains this marker are slow …")
    slow_delay_s: float = Field(0.5, ge=0, description="… by this much per call and per streamed word.")


class EmbedBatchOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_batch_size: int = Field(32, gt=0)
    batch_wait_timeout_s: float = Field(0.001, ge=0, description="At low load every batch waits this long.")


class ServeAppArgs(BaseModel):
    """``args`` of ``serve.app:build_app`` (the ``applications[].args`` block of a Serve config file).

    Deployment sizing (replicas, autoscaling, queues, resources) is not here: it lives in the config file's
    ``deployments`` list, which Serve applies on top of the code defaults, or in ``deployment_options``
    (the same keys) when the app is built in code (``hxd2 serve``, tests).
    """

    model_config = ConfigDict(extra="forbid")

    indexes: dict[str, str] = Field(
        ..., min_length=1, description="Index name (the OpenAI 'model') -> local folder or s3:// URI."
    )
    default_index: str | None = Field(None, description="Index used by /v1/query without 'index' (default: first).")
    config: str | None = Field(
        None,
        description="hxd2 YAML config (llm, embedding, retrieval, s3 sections); None (and no config_data): the "
        "config the first index was built with, from its manifest.",
    )
    overrides: list[str] = Field(default_factory=list, description="section.key=value overrides of the config.")
    config_data: dict[str, Any] | None = Field(
        None, description="The config itself, as a mapping (instead of a file); overrides still apply."
    )
    # auth
    auth: bool = Field(True, description="Require a bearer API key on every route but /healthz.")
    api_keys_env: str = Field("HXD2_API_KEYS", description="Env var with comma-separated keys (read on replicas).")
    api_keys_file: str | None = Field(None, description="Secrets file, one key per line (read on replicas).")
    keys_file: str | None = Field(
        None,
        description="Tenants' keys file (hxd2 keys add): each key reads its own indexes, within its budgets; read on "
        "the replicas and again within keys_poll_s of a change (no restart).",
    )
    keys_poll_s: float = Field(2.0, gt=0, description="How often the Ingress looks at the keys file for a change.")
    audit_log: str | None = Field(
        None,
        description="JSON-lines audit log, one line per request (time, tenant, index, route, status, latency, LLM "
        "tokens; never a key), written by each Ingress replica ('{pid}' in the path names the replica's own file).",
    )
    audit_questions: bool = Field(False, description="Also write each request's question into the audit log.")
    # limits
    max_body_bytes: int = Field(1 << 20, gt=0, description="Larger request bodies get 413 before parsing.")
    request_deadline_s: float = Field(120.0, gt=0, description="Per-request deadline inside the app (504).")
    retry_after_s: int = Field(1, ge=0, description="Retry-After of our 503 answers.")
    rate_limit_per_key: float | None = Field(
        None,
        gt=0,
        description="Requests per second one API key may send to one Ingress replica (a key's service-wide limit "
        "is this times the Ingress replicas); over it: 429 with Retry-After. None: no limit.",
    )
    rate_limit_burst: int = Field(20, ge=1, description="Requests a key may send at once before the rate applies.")
    # live updates
    generation_poll_s: float = Field(
        2.0,
        ge=0,
        description="How often each replica reads the indexes' manifests for a newly published generation (an "
        "update or a delete), which it then opens beside the one in use and moves new requests to; 0: only on "
        "POST /v1/admin/reload.",
    )
    source_url_prefix: str | None = Field(
        None,
        description="Prefix that turns a reference's path relative to the corpus root into a URL for clients "
        "(source_url); answers never carry the server's absolute paths.",
    )
    max_question_chars: int = Field(32_000, gt=0, description="Longer questions get 413.")
    # query flow
    mode: str = Field("auto", description=f"Default query mode of a request that names none ({', '.join(MODES)}).")
    pipeline: str | None = Field(
        None,
        description="module:function(ctx: PipelineContext) -> an object with answer()/answer_stream() like the "
        "query flow (benchmarks: the Serve floor); None: the query flow of hxd2_ray.wiring.build_pipeline.",
    )
    pipeline_threads: int = Field(
        16,
        gt=0,
        description="Queries a Retriever replica runs at once (its pipeline threads). Its max_ongoing_requests may "
        "be larger (default 4x): the queries beyond wait in the replica, handed a thread the moment one frees.",
    )
    parts: Literal["deployments", "in_replica"] = Field(
        "deployments",
        description="deployments: the planner, plan executor and verifier run as their own deployments (Planner, "
        "PlanExecutor, Verifier), and the GraphFlow walk too when graphflow.policy is set "
        "(GraphWalker), each sized and scaled on its own; in_replica: inside each Retriever replica "
        "(one process, no hops).",
    )
    embedder: Literal["deployment", "in_replica"] = Field(
        "deployment",
        description="deployment: one Embedder deployment batching every replica's texts (@serve.batch; GPU models). "
        "in_replica: each Retriever / PlanExecutor replica embeds in-process, one hop less per query "
        "(CPU embedders, where a hop costs more than cross-request batching saves).",
    )
    transport: Literal["grpc", "actor"] = Field(
        "grpc",
        description="How deployments call each other. grpc: straight to the chosen replica's gRPC server (Serve's "
        "by-value handles), about half the CPU and latency per call of actor; actor: Ray actor calls "
        "through the object store (Serve's default: results that are passed on as ObjectRefs).",
    )
    embed_batch: EmbedBatchOptions = EmbedBatchOptions()
    scripted: ScriptedServeOptions = ScriptedServeOptions()
    deployment_options: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Deployment name -> Deployment.options(...) keys, applied in code."
    )

    _mode = field_validator("mode")(_check_mode)

    @field_validator("indexes")
    @classmethod
    def _names(cls, value: dict[str, str]) -> dict[str, str]:
        for name, location in value.items():
            if not name or "/" in name or name != name.strip():
                raise ValueError(f"index name {name!r} must be non-empty, without '/' or surrounding spaces")
            if not str(location).strip():
                raise ValueError(f"index {name!r} has an empty location")
        return value

    @model_validator(mode="after")
    def _default(self) -> "ServeAppArgs":
        if self.default_index is not None and self.default_index not in self.indexes:
            raise ValueError(f"default_index {self.default_index!r} is not one of {sorted(self.indexes)}")
        return self

    @property
    def default(self) -> str:
        return self.default_index or next(iter(self.indexes))
