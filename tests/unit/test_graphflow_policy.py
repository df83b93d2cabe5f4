"""A GraphFlow policy end to end on real indexes (Kùzu, Faiss, resident graph, hashing vectors): trained on the
MetaQA slice, stored, loaded by the retriever, which answers with ranked entities and their paths; refused by
another index; a question with no linkable start node gets an empty result with its reason; passage retrieval
on a text index; and the LoRA question encoder's forward/backward on a tiny transformers model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hxd2_ray.config import GraphFlowConfig
from hxd2_ray.embedding.hashing import HashingEmbedder
from hxd2_ray.errors import IndexMismatchError, IndexNotFoundError
from hxd2_ray.evaluation.datasets import EvalItem
from hxd2_ray.graphflow.dataset import index_inputs
from hxd2_ray.graphflow.features import load_or_build_features
from hxd2_ray.graphflow.policy import load_policy
from hxd2_ray.graphflow.retriever import GraphFlowRetriever
from hxd2_ray.graphflow.trainer import export_policy, train_policy
from hxd2_ray.retrieval import open_index
from tests.unit.graphflow_fixtures import TRAIN, kb_questions, trained_kb_policy
from tests.unit.retrieval_fixtures import build_tiny_index
from tests.unit.test_graphflow_data import DIM


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Index A (the whole slice) with a policy trained on it, and index B (a 30-entity subset)."""
    return trained_kb_policy(tmp_path_factory)


def test_the_retriever_answers_with_ranked_entities_and_their_paths(trained):
    root, cfg, gcfg, _ = trained
    with open_index(root / "a", cfg) as index:
        retriever = GraphFlowRetriever.open(index, HashingEmbedder(dim=DIM), str(root / "policy"), gcfg)
        result = retriever.retrieve("who directed [The Public Eye]")
        films = retriever.retrieve("which films did [Howard Franklin] direct")
    assert result.ok and result.reason == ""
    assert result.answers(1) == ["Howard Franklin"]
    top = result.targets[0]
    assert top.kind == "entity" and top.key == "howard franklin" and 0 < top.score <= 1
    assert [(p.source, p.relation, p.target) for p in top.path] == [
        ("The Public Eye", "directed by & written by", "Howard Franklin")
    ]
    assert [(s.key, s.method, s.mention) for s in result.starts] == [("the public eye", "exact", "The Public Eye")]
    assert films.answers(1) == ["The Public Eye"] and films.targets[0].path[0].relation.startswith("<-directed by")
    record = json.loads(json.dumps(result.to_dict()))
    assert record["targets"][0]["path"][0]["target"] == "Howard Franklin" and "walk" in record["timings_ms"]
    assert len(result.results) >= len(result.targets) >= 1


def test_the_ranking_sums_mass_per_terminal_and_never_ranks_an_excluded_start():
    import numpy as np

    from hxd2_ray.graphflow.inference import Finished, WalkOutcome

    # start 0; 0 -> 1 -> 0 twice (back to the film asked about), 0 -> 2 and 0 -> 3 once each
    outcome = WalkOutcome(
        [
            Finished(np.log(0.3), (0, 1, 0), (5, 6)),
            Finished(np.log(0.25), (0, 4, 0), (7, 8)),
            Finished(np.log(0.2), (0, 2), (1,)),
            Finished(np.log(0.15), (0, 3), (2,)),
            Finished(np.log(0.1), (0, 1), (5,)),
        ]
    )
    assert [n for n, _, _ in outcome.ranked()] == [0, 2, 3, 1]
    assert outcome.ranked()[0][1] == pytest.approx(0.55)
    assert [n for n, _, _ in outcome.ranked(exclude=frozenset({0}))] == [2, 3, 1]
    assert outcome.terminals(exclude=frozenset({0})) == [2, 3, 1]
    allowed = np.array([True, True, False, True, True])
    assert [n for n, _, _ in outcome.ranked(allowed, frozenset({0}))] == [3, 1]


def test_path_first_ranking_lets_the_likeliest_relation_chain_decide():
    import numpy as np

    from hxd2_ray.graphflow.inference import Finished, WalkOutcome

    # "genres of the films directed by X": two films (1, 2); the genre chain (entries 10, 11, 12 of signature 2)
    # holds 0.55 spread over two genres (5, 6), the year chain (entries 20, 21 of signature 3) 0.4 on one year (7)
    signatures = np.zeros(32, dtype=np.int64)
    signatures[[3, 4]] = 1
    signatures[[10, 11, 12]] = 2
    signatures[[20, 21]] = 3
    outcome = WalkOutcome(
        [
            Finished(np.log(0.2), (0, 1, 5), (3, 10)),
            Finished(np.log(0.2), (0, 2, 6), (4, 11)),
            Finished(np.log(0.15), (0, 2, 5), (4, 12)),
            Finished(np.log(0.2), (0, 1, 7), (3, 20)),
            Finished(np.log(0.2), (0, 2, 7), (4, 21)),
        ]
    )
    by_mass = outcome.ranked()
    assert [n for n, _, _ in by_mass] == [7, 5, 6]  # the shared year outweighs each genre alone
    by_path = outcome.ranked(signatures=signatures)
    assert [n for n, _, _ in by_path] == [5, 6, 7]
    assert dict((n, m) for n, m, _ in by_path) == pytest.approx({5: 0.35, 6: 0.2, 7: 0.4})  # scores stay mass


