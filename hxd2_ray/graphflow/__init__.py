"""GraphFlow: a learned retrieval policy over the knowledge graph (GFlowNet detailed balance with local exploration).

Where things are: the graph and its inputs: :mod:`walk_graph` is the graph a policy walks (entities and chunks, moves
with direction-aware relation signatures), :mod:`features` the node, type, relation and question features from the
index's embedder, cached per index; :mod:`linking` finds start nodes (a given or bracketed topic entity, else the
names the question spells out, else the question channel), :mod:`examples` makes questions into examples (start and
target nodes, the seeded split), :mod:`dataset` reads a benchmark's questions over an open index into what training
and evaluation read. The network: :mod:`model` (the policy and flow heads) and :mod:`encoder` (the optional LoRA
question encoder). Training: :mod:`trajectories` (demonstrations, on-policy samples, local exploration),
:mod:`chains` (relation-chain demonstrations), :mod:`training_inputs` (each split's question vectors and
demonstration pools), :mod:`objective` (the loss), :mod:`trainer` (the training loop, in one process or in Ray Train
workers through a hook object that ``jobs/graphflow.py`` passes). Using a policy: :mod:`policy` (storage and
fingerprint), :mod:`walker` (one scored step over many partial paths, shared by sampling and inference),
:mod:`inference` (beam search or sampling), :mod:`retriever` (:class:`GraphFlowRetriever`), :mod:`results` (what it
returns: plain data, no torch), :mod:`evaluation` (the metrics over examples). :mod:`synthetic` generates small
graphs for tests and benchmarks. No Ray here.

Importing this package loads nothing heavy; the modules that need torch import it themselves (model, encoder, walker,
trajectories, objective, trainer, policy, inference, retriever, evaluation).
"""
