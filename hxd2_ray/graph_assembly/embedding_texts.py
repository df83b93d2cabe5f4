"""The texts every vector family embeds, and the key a vector is stored under (the hash of its text).

Five families: entity name, name+description, relation keywords, keywords+endpoints+description, chunk. Used by the
index job's embed stage, the triple loader (``hxd2 index-kb``) and test fixtures; no Ray, no model.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

EMBED_INPUTS = pa.schema([("family", pa.string()), ("key", pa.string()), ("text", pa.string())])
# Staged vectors live under <staging>/text_vectors, one row per distinct text; the rows the embed stage is given.
TEXT_VECTORS_FOLDER = "text_vectors"
TEXTS_TO_EMBED = pa.schema([("text_key", pa.string()), ("text", pa.string())])
# Words -> tokens where the embedder has no tokenizer to ask (the hashing fake): a typical English ratio.
TOKENS_PER_WORD_ESTIMATE = 1.3


def relation_key(source_key: str, target_key: str) -> str:
    return f"{source_key}\x1f{target_key}"


def embedding_inputs(entities: pa.Table, relations: pa.Table, chunks: pa.Table) -> pa.Table:
    """The five families: entity name, name+description, relation keywords, keywords+endpoints+description, chunk."""
    ent = entities.select(["key", "name", "description"]).to_pylist()
    names = {e["key"]: e["name"] for e in ent}
    rel = relations.select(["source_key", "target_key", "keywords", "description"]).to_pylist()
    family, key, text = [], [], []

    def add(fam: str, k: str, t: str) -> None:
        family.append(fam)
        key.append(k)
        text.append(t)

    for e in ent:
        add("entity_name", e["key"], e["name"])
        add("entity_mix", e["key"], f"{e['name']}: {e['description']}" if e["description"] else e["name"])
    for r in rel:
        k = relation_key(r["source_key"], r["target_key"])
        keywords = ", ".join(r["keywords"] or ())
        src, tgt = names.get(r["source_key"], r["source_key"]), names.get(r["target_key"], r["target_key"])
        add("relation_keywords", k, keywords or f"{src} {tgt}")
        add("relation_mix", k, f"{keywords}\n{src} - {tgt}\n{r['description']}".strip())
    described = pa.table({"family": family, "key": key, "text": text}, schema=EMBED_INPUTS)
    # The chunk family, the largest, straight from the chunk table's columns: no Python string per chunk.
    chunk_family = pa.table(
        {
            "family": pa.repeat("chunk", chunks.num_rows).cast(pa.string()),
            "key": chunks.column("id"),
            "text": chunks.column("text"),
        },
        schema=EMBED_INPUTS,
    )
    return pa.concat_tables([described, chunk_family])


def text_key(text: str) -> str:
    """The key a vector is stored under: the hash of the text it embeds."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def text_keys(texts: pa.Array | pa.ChunkedArray, batch_rows: int = 65_536) -> pa.Array:
    """:func:`text_key` of every text, converted ``batch_rows`` texts at a time (never all as Python strings)."""
    parts = [
        pa.array([text_key(t) for t in texts.slice(start, batch_rows).to_pylist()], pa.string())
        for start in range(0, len(texts), batch_rows)
    ]
    return pa.concat_arrays(parts) if parts else pa.array([], pa.string())


def texts_to_embed(keys: pa.Array, texts: pa.Array | pa.ChunkedArray, stored_keys: pa.Array) -> pa.Table:
    """The ``TEXTS_TO_EMBED`` rows of the texts whose key is not in ``stored_keys``: each distinct key once, at
    its first occurrence, in input order."""
    candidates = pa.table({"text_key": keys, "text": texts}, schema=TEXTS_TO_EMBED)
    if len(stored_keys):
        candidates = candidates.filter(pc.invert(pc.is_in(keys, value_set=stored_keys)))
    if not candidates.num_rows:
        return candidates
    numbered = pa.table({"text_key": candidates.column("text_key"), "row": np.arange(candidates.num_rows)})
    firsts = numbered.group_by("text_key").aggregate([("row", "min")]).column("row_min").to_numpy()
    return candidates.take(pa.array(np.sort(firsts), pa.int64()))
