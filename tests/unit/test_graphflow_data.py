"""GraphFlow's inputs on real indexes: the walk graph of a KB index (MetaQA slice, Kùzu, resident graph) keeps each
fact's direction, the walk graph of a text index reaches chunks through MENTIONS; features are cached per index;
questions become examples with their targets (and what was skipped, and why); the split is fixed by question;
the one MetaQA loader reads the official layout; the ranking metrics by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hxd2_ray.config import GraphFlowConfig, HashingEmbeddingConfig, HxdConfig, ScriptedLLMConfig, VectorsConfig
from hxd2_ray.embedding.hashing import HashingEmbedder
from hxd2_ray.evaluation import metrics as M
from hxd2_ray.evaluation.datasets import EvalItem, get_benchmark, load_metaqa
from hxd2_ray.graphflow.examples import build_examples, split_examples
from hxd2_ray.graphflow.features import (
    embed_normalized,
    graph_hash,
    load_or_build_features,
    question_features,
    walk_graph_of_index,
)
from hxd2_ray.graphflow.linking import TOPIC_PLACEHOLDER, StartLinker
from hxd2_ray.graphflow.walk_graph import MENTIONED_IN, MENTIONS
from hxd2_ray.indexer.kb_index import build_kb_index
from hxd2_ray.retrieval import open_index
from tests.unit.retrieval_fixtures import build_tiny_index

KB = Path(__file__).resolve().parents[1] / "data" / "eval" / "metaqa" / "kb.txt"
DIM = 32


def kb_config() -> HxdConfig:
    return HxdConfig(
        llm=ScriptedLLMConfig(),
        embedding=HashingEmbeddingConfig(dim=DIM),
        vectors=VectorsConfig(num_shards=1, index_type="flat"),
    )


class CountingEmbedder(HashingEmbedder):
    def __init__(self, dim: int = DIM) -> None:
        super().__init__(dim=dim)
        self.texts = 0

    def embed(self, texts):
        self.texts += len(texts)
        return super().embed(texts)


@pytest.fixture(scope="module")
def kb_index_path(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gf_kb") / "index"
    build_kb_index(kb_config(), KB, out, progress=None, batch_size=64)
    return out


@pytest.fixture(scope="module")
def kb_index(kb_index_path):
    with open_index(kb_index_path, kb_config()) as index:
        yield index


def sig_of(graph, u_key: str, v_key: str) -> tuple:
    u, v = graph.node_of(u_key), graph.node_of(v_key)
    entries = [e for e in graph.entries(u) if graph.target[e] == v]
    assert len(entries) == 1
    return graph.signatures[int(graph.sig[entries[0]])]


def test_kb_walk_graph_keeps_each_facts_direction(kb_index):
    graph, texts = walk_graph_of_index(kb_index)
    assert graph.n_entities == graph.n_nodes == kb_index.manifest.counts["entities"]
    assert graph.n_entries == 2 * kb_index.manifest.counts["relations"]  # every edge under both ends
    # The Public Eye --directed_by--> Howard Franklin and --written_by--> him: one edge, two facts, seen from each end
    assert sig_of(graph, "the public eye", "howard franklin") == (("directed by", "out"), ("written by", "out"))
    assert sig_of(graph, "howard franklin", "the public eye") == (("directed by", "in"), ("written by", "in"))
    assert sig_of(graph, "the public eye", "1992") == (("release year", "out"),)
    franklin = graph.node_of("howard franklin")
    entry = next(e for e in graph.entries(franklin) if graph.target[e] == graph.node_of("the public eye"))
    assert graph.describe_entry(entry) == "<-directed by & <-written by"
    assert texts[graph.node_of("the public eye")] == "The Public Eye"
    types = {graph.type_names[graph.node_type[graph.node_of(k)]] for k in ("the public eye", "howard franklin")}
    assert types == {"movie", "person"}


def test_text_walk_graph_reaches_chunks_through_mentions(tmp_path):
    tiny = build_tiny_index(tmp_path / "tiny", dim=DIM)
    with open_index(tiny.root, tiny.cfg) as index:
        graph, texts = walk_graph_of_index(index)
    assert graph.n_nodes == graph.n_entities + 4
    sudhof = graph.node_of("thomas südhof")
    chunks = sorted(graph.keys[v] for v in graph.neighbours(sudhof) if graph.is_chunk(int(v)))
    assert chunks == ["c1", "c2"]
    assert sig_of(graph, "thomas südhof", "c1") == MENTIONED_IN and sig_of(graph, "c1", "thomas südhof") == MENTIONS
    assert sig_of(graph, "thomas südhof", "nobel prize") == (("award", "none"),)  # NER edge: no direction
    assert graph.chunks_of_sources()["thomas_sudhof.md"] == [graph.node_of("c1"), graph.node_of("c2")]
    assert texts[graph.node_of("c3")].startswith("Robert Malenka studies")
    assert graph.names[graph.node_of("c4")] == "Brian Kobilka"  # the document title


def test_features_are_cached_per_index_and_embedder(kb_index, tmp_path):
    emb = CountingEmbedder()
    first = load_or_build_features(kb_index, emb, cache_dir=str(tmp_path), progress=None)
    used = emb.texts
    assert used >= first.graph.n_nodes
    again = load_or_build_features(kb_index, emb, cache_dir=str(tmp_path), progress=None)
    assert emb.texts == used  # read back, nothing embedded
    assert again.graph_hash == first.graph_hash == graph_hash(again.graph)
    assert np.array_equal(again.node_vectors, first.node_vectors) and np.array_equal(
        again.sig_vectors, first.sig_vectors
    )
    dim = first.dim
    out_block = first.sig_vectors[:, :dim]
    in_block = first.sig_vectors[:, dim : 2 * dim]
    # a signature with only outgoing labels has an empty "in" block, and the other way round
    for i, s in enumerate(first.graph.signatures):
        assert bool(np.any(out_block[i])) == any(d == "out" for _, d in s)
        assert bool(np.any(in_block[i])) == any(d == "in" for _, d in s)
    other = load_or_build_features(kb_index, CountingEmbedder(dim=16), cache_dir=str(tmp_path), progress=None)
    assert other.dim == 16  # another embedder: another cache entry
    assert len(list(tmp_path.iterdir())) == 2


def test_question_features_keep_the_order_a_bag_of_words_loses():
    emb = HashingEmbedder(dim=DIM)
    texts = ["films written by the director of TOPIC", "films directed by the writer of TOPIC", "who"]
    assert np.array_equal(question_features(emb, texts, 0), embed_normalized(emb, texts))
    feats = question_features(emb, texts, 3)
    assert feats.shape == (3, 4 * DIM) and feats.dtype == np.float32
    whole, runs = feats[:, :DIM], feats[:, DIM:].reshape(3, 3, DIM)
    assert np.array_equal(whole, embed_normalized(emb, texts))
    # the same words, in another order: nearly the same whole-text vector, different runs
    assert float(whole[0] @ whole[1]) > 0.85
    assert np.array_equal(runs[0, 0], embed_normalized(emb, ["films written"])[0])
    assert np.array_equal(runs[1, 0], embed_normalized(emb, ["films directed"])[0])
    assert np.array_equal(runs[0, 1], embed_normalized(emb, ["by the director"])[0])  # 7 words: 2 + 3 + 2
    assert np.array_equal(runs[1, 1], embed_normalized(emb, ["by the writer"])[0])
    # one word, three runs: the word lands in one of them, the others are zero
    assert sorted(bool(np.any(r)) for r in runs[2]) == [False, False, True]


def test_examples_targets_and_skip_reasons(kb_index):
    graph, _ = walk_graph_of_index(kb_index)
    linker = StartLinker.for_index(kb_index, graph, HashingEmbedder(dim=DIM), GraphFlowConfig())
    items = [
        EvalItem(
            "ok",
            "who directed The Public Eye",
            ("Howard Franklin", "Nobody Known"),
            task="kgqa",
            meta={"question_marked": "who directed [The Public Eye]", "hops": 1},
        ),
        EvalItem(
            "unknown",
            "who directed The Public Eye",
            ("Not In The KB",),
            task="kgqa",
            meta={"question_marked": "who directed [The Public Eye]"},
        ),
        EvalItem(
            "nostart",
            "who directed Zzyzx Qwv",
            ("Howard Franklin",),
            task="kgqa",
            meta={"question_marked": "who directed [Zzyzx Qwv]"},
        ),
    ]
    out = build_examples(items, graph, linker)
    assert out.kind == "kgqa" and [e.id for e in out.examples] == ["ok"]
    ex = out.examples[0]
    assert ex.targets == {graph.node_of("howard franklin")} and ex.starts == (graph.node_of("the public eye"),)
    assert ex.policy_text == f"who directed {TOPIC_PLACEHOLDER}" and ex.question == "who directed The Public Eye"
    assert out.answers_unknown == 1
    assert out.reasons() == {"no answer is an entity of the index": 1, "no linkable start node": 1}
    kept = build_examples(items, graph, linker, keep_unlinked=True)
    assert [e.id for e in kept.examples] == ["ok", "nostart"] and kept.unlinked == 1
    assert kept.examples[1].starts == () and "Zzyzx Qwv" in kept.examples[1].link.reason


def test_a_typed_question_starts_where_its_bracketed_form_does(kb_index):
    graph, _ = walk_graph_of_index(kb_index)
    linker = StartLinker.for_index(kb_index, graph, HashingEmbedder(dim=DIM), GraphFlowConfig())
    typed, marked = linker.link("who directed The Public Eye"), linker.link("who directed [The Public Eye]")
    assert [s.node for s in typed.starts] == [s.node for s in marked.starts] == [graph.node_of("the public eye")]
    assert typed.starts[0].method == "question:name" and typed.starts[0].mention == "The Public Eye"
    assert typed.policy_text == marked.policy_text == f"who directed {TOPIC_PLACEHOLDER}"
    films = linker.link("which films did Howard Franklin direct")  # no leading article
    assert [s.key for s in films.starts] == ["howard franklin"]
    assert films.policy_text == f"which films did {TOPIC_PLACEHOLDER} direct"
    unnamed = linker.link("who directed zzyzx qwv")  # names nothing: the question's vector decides, if anything
    assert all(s.method.startswith("question:entity_") for s in unnamed.starts)


def test_passage_examples_map_documents_to_their_chunks(tmp_path):
    tiny = build_tiny_index(tmp_path / "tiny", dim=DIM)
    with open_index(tiny.root, tiny.cfg) as index:
        graph, _ = walk_graph_of_index(index)
        linker = StartLinker.for_index(
            index,
            graph,
            HashingEmbedder(dim=DIM, model_id=tiny.cfg.embedding.model_id),
            GraphFlowConfig(link_threshold=0.3),
        )
        items = [
            EvalItem("p1", "Where does Thomas Südhof work?", ("Stanford",), ("thomas_sudhof.md",)),
            EvalItem("p2", "Who won the Nobel Prize?", ("Kobilka",), ("missing.txt",)),
        ]
        out = build_examples(items, graph, linker)
    assert out.kind == "passages" and [e.id for e in out.examples] == ["p1"]
    assert out.examples[0].targets == {graph.node_of("c1"), graph.node_of("c2")}
    starts = [graph.keys[s] for s in out.examples[0].starts]
    assert starts and starts[0] == "thomas südhof"  # linked from the question's words, no brackets needed
    assert out.examples[0].link.starts[0].method == "question:name"
    assert out.reasons() == {"gold passage not in the index": 1}


def test_split_is_fixed_by_question():
    from hxd2_ray.graphflow.examples import Example

    exs = [Example(f"q{i}", "", "", (0,), frozenset({1}), ()) for i in range(2000)]
    train, dev, test = split_examples(exs, 0.1, 0.1, seed=13)
    assert abs(len(test) - 200) < 60 and abs(len(dev) - 200) < 60 and len(train) + len(dev) + len(test) == 2000
    # the same question lands in the same part whatever else is in the file; another seed moves them
    _, _, test_half = split_examples(exs[::2], 0.1, 0.1, seed=13)
    assert {e.id for e in test_half} == {e.id for e in test if int(e.id[1:]) % 2 == 0}
    assert {e.id for e in split_examples(exs, 0.1, 0.1, seed=14)[2]} != {e.id for e in test}


def test_metaqa_loader_reads_the_official_layout(tmp_path):
    folder = tmp_path / "2-hop" / "vanilla"
    folder.mkdir(parents=True)
    (folder / "qa_test.txt").write_text(
        "which films did [X] write\tA|B\nbroken line\nwho is [Y]\t \nwhat is Z\tQ\n", encoding="utf-8"
    )
    rep = load_metaqa(folder / "qa_test.txt")
    assert [(i.answers, i.meta["hops"], i.meta["topic_entity"]) for i in rep] == [(("A", "B"), 2, "X")]
    assert [r for _, r in rep.skipped] == [
        "no TAB between question and answers",
        "no answers",
        "no [topic entity] in the question",
    ]
    flat = tmp_path / "my_questions.tsv"
    flat.write_text("what did [X] direct\tA\n", encoding="utf-8")
    # no hop count in the path: the benchmark's name says it
    assert get_benchmark("metaqa-3hop").load(questions=flat).items[0].meta["hops"] == 3
    assert load_metaqa(flat).items[0].meta["hops"] == 0


def test_ranking_metrics_by_hand():
    gold = {"a", "b", "c"}
    ranked = ["x", "b", "a", "y"]
    assert M.hit_at_k(ranked, gold, 1) == 0.0 and M.hit_at_k(ranked, gold, 2) == 1.0
    assert M.reciprocal_rank(ranked, gold) == 0.5 and M.reciprocal_rank(["x"], gold) == 0.0
    results = ["a", "a", "a", "x", "b"]  # a trajectory list with duplicates
    assert M.results_recall_at_k(results, gold, 3) == 1.0  # three gold results, duplicates counted
    assert M.diverse_recall_at_k(results, gold, 3) == pytest.approx(1 / 3)  # one distinct gold target
    assert M.diverse_recall_at_k(results, gold, 5) == pytest.approx(2 / 3)
    assert M.results_recall_at_k(results, gold, 5) == 1.0
    assert M.diverse_recall_at_k(["a", "b"], {"a", "b"}, 20) == 1.0  # over min(|gold|, k)
    with pytest.raises(ValueError):
        M.hit_at_k(ranked, set(), 1)
