"""GraphFlow: a learned retrieval policy over the knowledge graph (GFlowNet detailed balance with local exploration).

* :mod:`.walk_graph` the graph a policy walks (entities and chunks, moves with direction-aware relation signatures);
* :mod:`.features` node, type, relation and question features from the index's embedder, cached per index;
* :mod:`.linking` start nodes (bracketed topic entity, else the question channel); :mod:`.examples` targets, splits;
* :mod:`.model` the policy and flow heads; :mod:`.encoder` the optional LoRA question encoder;
* :mod:`.trajectories` demonstrations, on-policy samples, local exploration; :mod:`.objective` the loss;
* :mod:`.trainer` the training loop; :mod:`.policy` storage and fingerprint; :mod:`.inference` beam / sampling;
* :mod:`.retriever` :class:`GraphFlowRetriever`, :mod:`.results` what it returns (plain data, no torch);
  :mod:`.evaluation` the metrics over examples;
* :mod:`.synthetic` small generated graphs for tests and benchmarks.

Importing this package loads nothing heavy; the modules that need torch import it themselves (model, objective,
trainer, policy, inference, retriever, evaluation).
"""
