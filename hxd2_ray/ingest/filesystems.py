"""Where a URI's bytes live: a local path (or ``file://``) or an ``s3://bucket/key``, as a pyarrow filesystem.

The input walker, document reading, index outputs and the query side all resolve locations here.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlparse

import pyarrow.fs as pafs

from hxd2_ray.config import S3Config

S3_SCHEME = "s3://"


def resolve_filesystem(uri: str, s3: S3Config) -> tuple[pafs.FileSystem, str]:
    """Filesystem and in-filesystem path for a local path (or ``file://``) or an ``s3://bucket/key`` URI.

    S3 credentials come from the usual AWS chain (``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` /
    ``AWS_SESSION_TOKEN``, profile, instance role). Glob characters are kept in the returned path.
    """
    if uri.startswith(S3_SCHEME):
        return _s3_filesystem(s3), uri[len(S3_SCHEME) :].rstrip("/")
    if uri.startswith("file://"):
        uri = uri[len("file://") :]
    return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(uri))


def _s3_filesystem(s3: S3Config) -> pafs.S3FileSystem:
    kwargs: dict[str, Any] = {"region": s3.region}
    endpoint = s3.endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        # pyarrow wants host:port and the scheme apart; an http:// URL passed whole is not understood.
        parsed = urlparse(endpoint if "://" in endpoint else f"https://{endpoint}")
        kwargs["endpoint_override"] = parsed.netloc + parsed.path.rstrip("/")
        kwargs["scheme"] = parsed.scheme or "https"
    # Explicit keys travel with the pickled filesystem, so Ray workers whose environment lacks them (a worker
    # started before the credentials were set, another node) can still read and write.
    if os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY"):
        kwargs["access_key"] = os.environ["AWS_ACCESS_KEY_ID"]
        kwargs["secret_key"] = os.environ["AWS_SECRET_ACCESS_KEY"]
        if os.environ.get("AWS_SESSION_TOKEN"):
            kwargs["session_token"] = os.environ["AWS_SESSION_TOKEN"]
    return pafs.S3FileSystem(**kwargs)
