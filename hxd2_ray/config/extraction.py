"""How documents become chunks, and chunks entities and relations (all of it shapes the staged rows)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from hxd2_ray.config.base import FrozenSection

DEFAULT_ENTITY_TYPES = (
    "concept",
    "date",
    "location",
    "keyword",
    "organization",
    "person",
    "event",
    "work",
    "nature",
    "artificial",
    "science",
    "technology",
    "mission",
    "gene",
)


class ChunkingConfig(FrozenSection):
    chunk_size_chars: int = Field(768, gt=16, description="Characters per chunk (paper: 768; reference code: 900).")
    overlap_chars: int = Field(32, ge=0, description="Characters shared by neighbouring chunks.")
    min_chunk_chars: int = Field(10, ge=1, description="Shorter chunks (after stripping) are dropped.")
    markdown_header_levels: int = Field(3, ge=0, le=6, description="Split markdown on H1..Hn; header path is kept.")

    @model_validator(mode="after")
    def _overlap_below_size(self) -> "ChunkingConfig":
        if self.overlap_chars >= self.chunk_size_chars:
            raise ValueError("overlap_chars must be smaller than chunk_size_chars")
        return self


class ExtractionConfig(FrozenSection):
    output_format: Literal["json", "tuples"] = Field(
        "json", description="json: schema-constrained decoding (default); tuples: the paper's LightRAG records."
    )
    loop_ner: Literal["base", "trial"] = Field(
        "base", description="base: ask to continue, then judge (paper default); trial: judge first."
    )
    max_gleaning: int = Field(1, ge=0, le=8, description="Extra extraction rounds per chunk (0 disables loop-NER).")
    gleaning: Literal["adaptive", "always"] = Field(
        "adaptive",
        description="Which chunks get the gleaning rounds. adaptive: a chunk whose first answer parsed, found an "
        "entity its text names, and whose text names something not found yet; a further round only after one that "
        "added a grounded entity; never after an answer that repeats an entity (a model in a loop). always: every "
        "chunk, every round (the paper). max_gleaning=0: none.",
    )
    entity_types: tuple[str, ...] = Field(
        DEFAULT_ENTITY_TYPES,
        min_length=1,
        description="Entity types the extraction prompt and its JSON schema offer; a reply's other types are mapped "
        "to the nearest listed one when parsed.",
    )
    language: Literal["auto", "zh", "en"] = Field("auto", description="Prompt language; auto picks per chunk.")
    max_tokens_per_call: int = Field(1024, gt=0, description="Completion cap of one extraction call.")
    completion_tokens_per_char: float = Field(
        0.4,
        ge=0,
        description="Completion budget of an extraction or gleaning call per character of its chunk, between "
        "min_tokens_per_call and max_tokens_per_call (a short chunk cannot run on to the cap); 0: always "
        "max_tokens_per_call.",
    )
    min_tokens_per_call: int = Field(64, gt=0, description="The least completion budget of an extraction call.")
    max_description_chars: int = Field(
        100,
        ge=0,
        description="json format: the schema ends each description after this many characters (a small model "
        "repeats one sentence until the token cap otherwise); 0: no limit.",
    )
    max_name_chars: int = Field(
        64, ge=0, description="json format: the schema ends each entity name after this many characters; 0: no limit."
    )
    chars_per_entity: int = Field(
        128,
        ge=0,
        description="json format: the schema allows about one entity, and one relation, per this many characters "
        "of the chunk (in steps of 4, from 4 to 30), so a model repeating one entity moves on to the relations; "
        "0: always 30.",
    )
    description_token_budget: int = Field(
        500, gt=0, description="A merged description longer than this (serving tokenizer) is summarised by the LLM."
    )
    summary_max_tokens: int = Field(
        256, gt=0, description="Completion cap of the call that summarises a merged description over the budget."
    )
    max_entity_name_chars: int = Field(
        256, gt=0, description="Longer names are truncated and flagged (lookups truncate the same way)."
    )
    grounding: Literal["strict", "fuzzy", "off"] = Field(
        "fuzzy",
        description="Keep only what the chunk's text supports: an entity whose name occurs in its chunk (case, "
        "Unicode NFKC and whitespace normalised) and a relation whose two ends are such entities; "
        "names of the prompt's own few-shot examples never pass. strict: the exact normalised name; "
        "fuzzy: also a span scoring at least grounding_min_score (inflections, plurals); off: keep all.",
    )
    grounding_min_score: float = Field(
        88.0,
        ge=50,
        le=100,
        description="fuzzy grounding: the least rapidfuzz partial_ratio (0-100) between a name and its chunk.",
    )

    @field_validator("grounding", mode="before")
    @classmethod
    def _grounding_off(cls, value: Any) -> Any:
        return "off" if value is False else value  # YAML reads a bare `off` (and --set ...=off) as false
