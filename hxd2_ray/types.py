"""Domain records shared across indexing and querying (frozen dataclasses, columns only at the Ray edge)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field


def content_hash(*parts: str) -> str:
    """Full sha256 over the parts (NUL-separated): ids never collide the way 24-bit md5 prefixes do."""
    h = hashlib.sha256()
    for i, part in enumerate(parts):
        if i:
            h.update(b"\x00")
        h.update(part.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def vector_id(key: str) -> int:
    """Stable non-negative int63 id of a string key, for Faiss ``add_with_ids``."""
    return int.from_bytes(hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()[:8], "big") >> 1


@dataclass(frozen=True, slots=True)
class Document:
    id: str  # sha256 of the text
    text: str
    source_path: str
    source_id: str = ""  # the source's own id (json/parquet field), else the path
    title: str = ""
    # Where each part of a converted file starts in ``text`` and where it came from ((offset, "page 2"), ...),
    # ascending; empty for text and records. The chunker cuts at each offset and puts the label in the header path.
    regions: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True, slots=True)
class QuarantinedFile:
    source_path: str
    reason: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Chunk:
    id: str  # sha256(doc_id, start offset, text)
    doc_id: str
    order: int
    start: int  # character offset of the chunk in the document text
    text: str
    header_path: str = ""  # "H1 > H2 > H3" for markdown; a converted file's region first: "page 2 > H1"
    language: str = "en"  # "zh" or "en", picks the prompt


@dataclass(frozen=True, slots=True)
class EntityMention:
    """One entity as extracted from one chunk."""

    name: str
    type: str
    description: str
    chunk_id: str


@dataclass(frozen=True, slots=True)
class RelationMention:
    """One relation as extracted from one chunk; direction is kept but merging treats pairs as unordered."""

    source: str
    target: str
    description: str
    keywords: tuple[str, ...]
    strength: float
    chunk_id: str


@dataclass(frozen=True, slots=True)
class Extraction:
    chunk_id: str
    entities: tuple[EntityMention, ...] = ()
    relations: tuple[RelationMention, ...] = ()
    content_keywords: tuple[str, ...] = ()
    malformed_records: int = 0  # records the parser could not read and skipped
    ungrounded_entities: int = 0  # dropped by extraction.grounding: the name does not occur in the chunk
    ungrounded_relations: int = 0  # dropped by extraction.grounding: an end does not occur in the chunk
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str = ""  # set when the chunk failed after bounded retries; the chunk is recorded, not dropped


@dataclass(frozen=True, slots=True)
class MergedEntity:
    key: str  # normalized name: the graph's primary key
    name: str  # most frequent surface form, verbatim
    type: str
    description: str
    source_chunk_ids: tuple[str, ...]
    mention_count: int
    name_truncated: bool = False
    needs_summary: bool = False


@dataclass(frozen=True, slots=True)
class MergedRelation:
    source_key: str  # the smaller of the two normalized names: pairs are unordered
    target_key: str
    description: str
    keywords: tuple[str, ...]
    weight: float
    source_chunk_ids: tuple[str, ...]
    mention_count: int
    needs_summary: bool = False

    @property
    def key(self) -> str:
        return f"{self.source_key}\x1f{self.target_key}"


@dataclass(frozen=True, slots=True)
class StageStats:
    name: str
    seconds: float
    rows_in: int = 0
    rows_out: int = 0
    extra: dict[str, float] = field(default_factory=dict)
