"""The texts every vector family embeds, and the key a vector is stored under (the hash of its text).

Five families: entity name, name+description, relation keywords, keywords+endpoints+description, chunk. Used by the
index job's embed stage, the triple loader (``hxd2 index-kb``) and test fixtures; no Ray, no model.
"""

from __future__ import annotations

import hashlib

import pyarrow as pa

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
    for cid, ctext in zip(chunks.column("id").to_pylist(), chunks.column("text").to_pylist(), strict=True):
        add("chunk", cid, ctext)
    return pa.table({"family": family, "key": key, "text": text}, schema=EMBED_INPUTS)


def text_key(text: str) -> str:
    """The key a vector is stored under: the hash of the text it embeds."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
