"""What a generation's readers map instead of building (``<generation>/reads/``): the graph's read structures
(:mod:`hxd2_ray.graph.read_structures`), the fuzzy name index over its entity keys
(:class:`~hxd2_ray.retrieval.fuzzy.FuzzyNameIndex`) and the document titles as names
(:class:`~hxd2_ray.extraction.names.TitleIndex`), and what a served generation shows of its documents (the corpus
root, ``corpus.json``), written together from the graph just loaded. The write stage, ``hxd2 index-kb`` and
``hxd2 index reindex-reads`` all write them here, one way."""

from __future__ import annotations

import json
import os
import posixpath
from pathlib import Path
from typing import Callable, ContextManager, Iterable

from hxd2_ray.extraction.names import TitleIndex
from hxd2_ray.graph.read_structures import GraphReads, document_chunks, write_graph_reads_from
from hxd2_ray.retrieval.fuzzy import FuzzyNameIndex
from hxd2_ray.retrieval.lexical import LEXICAL_DIR, upgrade_lexical

__all__ = ["corpus_root_of", "read_corpus_root", "upgrade_mapped", "write_query_reads"]

SCAN_BUFFER_POOL = 2 << 30
CORPUS_FILE = "corpus.json"  # {"corpus_root": ...}: the folder every local document of the generation lies under


def corpus_root_of(source_paths: Iterable[str | None]) -> str:
    """The deepest folder every local document lies under ("" when none is a local path): answers name documents
    relative to it, never by the absolute path of the machine that built the index."""
    folders = [posixpath.dirname(p) for p in source_paths if p and "://" not in p and os.path.isabs(p)]
    return os.path.commonpath(folders) if folders else ""


def read_corpus_root(reads_dir: str | os.PathLike[str]) -> str | None:
    """The corpus root written with the read structures in ``reads_dir``; None for read structures written before
    it was."""
    path = Path(reads_dir) / CORPUS_FILE
    if not path.is_file():
        return None
    return str(json.loads(path.read_text(encoding="utf-8"))["corpus_root"])


def _names(reads: GraphReads, folder: Path) -> None:
    FuzzyNameIndex(reads.entities.column("key").to_pylist() if reads.entities.num_rows else []).write(folder)
    TitleIndex(document_chunks(reads)).write(folder)
    paths = reads.documents.column("doc_source_path").to_pylist() if reads.documents.num_rows else []
    (folder / CORPUS_FILE).write_text(json.dumps({"corpus_root": corpus_root_of(paths)}) + "\n", encoding="utf-8")


def write_query_reads(
    graph_path: str | os.PathLike[str], reads_dir: str | os.PathLike[str], engine: str | None = None
) -> GraphReads:
    """Write the read structures and the name index of the graph at ``graph_path`` (written by ``engine``) into
    ``reads_dir``, replacing what is there whole."""
    from hxd2_ray.graph.kuzu_store import KuzuGraphStore

    # A bounded buffer pool: the scan reads a page at a time, and the engine's default (most of the machine's
    # memory) would sit beside the tables being converted.
    with KuzuGraphStore(graph_path, read_only=True, engine=engine, buffer_pool_bytes=SCAN_BUFFER_POOL) as store:
        return write_graph_reads_from(store, reads_dir, also=_names)


def upgrade_mapped(
    generation: Path,
    room_for: Callable[[str, Path, int], ContextManager[None]],
    progress: Callable[[str], None] = lambda _m: None,
) -> tuple[str, ...]:
    """Rewrite a generation's vector families and lexical index written before they were mapped (format 1) in their
    mapped format, in place (they answer the same); ``room_for(what, path, bytes)`` guards each write. Returns the
    folders whose files changed (``vectors``, ``lexical``)."""
    from hxd2_ray.vectors.faiss_index import upgrade_family

    changed: list[str] = []
    folder = generation / "vectors"
    families = (
        sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")) if folder.is_dir() else []
    )
    for family in families:
        size = sum(f.stat().st_size for f in (folder / family).iterdir() if f.is_file())
        with room_for(f"the vector family {family} in its mapped format", folder / family, size):
            if upgrade_family(generation, family):
                progress(f"vector family {family}: its id map and shards rewritten to be memory-mapped")
                changed[:] = ["vectors"]
    lexical = generation / LEXICAL_DIR
    if lexical.is_dir():
        with room_for("the lexical index in its mapped format", lexical, 0):
            if upgrade_lexical(lexical):
                progress("lexical index: its chunk ids and vocabulary rewritten to be memory-mapped")
                changed.append(LEXICAL_DIR)
    return tuple(changed)
