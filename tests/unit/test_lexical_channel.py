"""The lexical channel in the ``ppr`` ranking: the best BM25 chunks of the question join the dense chunk hits as
seeds and in the dense floor (``retrieval.ppr_lexical_seeds``), mixed by ``ppr_lexical_weight``; off (0 seeds) the
ranking is what it was. Real Kùzu, Faiss, bm25s and hashing vectors over the tiny index."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from hxd2_ray.embedding.hashing import HashingEmbedder
from hxd2_ray.retrieval import open_index
from hxd2_ray.retrieval.lexical import lexical_shares, mix_channels, write_lexical
from hxd2_ray.retrieval.pipeline import QueryPipeline
from tests.unit.retrieval_fixtures import CHUNKS, DIM, build_tiny_index, keyword_reply, scripted_llm


@pytest.fixture(scope="module")
def tiny_with_lexical(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    tiny = build_tiny_index(tmp_path_factory.mktemp("lexical") / "index")
    write_lexical(Path(tiny.root), [c for c, *_ in CHUNKS], [text for *_, text in CHUNKS])
    with open_index(tiny.root, tiny.cfg) as index:
        yield tiny, index


def _retrieve(tiny: Any, index: Any, question: str, **retrieval: Any) -> Any:
    # The keyword reply names nothing of the index: only the question's own channels (dense, lexical) can seed.
    cfg = tiny.cfg.retrieval.model_copy(update={"chunk_ranking": "ppr", "similarity_threshold": 0.99, **retrieval})
    return QueryPipeline(index, scripted_llm(keyword_reply(["zzz"], ["qqq"])), HashingEmbedder(dim=DIM), cfg).retrieve(
        question
    )


def test_the_question_s_rare_terms_seed_the_walk_when_the_channel_is_on(tiny_with_lexical: Any) -> None:
    tiny, index = tiny_with_lexical
    question = "neurexin synaptic"
    on = _retrieve(tiny, index, question, ppr_lexical_seeds=5, ppr_lexical_weight=1.0)
    assert on.ranking["lexical"] and next(iter(on.ranking["lexical"])) == "c2"  # the only chunk naming neurexin
    assert on.chunks[0].id == "c2"
    assert {s["key"] for s in on.ranking["seeds"] if s["kind"] == "chunk"} >= {"c2"}
    off = _retrieve(tiny, index, question, ppr_lexical_seeds=0)
    assert "lexical" not in off.ranking


def test_shares_and_mixing() -> None:
    assert lexical_shares(None, "anything", 5) == {}
    assert mix_channels({"a": 1.0}, {}, 0.5) == {"a": 1.0} and mix_channels({}, {"b": 1.0}, 0.5) == {"b": 1.0}
    assert mix_channels({"a": 1.0}, {"b": 1.0}, 0.25) == {"a": 0.75, "b": 0.25}


def test_two_builds_of_one_corpus_write_the_same_bytes_whatever_the_string_hash_seed(tmp_path: Path) -> None:
    """bm25s numbers a vocabulary built from a set; the index numbers it in sorted token order, so a rebuild (or
    the same build on another machine) writes identical files."""
    import hashlib
    import os
    import subprocess
    import sys

    script = (
        "import sys; from hxd2_ray.retrieval.lexical import write_lexical; "
        "write_lexical(sys.argv[1], ['c1', 'c2', 'c3'], "
        "['Brian Kobilka won the Nobel Prize', 'TAC4基因位于水稻的2号染色体上', 'receptors and signalling'])"
    )
    digests = []
    for seed in ("1", "2", "3"):
        out = tmp_path / seed
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, "-c", script, str(out)], check=True, env=env, cwd=Path(__file__).parents[2])
        files = sorted(p for p in out.rglob("*") if p.is_file())
        digests.append({p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in files})
    assert digests[0] and digests[0] == digests[1] == digests[2]
