"""A cache of LLM responses stored with the index, shared by every actor of the indexing job.

Key: sha256 over the model id, the prompt version, the rendered messages and the sampling parameters (max tokens,
temperature, JSON schema, choices, stop strings) — everything that decides a reply, nothing that does not (the
request's tag).
A rebuild, a resumed run or an incremental change that asks the same question again gets the stored reply and
makes no call: the summaries of unchanged descriptions, the extractions of chunks whose staging was lost.

Storage: Parquet partitions ``<folder>/model=<model>/part-<hash>.parquet`` on a pyarrow filesystem (local or S3).
Each actor writes the replies it obtained as a new part file (atomic: temp + rename locally, one PUT on S3), so
actors never write the same file; every actor reads the key column of all parts once (lazily) and a part's
replies when a key of it is asked for. :meth:`ResponseStore.compact` folds many small parts into a few. Only
successful replies are stored; a failed request is asked again next time.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from hxd2_ray.atomic_write import write_table_atomic
from hxd2_ray.llm.base import LLMClient, LLMRequest, LLMResponse, LLMWrapper

CACHE_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("text", pa.string()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("finish_reason", pa.string()),
        ("tag", pa.string()),  # what the reply was for (statistics only; not part of the key)
    ]
)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
# Parts are folded by compact() once there are more than this many; a folded part holds up to this many rows.
COMPACT_MIN_PARTS = 64
COMPACT_ROWS_PER_PART = 200_000


def request_key(model_id: str, prompt_version: str, req: LLMRequest) -> str:
    """The cache key of one request: what the reply depends on, hashed."""
    payload = {
        "model": model_id,
        "prompt_version": prompt_version,
        "messages": [[m.get("role", ""), m.get("content", "")] for m in req.messages],
        "max_tokens": req.max_tokens,
        "temperature": req.temperature,
        "json_schema": req.json_schema,
        "choices": list(req.choices) if req.choices is not None else None,
    }
    if req.stop:  # only when set, so the keys of requests without stop strings stay what they were
        payload["stop"] = list(req.stop)
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class CacheLocation:
    """Where a cache lives: a pyarrow filesystem (picklable, so it travels to Ray actors) and a folder on it."""

    fs: pafs.FileSystem
    folder: str

    def partition(self, model_id: str) -> str:
        return posixpath.join(self.folder, f"model={_UNSAFE.sub('_', model_id) or 'model'}")


class ResponseStore:
    """The stored replies of one model: lookups by key, new replies appended as part files."""

    def __init__(self, location: CacheLocation, model_id: str) -> None:
        self._fs = location.fs
        self._folder = location.partition(model_id)
        self._where: dict[str, str] | None = None  # key -> part file holding it (loaded on first use)
        self._parts: dict[str, dict[str, LLMResponse]] = {}  # replies of the parts read so far

    # ------------------------------------------------------------------ reading

    def _part_files(self) -> list[str]:
        infos = self._fs.get_file_info(pafs.FileSelector(self._folder, allow_not_found=True))
        return sorted(
            i.path
            for i in infos
            if i.type == pafs.FileType.File
            and i.path.endswith(".parquet")
            and not posixpath.basename(i.path).startswith(".")
        )

    def _index(self) -> dict[str, str]:
        if self._where is None:
            where: dict[str, str] = {}
            for path in self._part_files():
                try:
                    keys = pq.read_table(path, filesystem=self._fs, columns=["key"]).column("key").to_pylist()
                except (OSError, pa.ArrowInvalid):
                    continue  # a part torn by a crash: its replies are simply asked again
                for key in keys:
                    where.setdefault(key, path)
            self._where = where
        return self._where

    def _read_part(self, path: str) -> dict[str, LLMResponse]:
        if path not in self._parts:
            rows: dict[str, LLMResponse] = {}
            try:
                table = pq.read_table(path, filesystem=self._fs, schema=CACHE_SCHEMA)
            except (OSError, pa.ArrowInvalid):
                table = CACHE_SCHEMA.empty_table()
            for r in table.to_pylist():
                rows[r["key"]] = LLMResponse(
                    text=r["text"],
                    prompt_tokens=int(r["prompt_tokens"]),
                    completion_tokens=int(r["completion_tokens"]),
                    finish_reason=r["finish_reason"] or "stop",
                )
            self._parts[path] = rows
        return self._parts[path]

    def get(self, keys: Iterable[str]) -> dict[str, LLMResponse]:
        """The stored reply of every key that has one."""
        where = self._index()
        found: dict[str, LLMResponse] = {}
        for key in keys:
            path = where.get(key)
            if path is not None:
                reply = self._read_part(path).get(key)
                if reply is not None:
                    found[key] = reply
        return found

    def __len__(self) -> int:
        return len(self._index())

    # ------------------------------------------------------------------ writing

    def put(self, entries: Sequence[tuple[str, LLMRequest, LLMResponse]]) -> str | None:
        """Store successful replies as one new part; returns its path (None when there was nothing to store)."""
        where = self._index()
        fresh: dict[str, tuple[LLMRequest, LLMResponse]] = {}
        for key, req, resp in entries:
            if not resp.error and key not in where:
                fresh.setdefault(key, (req, resp))
        if not fresh:
            return None
        digest = hashlib.sha256("\n".join(sorted(fresh)).encode()).hexdigest()[:20]
        path = posixpath.join(self._folder, f"part-{digest}.parquet")
        rows = [
            {
                "key": key,
                "text": resp.text,
                "prompt_tokens": resp.prompt_tokens,
                "completion_tokens": resp.completion_tokens,
                "finish_reason": resp.finish_reason,
                "tag": req.tag,
            }
            for key, (req, resp) in fresh.items()
        ]
        write_table_atomic(self._fs, path, pa.Table.from_pylist(rows, schema=CACHE_SCHEMA))
        for key in fresh:
            where[key] = path
        self._parts[path] = {key: resp for key, (_, resp) in fresh.items()}
        return path

    def compact(self, min_parts: int = COMPACT_MIN_PARTS, rows_per_part: int = COMPACT_ROWS_PER_PART) -> int:
        """Fold the parts into files of up to ``rows_per_part`` rows once there are ``min_parts`` or more; returns
        how many parts were folded. Call it when no actor writes (the job's driver, after a stage): the new parts
        are written before the old ones are removed, so a reader never misses a reply, at worst sees it twice."""
        parts = self._part_files()
        if len(parts) < min_parts:
            return 0
        tables = []
        for path in parts:
            try:
                tables.append(pq.read_table(path, filesystem=self._fs, schema=CACHE_SCHEMA))
            except (OSError, pa.ArrowInvalid):
                continue
        merged = pa.concat_tables(tables) if tables else CACHE_SCHEMA.empty_table()
        # One row per key (a key may sit in two parts when two actors asked the same question at once).
        _, first = _unique_first(merged.column("key").to_pylist())
        merged = merged.take(pa.array(first, pa.int64())).sort_by("key")
        written = set()
        for start in range(0, merged.num_rows, rows_per_part):
            piece = merged.slice(start, rows_per_part)
            digest = hashlib.sha256("\n".join(piece.column("key").to_pylist()).encode()).hexdigest()[:20]
            path = posixpath.join(self._folder, f"part-{digest}.parquet")
            write_table_atomic(self._fs, path, piece)
            written.add(path)
        for path in parts:
            if path not in written:
                try:
                    self._fs.delete_file(path)
                except FileNotFoundError:
                    pass
        self._where, self._parts = None, {}
        return len(parts)


def _unique_first(values: list[str]) -> tuple[list[str], list[int]]:
    seen: dict[str, int] = {}
    for i, v in enumerate(values):
        seen.setdefault(v, i)
    return list(seen), sorted(seen.values())


class CachedLLM(LLMWrapper):
    """Answers from the store where it can; asks the wrapped client for the rest (identical requests of one batch
    once) and stores their successful replies. ``hits`` / ``misses`` count requests answered each way, by tag."""

    def __init__(self, inner: LLMClient, store: ResponseStore, prompt_version: str) -> None:
        super().__init__(inner)
        self.store = store
        self.prompt_version = prompt_version
        self.hits: dict[str, int] = {}
        self.misses: dict[str, int] = {}

    def complete(self, requests: Sequence[LLMRequest]) -> list[LLMResponse]:
        model_id = self.model_id
        keys = [request_key(model_id, self.prompt_version, r) for r in requests]
        found = self.store.get(keys)
        out: list[LLMResponse | None] = [found.get(k) for k in keys]
        first_of: dict[str, int] = {}
        for i, k in enumerate(keys):
            if out[i] is None:
                first_of.setdefault(k, i)
        asked = set(first_of.values())
        for i, req in enumerate(requests):
            counts = self.misses if i in asked else self.hits
            counts[req.tag] = counts.get(req.tag, 0) + 1
        if asked:
            order = sorted(asked)
            replies = self.inner.complete([requests[i] for i in order])
            if len(replies) != len(order):
                raise RuntimeError(f"LLM returned {len(replies)} responses for {len(order)} requests")
            fresh = {keys[i]: reply for i, reply in zip(order, replies, strict=True)}
            self.store.put([(keys[i], requests[i], fresh[keys[i]]) for i in order])
            out = [o if o is not None else fresh[k] for o, k in zip(out, keys, strict=True)]
        return [o for o in out if o is not None]

    def take_counts(self) -> tuple[dict[str, int], dict[str, int]]:
        """(hits by tag, misses by tag) since the last call (per batch of a stage)."""
        counts = (self.hits, self.misses)
        self.hits, self.misses = {}, {}
        return counts


__all__ = ["CACHE_SCHEMA", "CacheLocation", "CachedLLM", "ResponseStore", "request_key"]
