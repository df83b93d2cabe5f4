"""HTTP routes that read a served index beside its answers: the text of a chunk (what a reference points at), the
graph around some entities, and the index's statistics. The web UI (``/ui``) uses them; like every data route
they are behind the API key.

The Ingress checks every parameter here, with bounds the document states (FastAPI turns a violation into a 422
error object), and the Retriever replica that holds the open index answers (:mod:`serve.index_views`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any, Callable

from fastapi import Path, Query, Request
from pydantic import StringConstraints

from serve import openapi
from serve.index_views import MAX_ENTITIES, MAX_HOPS, MAX_NODES
from serve.schemas import ChunkView, GraphView, IndexStats
from serve.tenants import request_tenant, unknown_index_message

if TYPE_CHECKING:
    from fastapi import FastAPI

MAX_CHUNK_ID_CHARS = 128
# Chunk ids are hex digests (the tests' tiny indexes use short names): nothing else is ever one, and a path
# segment with '/', '.' or '%' in it could not be routed back to this route anyway.
CHUNK_ID_PATTERN = r"^[A-Za-z0-9_-]+$"
MAX_ENTITY_CHARS = 200
DEFAULT_MAX_NODES = 60

INDEX_ROUTES = ("/v1/indexes/{index}/chunks/{chunk_id}", "/v1/indexes/{index}/graph", "/v1/indexes/{index}/stats")

# Path parameters are declared with their bounds so the document says what the route enforces.
IndexName = Annotated[str, Path(description="A served index (GET /v1/models lists them).", max_length=200)]
ChunkId = Annotated[
    str,
    Path(
        description="A chunk id, as a reference's chunk_ids give it.",
        min_length=1,
        max_length=MAX_CHUNK_ID_CHARS,
        pattern=CHUNK_ID_PATTERN,
    ),
]
EntityName = Annotated[str, StringConstraints(min_length=1, max_length=MAX_ENTITY_CHARS)]

_VIEW_ERRORS = (*openapi.GUARDED, 404, 422, 500, 502, 503, 504)


def add_index_routes(api: FastAPI, backend: Any, settings: Any, api_error: Callable[..., Exception]) -> None:
    """Register the routes on ``api`` (a FastAPI app); ``backend.index_view(kind, index, params, deadline)`` reads
    the index, ``api_error(status, message, code=...)`` is the app's error."""

    async def view(request: Request, kind: str, index: str, **params: Any) -> dict[str, Any]:
        tenant = request_tenant(request)
        if index not in settings.indexes or not tenant.may_read(index):  # the same 404 either way
            raise api_error(404, unknown_index_message(index, tenant, settings.indexes), code="model_not_found")
        deadline = time.time() + settings.request_deadline_s
        result: dict[str, Any] = await backend.index_view(kind, index, params, deadline)
        return result

    @api.get(
        "/v1/indexes/{index}/chunks/{chunk_id}",
        operation_id="getChunk",
        summary="The text of one chunk of an index (a reference's chunk_ids name them)",
        response_model=None,
        responses=openapi.responses(
            openapi.ok_json("ChunkView", "The chunk, with its document."),
            *_VIEW_ERRORS,
            s404="The index is not served, or holds no such chunk.",
            s422="The chunk id is not letters, digits, '_' and '-', or is longer than the limit.",
        ),
    )
    async def chunk(request: Request, index: IndexName, chunk_id: ChunkId) -> dict[str, Any]:
        return ChunkView.model_validate(await view(request, "chunk", index, chunk_id=chunk_id)).model_dump()

    @api.get(
        "/v1/indexes/{index}/graph",
        operation_id="getGraph",
        summary="The entities named and what lies within `hops` relations of them",
        response_model=None,
        responses=openapi.responses(
            openapi.ok_json("GraphView", "The nodes and the relations among them."),
            *_VIEW_ERRORS,
            s404="The index is not served, or has none of the entities.",
            s422="A parameter is out of its bounds (entity count or length, hops, max_nodes).",
        ),
    )
    async def graph(
        request: Request,
        index: IndexName,
        entity: Annotated[
            list[EntityName],
            Query(
                min_length=1,
                max_length=MAX_ENTITIES,
                description="An entity's name or key; repeat for several (the answer's entities).",
            ),
        ],
        hops: Annotated[int, Query(ge=0, le=MAX_HOPS, description="Relations to walk out from them.")] = 1,
        max_nodes: Annotated[
            int, Query(ge=1, le=MAX_NODES, description="Most entities to return.")
        ] = DEFAULT_MAX_NODES,
    ) -> dict[str, Any]:
        result = await view(request, "graph", index, entities=list(entity), hops=hops, max_nodes=max_nodes)
        return GraphView.model_validate(result).model_dump()

    @api.get(
        "/v1/indexes/{index}/stats",
        operation_id="getIndexStats",
        summary="Counts, degrees, components, top entities and types of an index",
        response_model=None,
        responses=openapi.responses(
            openapi.ok_json("IndexStats", "The index's statistics."),
            *_VIEW_ERRORS,
            s404="The index is not served here.",
            s422="The index name is longer than the limit.",
        ),
    )
    async def stats(request: Request, index: IndexName) -> dict[str, Any]:
        return IndexStats.model_validate(await view(request, "stats", index)).model_dump()
