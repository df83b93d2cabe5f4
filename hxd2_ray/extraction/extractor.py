"""Loop-NER over a batch of chunks, one ``llm.complete`` call per round so the engine batches the round.

Rounds (paper, Algorithm 3; ``max_gleaning`` = MAX):

* round 0: extract, for every chunk.
* ``base``  (paper default): repeat MAX times: continue ("MANY entities were missed ...") for the active
  chunks, then judge; only chunks whose judge answers an explicit "yes" stay active. The judge after the
  last allowed continue is skipped: its answer could not unlock another round, so it would be a wasted call.
  With MAX=1 that is exactly the reference's effective behaviour (extract + one continue), minus its bug of
  stopping on "yes" (LightRAG continues while the judge says yes, as here).
* ``trial``: repeat MAX times: judge first; only "yes" chunks continue.

``extraction.gleaning: adaptive`` (the default) sends a chunk into those rounds only where a round can pay: its
first answer parsed, found at least one entity its text names (grounded), and its text still spells out a name
that nothing found covers (:func:`~hxd2_ray.extraction.grounding.names_left`; a text without capitals, such as
Chinese, counts as having one). A chunk leaves after any continue that adds no new grounded entity, and after any
answer that names one entity twice (a small model in a loop repeats itself in the next round too; measured on
SmolLM2-135M, docs/benchmarks/indexing.md). ``always`` keeps the paper's rounds for every chunk.

The judge fails closed: anything but an explicit yes (no, maybe, garbage, an error) stops the chunk.
Per-request errors are retried (only the failed requests, up to ``max_retries`` times). A chunk whose first
extraction still fails is returned with ``error`` set (recorded, not dropped); a failing continue or judge
just ends that chunk's gleaning and keeps what it already has.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Sequence

from hxd2_ray.config import ExtractionConfig
from hxd2_ray.extraction.grounding import Grounding, named_spans, names_left, normalise
from hxd2_ray.extraction.parse import ParsedRecords, parse_reply
from hxd2_ray.extraction.prompts import PromptSet
from hxd2_ray.extraction.render import (
    render_continue_request,
    render_extraction_request,
    render_judge_request,
    render_summary_request,
)
from hxd2_ray.llm.base import LLMClient, LLMRequest, LLMResponse, Message
from hxd2_ray.types import Chunk, EntityMention, Extraction, RelationMention

log = logging.getLogger(__name__)

_AFFIRMATIVE = frozenset({"yes", "是", "是的", "有"})
_JUDGE_TRIM = " \t\r\n\"'`*_.,!?;:()[]。，！？；：“”‘’「」"
_FIRST_WORD_RE = re.compile(r"[\s,.!?;:。，！？；：]+")  # "yes/no" stays one, ambiguous, word


def judge_says_yes(reply: str) -> bool:
    """True only for an explicit yes: the reply's first word, ignoring case, quotes and punctuation.

    "YES", "Yes.", "yes, a few remain" and "是的" continue; "no", "maybe", "yes/no", "" stop.
    """
    text = reply.strip().strip(_JUDGE_TRIM).casefold()
    if not text:
        return False
    return _FIRST_WORD_RE.split(text, maxsplit=1)[0] in _AFFIRMATIVE


@dataclass
class _Outcome:
    """The final response of one request after its retries, and what all attempts cost."""

    response: LLMResponse = field(default_factory=lambda: LLMResponse(text="", error="not sent"))
    attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class _ChunkState:
    chunk: Chunk
    history: tuple[Message, ...] = ()
    # dicts keep first-seen order and drop the exact repeats gleaning tends to produce, which would
    # otherwise inflate mention counts and summed relation weights.
    entities: dict[tuple[str, str, str], EntityMention] = field(default_factory=dict)
    relations: dict[tuple[str, str, str, tuple[str, ...], float], RelationMention] = field(default_factory=dict)
    keywords: dict[str, None] = field(default_factory=dict)
    malformed: int = 0
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str = ""
    grounded: set[str] = field(default_factory=set)  # normalised names of found entities the chunk's text names

    def account(self, outcome: _Outcome) -> None:
        self.llm_calls += outcome.attempts
        self.prompt_tokens += outcome.prompt_tokens
        self.completion_tokens += outcome.completion_tokens

    def add(self, parsed: ParsedRecords) -> None:
        for e in parsed.entities:
            self.entities.setdefault((e.name, e.type, e.description), e)
        for r in parsed.relations:
            self.relations.setdefault((r.source, r.target, r.description, r.keywords, r.strength), r)
        for kw in parsed.content_keywords:
            self.keywords.setdefault(kw, None)
        self.malformed += parsed.malformed

    def to_extraction(self, grounding: Grounding) -> Extraction:
        kept = grounding.ground(self.chunk.text, tuple(self.entities.values()), tuple(self.relations.values()))
        return Extraction(
            chunk_id=self.chunk.id,
            entities=kept.entities,
            relations=kept.relations,
            content_keywords=tuple(self.keywords),
            malformed_records=self.malformed,
            ungrounded_entities=kept.ungrounded_entities,
            ungrounded_relations=kept.ungrounded_relations,
            llm_calls=self.llm_calls,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            error=self.error,
        )


class Extractor:
    """Entity/relation extraction with loop-NER, plus batch summaries of over-long merged descriptions."""

    def __init__(self, llm: LLMClient, cfg: ExtractionConfig, prompts: PromptSet, max_retries: int = 2) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self.llm = llm
        self.cfg = cfg
        self.prompts = prompts
        self.max_retries = max_retries
        # The protocol has one capability flag; a backend with constrained JSON decoding also does choices.
        self._constrained = bool(getattr(llm, "supports_json_schema", False))
        self._grounding = Grounding(cfg, prompts)

    # ------------------------------------------------------------------ rounds

    def _take(self, state: _ChunkState, text: str) -> bool:
        """Add one reply's records to ``state``; whether another gleaning round on the chunk can pay (always True
        with ``gleaning: always``)."""
        parsed = parse_reply(text, state.chunk.id, self.cfg)
        state.add(parsed)
        chunk_text = normalise(state.chunk.text)
        new = 0
        for e in parsed.entities:
            key = normalise(e.name)
            if key and key not in state.grounded and self._grounding.name_in_text(e.name, chunk_text):
                state.grounded.add(key)
                new += 1
        if self.cfg.gleaning == "always":
            return True
        names = [normalise(e.name) for e in parsed.entities]
        if len(set(names)) < len(names):
            return False  # the answer repeats an entity: a model in a loop, whose next round repeats it again
        if not new:
            return False  # parsed nothing, nothing grounded, or nothing new: another round repeats this one
        return bool(names_left(state.chunk.text, state.grounded)) or not named_spans(state.chunk.text)

    def _complete(self, requests: Sequence[LLMRequest]) -> list[_Outcome]:
        """One batched call, then one batched call per retry for only the requests that failed.

        A backend that raises for the whole batch is not caught: that is a batch-level failure for the
        caller (the Ray stage retries batches), not a per-chunk one.
        """
        outcomes = [_Outcome() for _ in requests]
        pending = list(range(len(requests)))
        for _attempt in range(self.max_retries + 1):
            if not pending:
                break
            responses = self.llm.complete([requests[i] for i in pending])
            if len(responses) != len(pending):
                raise RuntimeError(f"LLM returned {len(responses)} responses for {len(pending)} requests")
            failed = []
            for i, resp in zip(pending, responses):
                out = outcomes[i]
                out.response = resp
                out.attempts += 1
                out.prompt_tokens += resp.prompt_tokens
                out.completion_tokens += resp.completion_tokens
                if resp.error:
                    failed.append(i)
            pending = failed
        return outcomes

    def _glean(self, active: list[_ChunkState]) -> list[_ChunkState]:
        """One continue round; returns the chunks whose continue succeeded."""
        if not active:
            return []
        requests = [
            render_continue_request(s.chunk, s.history, self.cfg, self.prompts, self._constrained) for s in active
        ]
        kept = []
        for state, req, out in zip(active, requests, self._complete(requests)):
            state.account(out)
            if out.response.error:
                log.warning(
                    "gleaning of chunk %s failed, keeping its earlier rounds: %s", state.chunk.id, out.response.error
                )
                continue
            state.history = (*req.messages, {"role": "assistant", "content": out.response.text})
            if self._take(state, out.response.text):
                kept.append(state)
        return kept

    def _judge(self, active: list[_ChunkState]) -> list[_ChunkState]:
        """One judge round; returns the chunks that answered an explicit yes. The judge exchange is not
        added to the history (as in LightRAG): the next continue follows the last extraction reply."""
        if not active:
            return []
        requests = [render_judge_request(s.chunk, s.history, self.cfg, self.prompts, self._constrained) for s in active]
        kept = []
        for state, out in zip(active, self._complete(requests)):
            state.account(out)
            if not out.response.error and judge_says_yes(out.response.text):
                kept.append(state)
        return kept

    # --------------------------------------------------------------------- API

    def extract(self, chunks: Sequence[Chunk]) -> list[Extraction]:
        """One :class:`Extraction` per chunk, in input order."""
        states = [_ChunkState(chunk) for chunk in chunks]
        if not states:
            return []
        requests = [render_extraction_request(s.chunk, self.cfg, self.prompts, self._constrained) for s in states]
        active: list[_ChunkState] = []
        for state, req, out in zip(states, requests, self._complete(requests)):
            state.account(out)
            if out.response.error:
                state.error = f"extraction failed after {out.attempts} attempt(s): {out.response.error}"
                continue
            state.history = (*req.messages, {"role": "assistant", "content": out.response.text})
            if self._take(state, out.response.text):
                active.append(state)
        if self.cfg.max_gleaning and self.cfg.gleaning == "adaptive":
            log.debug("gleaning %d of %d chunks (adaptive)", len(active), len(states))

        rounds = self.cfg.max_gleaning
        if self.cfg.loop_ner == "base":
            for i in range(rounds):
                active = self._glean(active)
                if i == rounds - 1 or not active:
                    break  # a judge here could not unlock another round
                active = self._judge(active)
        else:
            for _ in range(rounds):
                active = self._glean(self._judge(active))
                if not active:
                    break
        return [s.to_extraction(self._grounding) for s in states]

    def summarize(self, items: Sequence[tuple[str, list[str], str]]) -> list[str]:
        """(name, descriptions, language) -> one summary each, in order; on failure or an empty reply the
        descriptions joined with newlines (the merged description itself) are kept."""
        if not items:
            return []
        requests = [
            render_summary_request(name, descriptions, self.cfg, self.prompts, language)
            for name, descriptions, language in items
        ]
        summaries = []
        for (name, descriptions, _lang), out in zip(items, self._complete(requests)):
            text = " ".join(out.response.text.split()) if not out.response.error else ""
            if not text:
                log.warning("summary of %r failed, keeping the joined descriptions: %s", name, out.response.error)
                text = "\n".join(descriptions)
            summaries.append(text)
        return summaries
