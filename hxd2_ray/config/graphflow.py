"""GraphFlow: the learned graph-walk policy (its own fingerprint, not the index's)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from hxd2_ray.config.base import FrozenSection
from hxd2_ray.config.embedding import EmbeddingConfig


class GraphFlowConfig(FrozenSection):
    """GraphFlow: a learned retrieval policy over the graph (GFlowNet detailed balance with local exploration).

    Used by ``hxd2 graphflow train|evaluate`` and :class:`hxd2_ray.graphflow.retriever.GraphFlowRetriever`. The
    fields that shape a trained policy (model, objective, sampling, training) are part of its fingerprint; the
    inference and linking fields can change between training and use.
    """

    # -- use
    policy: str | None = Field(
        None,
        description="Folder of a GraphFlow policy trained for the index (hxd2 graphflow train --output): enables mode "
        "graphflow and the multistage.graph_walk step; hxd2 query / hxd2 eval run --policy set it. None: "
        "no graph walk.",
    )
    # -- model
    hidden_dim: int = Field(128, gt=0, description="Width of the state, action and flow heads.")
    encoder: Literal["frozen", "lora"] = Field(
        "frozen",
        description="frozen: question, node and relation features from the index's own embedder (cached), small "
        "trained heads; lora: the question is encoded by a transformers model with LoRA adapters "
        "trained with the heads (for GPUs; node and relation features stay frozen).",
    )
    lora_model: str = Field("builtin:minilm", description="encoder=lora: local model folder or builtin:minilm.")
    lora_rank: int = Field(8, gt=0, description="encoder=lora: rank of the adapters on the attention projections.")
    lora_alpha: int = Field(16, gt=0, description="encoder=lora: adapter scale numerator (scale = alpha/rank).")
    lora_max_length: int = Field(64, gt=0, description="encoder=lora: token cap of a question.")
    # -- objective
    objective: Literal["db", "sft"] = Field(
        "db",
        description="db: detailed balance with local exploration (learned flows, terminal flow tied to the reward, "
        "on-policy and exploratory trajectories); sft: the paper's reduction with the flows fixed, i.e. "
        "behaviour cloning of the positive trajectories (the paper's ablation; with chain demonstrations "
        "the better of the two on MetaQA, and the objective of both shipped configs: README, GraphFlow).",
    )
    explore_k: int = Field(4, ge=1, description="k: alternative actions explored at each state (k+1 candidates).")
    explore_stop: bool = Field(
        True, description="Always make STOP one of the k alternatives (its next flow is the reward, known exactly)."
    )
    miss_log_reward: float = Field(
        -15.0,
        lt=0,
        description="log R of a trajectory that stops off target (hits have log R = 0). Low enough that the many "
        "ways to miss cannot outweigh the few ways to hit.",
    )
    move_log_cost: float = Field(
        0.0,
        ge=0,
        description="db: log-reward paid per move, log R = log R(node) - cost * moves. A GFlowNet samples a node "
        "with the summed reward of the paths to it, and a question's answer is often also reached by "
        "many longer walks (X's genre through its director's other films); the cost makes the policy "
        "prefer the short reading.",
    )
    max_steps: int = Field(3, ge=1, le=8, description="Moves before STOP is forced (MetaQA: 3 hops).")
    # -- trajectories
    demonstrations: Literal["chain", "shortest"] = Field(
        "shortest",
        description="Positive trajectories. chain: along the relation chain whose reach best matches the answers, "
        "shared by questions asked in the same words (hxd2_ray/graphflow/chains.py); shortest: a "
        "shortest path to a random answer (often not the question's chain: an English film's own "
        "language answers 'the languages of the films its director made').",
    )
    chain_max_frontier: int = Field(
        5000,
        gt=0,
        description="chain: a chain's frontier of more nodes is not expanded (hubs such as a year).",
    )
    return_to_start: bool = Field(
        True,
        description="Let a walk (demonstrations, exploration, on-policy samples, inference) move back to its start "
        "node. Off matches MetaQA's answers ('the films that share directors with [X]' never include "
        "what is reached only through X): with sft, 3-hop test Hit@1 0.768 (db, on) -> 0.854 after two "
        "epochs; db without returns is let down on 1-hop by walks to hub answers (README, GraphFlow).",
    )
    demos_per_question: int = Field(
        2, ge=0, description="Positive trajectories per question and epoch (what they follow: demonstrations)."
    )
    onpolicy_per_question: int = Field(
        2, ge=0, description="db: trajectories sampled from the current policy per question and epoch (misses kept)."
    )
    onpolicy_epsilon: float = Field(0.1, ge=0, le=1, description="db: chance of a uniform action while sampling.")
    onpolicy_max_actions: int = Field(
        256,
        gt=0,
        description="db: on-policy sampling at a node with more moves draws from a random subset of this "
        "many (hubs such as a genre with 4,000 films); inference always scores every move.",
    )
    # -- training
    seed: int = Field(0, description="Seeds the split, sampling and initialisation.")
    epochs: int = Field(30, ge=1, description="Most epochs; early stopping usually ends sooner.")
    batch_questions: int = Field(
        16, gt=0, description="Questions per optimiser step (per worker); small batches: detailed balance needs steps."
    )
    learning_rate: float = Field(
        2e-3, gt=0, description="Adam's step size (the start of the cosine schedule; see lr_schedule)."
    )
    lr_schedule: Literal["cosine", "constant"] = Field(
        "cosine",
        description="cosine: each step's rate falls from learning_rate to learning_rate * lr_min_ratio along a "
        "half cosine over the run's epochs (late epochs refine instead of oscillating); constant: "
        "learning_rate throughout.",
    )
    lr_min_ratio: float = Field(0.05, ge=0, le=1, description="cosine: the last step's share of learning_rate.")
    flow_lr_scale: float = Field(
        1.0, gt=0, description="db: the flow head learns at learning_rate times this (flows lead, the policy follows)."
    )
    weight_decay: float = Field(0.0, ge=0, description="Adam's L2 penalty on the trained weights; 0: none.")
    grad_clip: float = Field(5.0, gt=0, description="Global gradient-norm clip.")
    patience: int = Field(4, ge=1, description="Epochs without a better dev Hit@1 before training stops.")
    dev_fraction: float = Field(0.1, ge=0, lt=1, description="Share of the questions held out for early stopping.")
    test_fraction: float = Field(0.1, ge=0, lt=1, description="Share held out for evaluation (never trained on).")
    max_dev_questions: int = Field(1000, gt=0, description="Dev questions scored per epoch (a seeded subset).")
    keep_checkpoints: int = Field(2, ge=1, description="Checkpoints kept under <policy>/checkpoints.")
    torch_threads: int | None = Field(None, gt=0, description="torch threads per process (None: torch's default).")
    use_gpu: bool = Field(False, description="Ray Train workers take a GPU each.")
    workers: int = Field(1, ge=1, description="Ray Train workers (data-parallel); --workers overrides.")
    # -- inference
    inference: Literal["beam", "sample"] = Field(
        "beam", description="beam: the M most probable trajectories; sample: M sampled trajectories."
    )
    trajectories: int = Field(32, gt=0, description="M: trajectories per question (beam width when beam).")
    top_k: int = Field(20, gt=0, description="Ranked targets returned.")
    ranking: Literal["path", "relations", "mass"] = Field(
        "relations",
        description="How answer entities are ranked. path: the trajectories' relation chains by their summed "
        "probability first, then the entities each chain reaches (the policy's reading of which chain "
        "the question asks for decides); relations: as path, but chains of relations, a move along an "
        "edge of several relations (a person who directed and wrote the film) counting for each "
        "(chosen on the MetaQA dev splits: 3-hop Hit@1 0.794 -> 0.808, 1- and 2-hop within 0.005); "
        "mass: each entity by the probability of the trajectories ending there. Passages are always "
        "ranked by mass (their gold passages come through different chains).",
    )
    exclude_starts: bool = Field(
        True,
        description="A question's start nodes are what it asks about, never its answer: they are not ranked "
        "(walks that return to them, e.g. through a co-star back to the film asked about, would "
        "otherwise outrank the answers).",
    )
    beam_merge: bool = Field(
        False,
        description="beam: paths that reach the same node along the same chain of edge signatures take one beam "
        "slot (probabilities summed, the most probable kept as evidence), not one each: the beam "
        "holds more distinct answers (hxd2_ray/graphflow/inference.py).",
    )
    beam_min_prob: float = Field(
        1e-6,
        ge=0,
        lt=1,
        description="beam: a partial trajectory less probable than this is dropped (it cannot carry enough mass to "
        "change a ranking; it would only expand hubs).",
    )
    # -- start nodes
    mask_topic: bool = Field(
        True, description="Condition the policy on the question with its [topic entity] replaced by a placeholder."
    )
    max_start_nodes: int = Field(3, gt=0, description="Entities linked from a question without [brackets].")
    link_threshold: float = Field(
        0.5, ge=-1, le=1, description="Lowest cosine of the question against an entity vector to start from it."
    )
    # -- features
    feature_embedding: EmbeddingConfig | None = Field(
        None,
        description="Embedder of the node, relation and question features; None: the index's own (embedding). "
        "Another one (e.g. MiniLM over a hashing-embedded KB index) embeds only names, labels and "
        "questions, once per index; linking still uses the index's vectors.",
    )
    cache_dir: str | None = Field(
        None, description="Where node/relation features are cached per index (None: ~/.cache/hxd2/graphflow)."
    )
    chunk_text_chars: int = Field(1000, gt=0, description="Characters of a chunk embedded as its node feature.")
    question_segments: int = Field(
        0,
        ge=0,
        le=8,
        description="encoder=frozen: besides the whole question's vector, one vector per each of this many "
        "consecutive, equal runs of its words, so the policy sees where each relation word stands (a "
        "bag of words cannot tell 'films written by the director of X' from 'films directed by the "
        "writer of X'); 0: the whole question's vector only.",
    )

    def fingerprint_fields(self) -> dict[str, Any]:
        """The fields that shape a trained policy (inference, linking and bookkeeping fields excluded). A field
        added later defaults to the value that trains as before it existed, so a policy whose recorded fields
        lack it loads with the same settings."""
        return self.model_dump(mode="json", exclude=_GRAPHFLOW_RUNTIME_FIELDS)


# Not part of a policy's fingerprint: how long training may run (a run can be resumed with more epochs), where and
# on what it runs, and everything read only at inference.
_GRAPHFLOW_RUNTIME_FIELDS = {
    "epochs",
    "patience",
    "keep_checkpoints",
    "torch_threads",
    "use_gpu",
    "workers",
    "inference",
    "trajectories",
    "top_k",
    "ranking",
    "exclude_starts",
    "beam_min_prob",
    "beam_merge",
    "max_start_nodes",
    "link_threshold",
    "cache_dir",
    "max_dev_questions",
    "policy",
}