def test_relation_ranking_does_not_split_a_chain_across_the_signatures_holding_its_relation():
    import numpy as np

    from hxd2_ray.graphflow.inference import Finished, WalkOutcome

    # "who wrote X", relations 0 = written by, 1 = directed by, 2 = has tags. Writers 1, 2 and 4 come through
    # three signatures that all hold "written by" (0.25 + 0.25 + 0.2); director 3 through "directed by" alone (0.3)
    signatures = np.array([0, 1, 2, 3])
    relations = [(0,), (1, 0), (1,), (0, 2)]
    outcome = WalkOutcome(
        [
            Finished(np.log(0.25), (0, 1), (0,)),
            Finished(np.log(0.25), (0, 2), (1,)),
            Finished(np.log(0.3), (0, 3), (2,)),
            Finished(np.log(0.2), (0, 4), (3,)),
        ]
    )
    assert [n for n, _, _ in outcome.ranked(signatures=signatures)] == [3, 1, 2, 4]  # 0.3 is the largest signature
    by_relations = outcome.ranked(signatures=signatures, relations=relations)
    assert [n for n, _, _ in by_relations] == [1, 2, 4, 3]  # "written by" holds 0.7, "directed by" 0.55
    assert dict((n, m) for n, m, _ in by_relations) == pytest.approx({1: 0.25, 2: 0.25, 3: 0.3, 4: 0.2})


def test_the_retriever_never_answers_with_the_entity_asked_about_unless_told(trained):
    root, cfg, gcfg, _ = trained
    question = "which films share a director with [The Public Eye]"
    with open_index(root / "a", cfg) as index:
        emb = HashingEmbedder(dim=DIM)
        default = GraphFlowRetriever.open(index, emb, str(root / "policy"), gcfg).retrieve(question)
        kept = GraphFlowRetriever.open(
            index, emb, str(root / "policy"), gcfg.model_copy(update={"exclude_starts": False})
        ).retrieve(question)
    assert gcfg.exclude_starts and default.starts
    start = default.starts[0].key
    assert start not in [t.key for t in default.targets] and start not in default.results
    # the walks that come back to the film asked about are there, and ranked, only when the rule is off
    assert start in [t.key for t in kept.targets]
    assert [t.key for t in default.targets] == [t.key for t in kept.targets if t.key != start]


def test_no_linkable_start_node_gives_an_empty_result_with_the_reason(trained):
    root, cfg, gcfg, _ = trained
    with open_index(root / "a", cfg) as index:
        retriever = GraphFlowRetriever.open(index, HashingEmbedder(dim=DIM), str(root / "policy"), gcfg)
        [bracketed, plain] = retriever.retrieve_many(["who directed [Zzyzx Qwvx]", "qqq zzz"])
    for result in (bracketed, plain):
        assert not result.ok and result.targets == () and result.starts == () and result.reason
    assert "Zzyzx Qwvx" in bracketed.reason
    assert json.loads(json.dumps(plain.to_dict()))["reason"] == plain.reason


def test_a_policy_for_another_index_is_refused(trained):
    root, cfg, gcfg, _ = trained
    with open_index(root / "b", cfg) as other:
        with pytest.raises(IndexMismatchError, match="trained on another index"):
            GraphFlowRetriever.open(other, HashingEmbedder(dim=DIM), str(root / "policy"), gcfg)
    with open_index(root / "a", cfg) as index:
        with pytest.raises(IndexMismatchError, match="feature embedder"):  # same index, other feature embedder
            feats = load_or_build_features(
                index, HashingEmbedder(dim=DIM, model_id="hashing-other"), cache_dir=gcfg.cache_dir, progress=None
            )
            load_policy(root / "policy", feats, index.manifest.fingerprint)
    with pytest.raises(IndexNotFoundError, match="not a trained GraphFlow policy"):
        load_policy(root, feats, "x")


