"""Every config field is described, keeps its YAML key, and changes an index's fingerprint unless it is marked
as not shaping the index (the fingerprint is by exclusion: ``hxd2_ray.config.base``)."""

from __future__ import annotations

import copy
import types
import typing
from collections.abc import Iterator
from typing import Any, Literal, Union

import pytest
from pydantic import BaseModel, ValidationError

from hxd2_ray.config import (
    FlagEmbeddingConfig,
    FlagRerankerConfig,
    HashingEmbeddingConfig,
    HxdConfig,
    OpenAILLMConfig,
    OverlapRerankerConfig,
    RetrievalConfig,
    VllmLLMConfig,
    config_from_data,
    embedding_model_id,
    fingerprint_scope,
    llm_model_id,
)
from hxd2_ray.config.base import FingerprintScope


def _arms(annotation: Any) -> list[Any]:
    if typing.get_origin(annotation) is typing.Annotated:
        return _arms(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return [arm for alt in typing.get_args(annotation) for arm in _arms(alt)]
    return [annotation]


def _models(root: type[BaseModel] = HxdConfig) -> list[type[BaseModel]]:
    """Every model reachable from ``root``: sections, backends of a union, values of a mapping."""
    found: list[type[BaseModel]] = []
    todo = [root]
    while todo:
        model = todo.pop()
        if model in found:
            continue
        found.append(model)
        for info in model.model_fields.values():
            for arm in _arms(info.annotation):
                if typing.get_origin(arm) is dict:
                    arm = typing.get_args(arm)[1]
                if isinstance(arm, type) and issubclass(arm, BaseModel):
                    todo.append(arm)
    return found


def test_every_config_field_has_a_description() -> None:
    models = _models()
    assert len(models) >= 20
    missing = [f"{m.__name__}.{name}" for m in models for name, info in m.model_fields.items() if not info.description]
    assert not missing, f"config fields without a description: {', '.join(missing)}"


# The keys of section retrieval before it was split by concern: indexes record their config, YAML files name them.
_RETRIEVAL_KEYS = """embedding_cache_texts top_k_entities top_k_relations top_k_chunks search_k similarity_threshold
fuzzy_score_cutoff fuzzy_limit question_channel max_keywords max_neighbors_per_entity chunk_ranking dense_keep
dense_temperature dense_floor ppr_damping ppr_dense_share ppr_seed_softmax ppr_title_seeds ppr_dense_seeds
ppr_lexical_seeds ppr_lexical_weight drop_prompt_keywords keyword_grounding keyword_name_score question_names
ppr_specificity ppr_mention_weight ppr_mention_idf ppr_related_weight ppr_synonym_weight ppr_title_weight
ppr_radius ppr_max_nodes ppr_max_fanout
rerank_top_n max_chunk_candidates entity_budget_tokens relation_budget_tokens chunk_budget_tokens context_length
answer_reserve_tokens question_budget_tokens keyword_max_tokens answer_max_tokens temperature cache_dir
search_threads graph_threads resident_graph resident_graph_max_mb verify_checksums""".split()


def test_retrieval_keeps_its_flat_keys_and_a_recorded_config_still_loads() -> None:
    assert sorted(RetrievalConfig.model_fields) == sorted(_RETRIEVAL_KEYS)
    recorded = {"retrieval": {"top_k_entities": 9, "ppr_damping": 0.6, "chunk_budget_tokens": 100, "graph_threads": 2}}
    cfg = config_from_data(recorded)
    assert (cfg.retrieval.top_k_entities, cfg.retrieval.ppr_damping) == (9, 0.6)
    assert (cfg.retrieval.chunk_budget_tokens, cfg.retrieval.graph_threads) == (100, 2)
    # a manifest records the whole config as JSON; it loads back to the same config and fingerprint
    full = HxdConfig(llm=VllmLLMConfig(), embedding=FlagEmbeddingConfig())
    again = config_from_data(full.model_dump(mode="json"))
    assert again == full and again.index_fingerprint("p") == full.index_fingerprint("p")


# -- the fingerprint walk


def _candidates(annotation: Any, current: Any) -> Iterator[Any]:
    """Other values for a field, most likely valid first (validation decides)."""
    arms = [a for a in _arms(annotation) if a is not type(None)]
    if type(None) in _arms(annotation) and current is not None:
        yield None
    for arm in arms:
        origin, args = typing.get_origin(arm), typing.get_args(arm)
        if origin is Literal:
            yield from (a for a in args if a != current)
        elif arm is bool:
            yield not current
        elif arm is int:
            base = current if isinstance(current, int) else 1
            yield from (base + 1, base - 1, 1, 7, 1024)  # 1024: a size in MB (graph.build_buffer_pool_mb)
        elif arm is float:
            base = float(current) if isinstance(current, (int, float)) else 0.5
            yield from (base + 0.05, base - 0.05, base * 0.5, 0.5, 1.0)
        elif arm is str:
            yield f"{current or 'other'}-changed"
        elif origin is tuple:
            yield (*(current or ()), "zz-added")
        elif isinstance(arm, type) and issubclass(arm, BaseModel) and current is None:
            yield {"backend": arm.model_fields["backend"].default} if "backend" in arm.model_fields else {}
        elif origin is dict:
            value = args[1]
            yield {"zz": {} if isinstance(value, type) and issubclass(value, BaseModel) else 1.0}


def _at(data: dict[str, Any], path: tuple[str, ...]) -> Any:
    for part in path:
        data = data[part]
    return data


def _leaves(
    section: BaseModel, path: tuple[str, ...], scope: FingerprintScope
) -> Iterator[tuple[tuple[str, ...], Any, FingerprintScope]]:
    for name, info in type(section).model_fields.items():
        value = getattr(section, name)
        field_scope = fingerprint_scope(info, scope)
        if isinstance(value, BaseModel):
            yield from _leaves(value, (*path, name), field_scope)
        else:
            yield (*path, name), info.annotation, field_scope


# Every backend tag of a union section (llm, embedding, rerank) and every value of a plain one (graph: kuzu,
# ladybug); an invalid one for a section fails validation.
_BACKENDS = sorted(
    {
        value
        for m in _models()
        if "backend" in m.model_fields
        for value in typing.get_args(m.model_fields["backend"].annotation) or (m.model_fields["backend"].default,)
    }
)

# One config per backend of each union section, so every backend's fields are walked.
_BASES = {
    "defaults": HxdConfig(),
    "vllm+flag+flag-rerank": HxdConfig(
        llm=VllmLLMConfig(),
        embedding=FlagEmbeddingConfig(),
        rerank=FlagRerankerConfig(model="/models/reranker"),
    ),
    "openai+overlap+graphflow-embedding": config_from_data(
        {
            "llm": OpenAILLMConfig().model_dump(mode="json"),
            "rerank": OverlapRerankerConfig().model_dump(mode="json"),
            "graphflow": {"feature_embedding": HashingEmbeddingConfig().model_dump(mode="json")},
        }
    ),
    "vllm-with-id": HxdConfig(llm=VllmLLMConfig(model_id="named")),
}


@pytest.mark.parametrize("base_name", sorted(_BASES))
def test_every_field_changes_the_fingerprint_unless_marked(base_name: str) -> None:
    base = _BASES[base_name]
    data = base.model_dump(mode="json")
    fp, staging = base.index_fingerprint("p"), base.staging_fingerprint("p")
    checked, wrong = 0, []
    for path, annotation, scope in _leaves(base, (), "staging"):
        before = _at(data, path)
        others = _BACKENDS if path[-1] == "backend" else _candidates(annotation, before)
        for value in others:
            if value == before:
                continue
            changed = copy.deepcopy(data)
            if path[-1] == "backend":  # another backend: that backend's defaults
                _at(changed, path[:-2])[path[-2]] = {"backend": value}
            else:
                _at(changed, path[:-1])[path[-1]] = value
            try:
                cfg = HxdConfig.model_validate(changed)
            except ValidationError:
                continue
            break
        else:
            pytest.fail(f"no other valid value for {'.'.join(path)} (from {before!r})")
        checked += 1
        ids_changed = (llm_model_id(cfg.llm), embedding_model_id(cfg.embedding)) != (
            llm_model_id(base.llm),
            embedding_model_id(base.embedding),
        )
        in_index = scope in ("staging", "graph") or (scope == "model_id" and ids_changed)
        in_staging = scope == "staging" or (scope == "model_id" and ids_changed)
        if (cfg.index_fingerprint("p") != fp) != in_index or (cfg.staging_fingerprint("p") != staging) != in_staging:
            wrong.append(f"{'.'.join(path)}={value!r} ({scope})")
    assert not wrong, "fingerprints that do not follow the fields' markers: " + "; ".join(wrong)
    assert checked >= 150  # the walk reached the whole tree


def test_the_markers_that_matter() -> None:
    base = HxdConfig()
    fp = base.index_fingerprint("p")
    # the Faiss parameters shape the written shards: the index changes, the staged rows are reused
    for override in (
        "vectors.ivf_nlist=64",
        "vectors.hnsw_m=16",
        "vectors.ivf_nprobe=8",
        "vectors.ivf_max_vectors=5",
        "vectors.ivfpq_refine=0",
    ):
        other = config_from_data({}, [override])
        assert other.index_fingerprint("p") != fp, override
        assert other.staging_fingerprint("p") == base.staging_fingerprint("p"), override
    # a model moved to another folder under the same name is the same model
    here = HxdConfig(embedding=FlagEmbeddingConfig(model="/a/models/bge-m3"))
    there = HxdConfig(embedding=FlagEmbeddingConfig(model="/b/models/bge-m3"))
    assert here.index_fingerprint("p") == there.index_fingerprint("p")


def test_a_field_added_after_release_counts_only_when_set() -> None:
    """ADDED_AT_DEFAULT: vectors.ivf_max_vectors and vectors.ivfpq_refine came after indexes were released; at their
    defaults they are not in the fingerprint, so an upgrade alone leaves every index's fingerprint as it was."""
    from hxd2_ray.config import fingerprint_factors

    default = fingerprint_factors(HxdConfig().vectors, "graph")
    assert "ivf_max_vectors" not in default and "ivfpq_refine" not in default and "ivf_nprobe" in default
    changed = fingerprint_factors(config_from_data({}, ["vectors.ivfpq_refine=0"]).vectors, "graph")
    assert changed["ivfpq_refine"] == 0
    # The shipped defaults' index fingerprint, as the release before these fields had it (computed there). A change
    # here makes every existing index "built with other settings" on upgrade: say so in the upgrade notes
    # (docs/how-to/backup-restore-upgrade.md), then pin the new value. The converters' versions count too: they are
    # pinned exactly in pyproject.toml (a fresh install got lxml 6.2.1 while they were a range, and this failed).
    assert HxdConfig().index_fingerprint("p") == "7e181dffcbaa39b7"
