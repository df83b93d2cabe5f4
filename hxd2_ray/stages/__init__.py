"""Ray-free units of work that the Ray Data jobs map over column batches (pyarrow Tables in and out), the runners of
an index build, and what one run's stages share.

Where things are: the stages: :mod:`ingest_stage` (files into documents or quarantine records, then chunks),
:mod:`extract_stage` (loop-NER over a batch of chunks), :mod:`merge_stage` (the global merge: mentions grouped by
entity key or unordered pair), :mod:`embed_stage` (the texts to embed per vector family, embedded and stored under
the text's hash), :mod:`eval_stage` (one evaluation shard answered and scored) with :mod:`eval_traces` (its trace
files). Runners: :mod:`runner` is the seam between the index build's flow and where its stages run;
:mod:`ray_runner` runs them on Ray Data (and starts or joins Ray), :mod:`local_runner` in this process;
:mod:`actor_capacity` fails a stage whose actors no alive node can host. What a run shares: :mod:`stage_run` (the
LLM response cache, the usage ledger and the prompt version every actor is given), :mod:`cost` (the usage ledger and
budget of an indexing run: tokens, cost and GPU-seconds per stage), :mod:`staging` (atomic, content-named staging
files), :mod:`columns` (records to and from Arrow columns). :mod:`faults` holds the crash points of an index build,
armed through the environment by the crash-matrix tests. This is the one package of the library that may import
Ray: :mod:`ray_runner` and :mod:`actor_capacity` do, :mod:`stage_run` inside functions; the stage classes do not.

Each stage is a plain callable class: its constructor runs once per actor, ``__call__`` takes and returns a
``pyarrow.Table``. Unit tests call them directly; ``ray_runner`` maps them over Ray Data,
``local_runner`` calls them in one process (the index build's two runners).
"""