def test_the_policy_records_its_fingerprint_and_training(trained):
    root, _, _, inputs = trained
    meta = json.loads((root / "policy" / "policy.json").read_text())
    assert meta["index_fingerprint"] == inputs.index_fingerprint and meta["graph_hash"] == inputs.features.graph_hash
    assert meta["kind"] == "kgqa" and meta["config"]["objective"] == "db" and "epochs" not in meta["config"]
    summary = json.loads((root / "policy" / "training_summary.json").read_text())
    assert summary["history"] and summary["examples"]["examples"] == len(kb_questions())
    # no dev split: nothing to select on, so the policy is the last epoch's and nothing stopped early
    assert summary["best_epoch"] == summary["epochs_run"] == TRAIN["epochs"]
    assert all(h["dev_hit@1"] is None for h in summary["history"])
    assert (root / "policy" / "training.png").stat().st_size > 1000


def test_passage_retrieval_on_a_text_index(tmp_path):
    tiny = build_tiny_index(tmp_path / "tiny", dim=DIM)
    gcfg = GraphFlowConfig(**{**TRAIN, "epochs": 6}, cache_dir=str(tmp_path / "cache"), link_threshold=0.2)
    emb = HashingEmbedder(dim=DIM, model_id=tiny.cfg.embedding.model_id)
    items = [
        EvalItem("s1", "Where does Thomas Südhof work?", (), ("thomas_sudhof.md",)),
        EvalItem("s2", "What did Thomas Südhof discover?", (), ("thomas_sudhof.md",)),
        EvalItem("m1", "What does Robert Malenka study?", (), ("robert_malenka.txt",)),
        EvalItem("k1", "Which prize did Brian Kobilka win?", (), ("brian_kobilka.txt",)),
    ]
    with open_index(tiny.root, tiny.cfg) as index:
        inputs = index_inputs(index, emb, items, gcfg, progress=None)
        assert inputs.kind == "passages" and len(inputs.train) == 4
        result = train_policy(inputs, gcfg, tmp_path / "policy", progress=None)
        export_policy(result, inputs, tmp_path / "policy")
        retriever = GraphFlowRetriever.open(index, emb, str(tmp_path / "policy"), gcfg)
        found = retriever.retrieve("Which prize did Brian Kobilka win?")
    assert found.ok and all(t.kind == "chunk" for t in found.targets)
    assert found.passage_ids(1) == ["brian_kobilka.txt"]
    assert found.targets[0].path and found.targets[0].path[-1].relation == "~mentioned in passage"


def tiny_encoder(tmp_path: Path):
    from transformers import AutoTokenizer, BertConfig, BertModel

    from hxd2_ray.graphflow.encoder import LoraQuestionEncoder
    from hxd2_ray.models import minilm_path

    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    torch.manual_seed(0)
    base = BertModel(
        BertConfig(
            vocab_size=tokenizer.vocab_size,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=64,
        )
    )
    return LoraQuestionEncoder(base=base, tokenizer=tokenizer, rank=2, alpha=4, max_length=16)


def test_lora_question_encoder_forward_and_backward_on_cpu(tmp_path):
    enc = tiny_encoder(tmp_path)
    out = enc(["who directed [entity]", "what films did [entity] write"])
    assert out.shape == (2, 16) and torch.allclose(out.norm(dim=-1), torch.ones(2), atol=1e-5)
    (out[0] - out[1]).pow(2).sum().backward()
    trained = {n: p for n, p in enc.named_parameters() if p.requires_grad}
    assert trained and all("lora_" in n for n in trained)

    def moved(part: str) -> bool:
        return any(p.grad is not None and p.grad.abs().sum() > 0 for n, p in trained.items() if part in n)

    # LoRA starts as the base model (B = 0), so the first gradient reaches B only; after one step A's does too.
    assert moved("lora_B") and not moved("lora_A")
    assert all(p.grad is None for p in enc.parameters() if not p.requires_grad)  # the base stays frozen
    torch.optim.SGD(list(trained.values()), lr=0.5).step()
    enc.zero_grad()
    out = enc(["who directed [entity]", "what films did [entity] write"])
    (out[0] - out[1]).pow(2).sum().backward()
    assert moved("lora_A") and moved("lora_B")
    state = enc.adapter_state()
    fresh = tiny_encoder(tmp_path)
    fresh.load_adapter_state(state)
    assert all(torch.equal(dict(fresh.named_parameters())[n], v) for n, v in state.items())


