"""The vectors seam: an index's vector families, each written once, then opened and searched.

Where things are: :mod:`base` holds the vector index protocol, a family's layout on disk (``family.json``, the id
map, the shards) and the NumPy helpers both indexes share; :mod:`faiss_index` is the sharded Faiss family (plan,
build and commit its shards; open and search them), :mod:`exact_index` a brute-force NumPy cosine index (the test
oracle for Faiss, and a stand-in where Faiss is not wanted). :mod:`faiss_index` alone imports faiss; no Ray here (a
caller may fan shard builds out to Ray tasks through ``map_fn``).
"""
