"""hxd2_ray: HuixiangDou2 GraphRAG on Ray. Importing the package loads no Ray, vLLM, torch, Kùzu or Faiss.

Where things are, by layer from top to bottom (a package imports only from the layers below its own, and packages
joined by ``|`` never import each other: the import-linter contracts in ``pyproject.toml``): the use cases
:mod:`indexer` (build, update, delete and dry-run an index; an index from triples; read structures in place) |
:mod:`runs` (evaluation runs as library functions); :mod:`stages` (the units of work the Ray Data jobs map, the index
build's runners, a run's usage ledger, budget and crash points); :mod:`wiring` (config into concrete backends and the
query flow of every mode); :mod:`graphflow` (the learned graph-walk policy); :mod:`retrieval` (the query side: open
an index and answer over it) | :mod:`evaluation` (benchmark loaders, metrics, reports, the LLM judge) |
:mod:`graph_assembly` (extracted tables made into the graph's edges and embedded texts); :mod:`logic` (the logic form:
plan, execute, verify) | :mod:`graph_export` (GraphML, Neo4j CSV, Cypher) | :mod:`graph_views` (pictures and
statistics of a graph); :mod:`index_store` (what an index on disk is: layout, manifest, generations, leases, locks);
:mod:`extraction` (loop-NER and the global merge) | :mod:`progress` (how units of work report what they did); the
seams, each with its backends: :mod:`chunking` | :mod:`embedding` | :mod:`graph` | :mod:`vectors` | :mod:`llm` |
:mod:`ingest` | :mod:`rerank`; :mod:`prompt_templates` (prompts as versioned YAML) | :mod:`models` (the models that
ship inside PyPI packages) | :mod:`atomic_write` (a file written whole or not at all); :mod:`config` (typed, frozen
configuration from YAML) | :mod:`text_validation` (valid Unicode where text enters); :mod:`types` (domain records
shared by indexing and querying) | :mod:`errors` (exceptions that cross module boundaries). ``sample_data/`` holds
the bundled sample corpus and question files (data, no code). Only :mod:`stages` may import Ray, and each heavy
stack has one home, loaded only when a caller uses it: Kùzu and LadybugDB in ``graph.engine``, Faiss in
``vectors.faiss_index``, vLLM and openai in the :mod:`llm` backends, torch, transformers and FlagEmbedding in the
model backends (:mod:`models`, :mod:`embedding`, :mod:`rerank`, :mod:`llm`) and :mod:`graphflow`.
"""

__version__ = "0.1.0"