def test_a_lora_policy_trains_through_the_encoder(trained, tmp_path):
    import numpy as np

    from hxd2_ray.graphflow.objective import trajectory_loss
    from hxd2_ray.graphflow.policy import build_policy
    from hxd2_ray.graphflow.trainer import _batch_trajectories, local_candidates

    _, _, gcfg, inputs = trained
    cfg = gcfg.model_copy(update={"encoder": "lora"})
    policy = build_policy(inputs.features, cfg, inputs.kind, inputs.index_fingerprint, encoder=tiny_encoder(tmp_path))
    idx = np.arange(4)
    plain = torch.as_tensor(inputs.vectors["train"].plain[idx])
    qh, qfull = policy.question_tables(None, [inputs.train[i].policy_text for i in idx], plain)
    rng = np.random.default_rng(0)
    trajs = _batch_trajectories(policy, inputs, idx, qh, qfull, cfg, rng)
    cands = [local_candidates(inputs.features.graph, t, cfg.explore_k, cfg.explore_stop, rng) for t in trajs]
    loss, _ = trajectory_loss(
        policy.model,
        policy.tables,
        qh,
        qfull,
        trajs,
        cands,
        [inputs.train[i].targets for i in idx],
        objective="db",
        miss_log_reward=-15.0,
        max_steps=cfg.max_steps,
    )
    loss.backward()
    # B is where the first gradient of a fresh adapter lands (A's is zero while B = 0)
    lora = [p for n, p in policy.encoder.named_parameters() if p.requires_grad and "lora_B" in n]
    assert lora and any(p.grad is not None and p.grad.abs().sum() > 0 for p in lora)
    assert "encoder" in policy.state_dict()


def test_a_policy_with_question_segments_trains_stores_and_answers(trained, tmp_path):
    root, cfg, _, _ = trained
    gcfg = GraphFlowConfig(**TRAIN, cache_dir=str(root / "cache"), question_segments=2)
    with open_index(root / "a", cfg) as index:
        inputs = index_inputs(index, HashingEmbedder(dim=DIM), kb_questions(), gcfg, progress=None)
        assert inputs.vectors["train"].policy.shape[1] == 3 * DIM  # the whole question and its two halves
        result = train_policy(inputs, gcfg, tmp_path / "policy", progress=None)
        export_policy(result, inputs, tmp_path / "policy")
        meta = json.loads((tmp_path / "policy" / "policy.json").read_text())
        assert meta["config"]["question_segments"] == 2
        retriever = GraphFlowRetriever.open(
            index, HashingEmbedder(dim=DIM), str(tmp_path / "policy"), gcfg.model_copy(update={"question_segments": 0})
        )  # the policy's own wins
        assert retriever.policy.model.question[0].in_features == 3 * DIM
        assert retriever.retrieve("who directed [The Public Eye]").answers(1) == ["Howard Franklin"]


def test_a_policy_recorded_before_a_setting_existed_loads_with_its_old_behaviour(trained, tmp_path):
    import shutil

    from hxd2_ray.graphflow.policy import policy_fingerprint

    root, cfg, gcfg, _ = trained
    old = tmp_path / "policy"
    shutil.copytree(root / "policy", old)
    meta = json.loads((old / "policy.json").read_text())
    for added in ("question_segments", "demonstrations", "chain_max_frontier", "return_to_start"):
        meta["config"].pop(added)  # as a policy trained before these settings recorded itself
    with open_index(root / "a", cfg) as index:
        feats = load_or_build_features(index, HashingEmbedder(dim=DIM), cache_dir=gcfg.cache_dir, progress=None)
        meta["fingerprint"] = policy_fingerprint(
            meta["index_fingerprint"],
            meta["graph_hash"],
            meta["embedder_id"],
            meta["dim"],
            meta["kind"],
            meta["config"],
        )
        (old / "policy.json").write_text(json.dumps(meta))
        policy = load_policy(old, feats, index.manifest.fingerprint)
        defaults = GraphFlowConfig()
        assert (
            policy.train_cfg.question_segments,
            policy.train_cfg.demonstrations,
            policy.train_cfg.return_to_start,
        ) == (0, "shortest", True)  # how it trained
        assert (defaults.question_segments, defaults.demonstrations, defaults.return_to_start) == (0, "shortest", True)
        meta["config"]["hidden_dim"] += 1  # a recorded setting changed behind its fingerprint's back
        (old / "policy.json").write_text(json.dumps(meta))
        with pytest.raises(IndexMismatchError, match="recomputes to"):
            load_policy(old, feats, index.manifest.fingerprint)


def test_the_retriever_ranks_by_relation_chains_when_told(trained):
    root, cfg, gcfg, _ = trained
    with open_index(root / "a", cfg) as index:
        retriever = GraphFlowRetriever.open(
            index, HashingEmbedder(dim=DIM), str(root / "policy"), gcfg.model_copy(update={"ranking": "relations"})
        )
        assert retriever.relations is not None and len(retriever.relations) == len(
            retriever.policy.features.graph.signatures
        )
        assert retriever.retrieve("who directed [The Public Eye]").answers(1) == ["Howard Franklin"]
    with pytest.raises(ValueError, match="valid: path, relations, mass"):
        from hxd2_ray.graphflow.evaluation import ranking_relations

        ranking_relations(retriever.policy, "chain")
