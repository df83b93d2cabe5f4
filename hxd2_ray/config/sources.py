"""Where a corpus is read from: S3 access and the files and record fields an index takes in."""

from __future__ import annotations

from pydantic import Field

from hxd2_ray.config.base import NOT_IN_INDEX, FrozenSection


class S3Config(FrozenSection):
    """Access to s3:// inputs, outputs and caches (credentials come from the environment, never from here)."""

    endpoint_url: str | None = Field(None, description="S3 endpoint, e.g. http://127.0.0.1:9000 for a local server.")
    region: str = Field("us-east-1", description="S3 region.")
    lock_stale_after_s: float = Field(
        900.0,
        gt=0,
        description="An S3 build lock whose heartbeat is older than this is taken over by the next build (a live "
        "build refreshes it every minute or so); a lock left by a dead process on the same host is "
        "taken over at once.",
    )


class IngestConfig(FrozenSection):
    """Which files of an input are read, and which fields of a record hold the text, id and title.

    The file filters are not part of the index fingerprint: what they let through is, as the input's listing."""

    extensions: tuple[str, ...] = Field(
        (".txt", ".md", ".markdown", ".json", ".jsonl", ".parquet"),
        description="File suffixes picked up when the input is a folder; other files are quarantined.",
        json_schema_extra=NOT_IN_INDEX,
    )
    text_field: str = Field("text", description="Field holding the text in .json/.jsonl/.parquet records.")
    id_field: str = Field("id", description="Field holding the source's own document id (kept beside the hash).")
    title_field: str = Field("title", description="Field holding a document title.")
    max_file_bytes: int = Field(
        512 * 1024 * 1024, gt=0, description="Larger files are quarantined.", json_schema_extra=NOT_IN_INDEX
    )
    follow_external_links: bool = Field(
        False,
        description="Read what a symbolic link under the input folder points to outside it; off: such a link is "
        "quarantined (reason link_outside_input), so a link cannot pull another folder's files into the index.",
        json_schema_extra=NOT_IN_INDEX,
    )
