"""ScriptedLLM: a deterministic fake :class:`LLMClient` shipped with the library.

Used by unit tests (exact replies), integration tests that count entities exactly (the built-in extraction
mode) and pipeline-overhead benchmarks (``record=False``). Script modes, picked by the ``script`` argument:

* ``None`` (default, and what :meth:`ScriptedLLM.from_config` builds): the built-in mode, which follows every
  protocol of the project by request tag — extraction (:meth:`ScriptedLLM._extraction_reply`) and querying
  (:meth:`ScriptedLLM._query_reply`: keywords, plans, verifier checks, answers) — so the CLI, the evaluation job
  and Serve give the same answers over the same index;
* a sequence of replies, consumed in order (running out raises :class:`ScriptExhausted` naming the prompt);
* a mapping substring -> reply: the first key found in the last message wins, else the first key found
  anywhere in the conversation (no match raises :class:`ScriptExhausted`);
* a callable ``handler(request) -> str | LLMResponse``.

Failure injection: the first ``fail_first_n`` requests, and every request whose conversation contains one of
the ``fail_when`` substrings, get a response with ``error`` set (the batch still returns).
"""

from __future__ import annotations

import json
import re
import zlib
from typing import Any, Callable, Iterable, Mapping, Sequence

from hxd2_ray.config import DEFAULT_ENTITY_TYPES, ScriptedLLMConfig
from hxd2_ray.llm.base import LLMRequest, LLMResponse, LLMUsage
from hxd2_ray.prompt_templates import TEXT_MARKER

Handler = Callable[[LLMRequest], "str | LLMResponse"]
Script = Sequence[str] | Mapping[str, str] | Handler | None

MAX_FAKE_ENTITIES = 12
_STOPWORDS = frozenset(
    "a an and as at but by for from he her his i if in is it its of on or she that the their these they this "
    "those to we when while with after before".split()
)
# Capitalised word runs ("Marie Curie") or CJK runs, in order of appearance.
_NAME_RE = re.compile(r"(?P<latin>[A-Z][A-Za-z0-9'’-]*(?:[ \t]+[A-Z][A-Za-z0-9'’-]*)*)|(?P<cjk>[\u4e00-\u9fff]{2,})")
_GLEAN_WORD_RE = re.compile(r"\b[a-z][a-z-]{5,}\b")
_CONTINUE_HINTS = ("MANY entities were missed", "遗漏")
_SUMMARY_HINTS = ("Description list", "描述列表")


class ScriptExhausted(RuntimeError):
    """The script has no reply for a request (list ran out, no mapping key matched)."""


def _conversation(req: LLMRequest) -> str:
    return "\n".join(m["content"] for m in req.messages)


def _describe(req: LLMRequest) -> str:
    last = req.messages[-1]["content"] if req.messages else ""
    return f"tag={req.tag!r} last message={last[:300]!r}"


class ScriptedLLM:
    supports_json_schema = True
    thread_safe = False  # replies in arrival order (list mode) need one caller at a time
    max_model_len: int | None = None

    def __init__(
        self,
        script: Script = None,
        *,
        model_id: str = "scripted-echo",
        tokens_per_word: float = 1.3,
        record: bool = True,
        fail_first_n: int = 0,
        fail_when: Iterable[str] = (),
        reject_when: Iterable[str] = (),
        entity_types: Sequence[str] = DEFAULT_ENTITY_TYPES,
    ) -> None:
        self.model_id = model_id
        self.tokens_per_word = tokens_per_word
        self.record = record
        self.fail_first_n = fail_first_n
        self.fail_when = tuple(fail_when)
        self.reject_when = tuple(reject_when)
        self.entity_types = tuple(entity_types)
        self.requests: list[LLMRequest] = []  # every request received, when record=True
        self.batch_sizes: list[int] = []  # one entry per complete() call, when record=True
        self.complete_calls = 0
        self.usage = LLMUsage()
        self._seen = 0
        self._replies: list[str] | None = None
        self._by_substring: Mapping[str, str] | None = None
        self._handler: Handler | None = None
        if script is None:
            self._handler = self._builtin_reply
        elif callable(script):
            self._handler = script
        elif isinstance(script, Mapping):
            self._by_substring = dict(script)
        elif isinstance(script, (str, bytes)):
            raise TypeError("script must be a sequence of replies, not one string")
        else:
            self._replies = list(script)
        self._next_reply = 0

    @classmethod
    def from_config(cls, cfg: ScriptedLLMConfig, **kwargs: Any) -> "ScriptedLLM":
        return cls(
            model_id=cfg.model_id,
            tokens_per_word=cfg.tokens_per_word,
            fail_when=cfg.fail_when,
            reject_when=cfg.reject_when,
            **kwargs,
        )

    # ----------------------------------------------------------------- protocol

    def count_tokens(self, text: str) -> int:
        # Same estimate as hxd2_ray.llm.tokens for the scripted backend, so budgets agree across modules.
        return int(len(text.split()) * self.tokens_per_word + 0.5)

    def complete(self, requests: Sequence[LLMRequest]) -> list[LLMResponse]:
        self.complete_calls += 1
        if self.record:
            self.batch_sizes.append(len(requests))
        responses = []
        for req in requests:
            if self.record:
                self.requests.append(req)
            resp = self._respond(req)
            self.usage.add(req, resp)
            responses.append(resp)
        return responses

    def requests_by_tag(self, tag: str) -> list[LLMRequest]:
        return [r for r in self.requests if r.tag == tag]

    # ------------------------------------------------------------------ replies

    def _respond(self, req: LLMRequest) -> LLMResponse:
        self._seen += 1
        prompt_tokens = self.count_tokens(_conversation(req))
        if self._seen <= self.fail_first_n:
            return LLMResponse("", prompt_tokens, 0, "error", error=f"scripted failure: request #{self._seen}")
        if self.fail_when:
            conv = _conversation(req)
            hit = next((s for s in self.fail_when if s in conv), None)
            if hit is not None:
                return LLMResponse("", prompt_tokens, 0, "error", error=f"scripted failure: matched {hit[:60]!r}")
        reply = self._scripted_reply(req)
        if isinstance(reply, LLMResponse):
            return reply
        return LLMResponse(reply, prompt_tokens, self.count_tokens(reply))

    def _scripted_reply(self, req: LLMRequest) -> str | LLMResponse:
        if self._handler is not None:
            return self._handler(req)
        if self._replies is not None:
            if self._next_reply >= len(self._replies):
                raise ScriptExhausted(f"ScriptedLLM ran out of its {len(self._replies)} replies; {_describe(req)}")
            reply = self._replies[self._next_reply]
            self._next_reply += 1
            return reply
        assert self._by_substring is not None
        last = req.messages[-1]["content"] if req.messages else ""
        for key, reply in self._by_substring.items():
            if key in last:
                return reply
        conv = _conversation(req)
        for key, reply in self._by_substring.items():
            if key in conv:
                return reply
        raise ScriptExhausted(f"ScriptedLLM has no reply matching the request; {_describe(req)}")

    # ------------------------------------------------------------ built-in mode

    def _builtin_reply(self, req: LLMRequest) -> str:
        kind = req.tag or _guess_kind(req)
        if kind in QUERY_TAGS:
            return self._query_reply(kind, req)
        return self._extraction_reply(req)

    def _query_reply(self, kind: str, req: LLMRequest) -> str:
        """Deterministic replies of the query side, from the question (the last thing of every user message):

        * keywords: the question's capitalised names (question words dropped) as low-level keywords;
        * logic_plan / logic_repair: retrieve everything about the first name, output it (an empty plan when the
          question names nothing);
        * logic_verify_pre / _post: "yes", or "no" when the question contains one of ``reject_when``;
        * logic_answer, answer: a sentence naming the question and what the evidence or context holds;
        * logic_deduce: "cannot be determined";
        * rewrite: the question with its first pronoun (it, he, she, they, ...) replaced by the latest name the
          conversation's user messages gave, or the question unchanged.
        """
        question = question_of(req)
        names = question_names(question)
        if kind == "keywords":
            return json.dumps({"high_level_keywords": [], "low_level_keywords": names}, ensure_ascii=False)
        if kind in ("logic_plan", "logic_repair"):
            if not names:
                return json.dumps({"steps": []})
            steps = [
                {
                    "step": question[:200],
                    "action": {"op": "retrieval", "alias": "found", "args": {"s": names[0], "p": None, "o": None}},
                },
                {"step": "Answer.", "action": {"op": "output", "args": {"aliases": ["$found"]}}},
            ]
            return json.dumps({"steps": steps}, ensure_ascii=False)
        if kind.startswith("logic_verify"):
            return "no" if any(marker in question for marker in self.reject_when) else "yes"
        if kind == "logic_answer":
            found = _section(_last(req), "## Answer candidates") or ["none"]
            return f"Scripted logic-form answer to: {question[:200]} The evidence gives {found[0].strip()[:200]}."
        if kind == "answer":
            rows = _section(_last(req), "## Entities")[1:]  # the first line is the CSV header (or "(none)")
            entities = [r.split(",")[1] for r in rows if r.count(",") >= 2][:3]
            known = ", ".join(entities) if entities else "nothing relevant"
            return f"Scripted answer to: {question[:200]} The context names {known}."
        if kind == "rewrite":
            conversation = _section(_last(req), "## Conversation") or _section(_last(req), "## 对话")
            return _rewrite(question, conversation)
        return "cannot be determined"  # logic_deduce

    def _extraction_reply(self, req: LLMRequest) -> str:
        """Deterministic answers that follow the extraction protocol (same request -> same reply).

        * extract: capitalised word runs / CJK runs (cut into 4-character pieces) of the chunk text become
          entities (up to 12, first occurrence order), consecutive ones are related (strength 1.0);
          the first three names are the content keywords;
        * glean: at most one extra entity, the longest lower-case word of 6+ letters in the chunk that no
          earlier reply mentions (nothing when there is none);
        * judge: "no"; summarize: the first 48 words of the joined descriptions;
        * anything else: the first choice when choices are given, else an echo of the last message.
        """
        kind = req.tag or _guess_kind(req)
        if kind == "extract":
            names = _find_names(_chunk_text(req))
            return self._format_records(req, names, relations=True)
        if kind == "glean":
            extra = _glean_word(req)
            return self._format_records(req, [extra] if extra else [], relations=False)
        if kind == "judge":
            if req.choices and "no" not in req.choices:
                return req.choices[-1]
            return "no"
        if kind == "summarize":
            last = req.messages[-1]["content"]
            descriptions = [line[2:].strip() for line in last.splitlines() if line.startswith("- ")]
            return " ".join(" ".join(descriptions).split()[:48])
        if req.choices:
            return req.choices[0]
        last = req.messages[-1]["content"] if req.messages else ""
        return "scripted echo: " + " ".join(last.split()[:32])

    def _entity_type(self, req: LLMRequest, name: str) -> str:
        types: Sequence[str] = self.entity_types
        if req.json_schema is not None:
            try:
                types = req.json_schema["properties"]["entities"]["items"]["properties"]["type"]["enum"]
            except (KeyError, TypeError):
                pass
        return types[zlib.crc32(name.encode("utf-8")) % len(types)] if types else "concept"

    def _format_records(self, req: LLMRequest, names: list[str], relations: bool) -> str:
        entities = [
            {"name": n, "type": self._entity_type(req, n), "description": f"{n} is mentioned in the text."}
            for n in names
        ]
        rels: list[dict[str, Any]] = []
        if relations:
            rels = [
                {
                    "source": a,
                    "target": b,
                    "description": f"{a} appears together with {b}.",
                    "keywords": ["co-occurrence"],
                    "strength": 1.0,
                }
                for a, b in zip(names, names[1:])
            ]
        keywords = names[:3] if relations else []
        if _wants_json(req):
            payload = {"entities": entities, "relations": rels, "content_keywords": keywords}
            return json.dumps(payload, ensure_ascii=False)
        records = [f'("entity"<|>{e["name"]}<|>{e["type"]}<|>{e["description"]})' for e in entities]
        records += [
            f'("relationship"<|>{r["source"]}<|>{r["target"]}<|>{r["description"]}<|>{", ".join(r["keywords"])}'
            f"<|>{r['strength']})"
            for r in rels
        ]
        if keywords:
            records.append(f'("content_keywords"<|>{", ".join(keywords)})')
        return "##\n".join(records) + "<|COMPLETE|>"


QUERY_TAGS = frozenset(
    {
        "keywords",
        "logic_plan",
        "logic_repair",
        "logic_verify_pre",
        "logic_verify_post",
        "logic_answer",
        "answer",
        "logic_deduce",
        "rewrite",
    }
)
# Where the question starts in a user message (prompts put it last): the last of these markers wins.
_QUESTION_MARKERS = ("## Question\n", "## 问题\n", "Sub-question:", "Question:", "问题：", "问题:", "Message:")
_QUESTION_WORDS = frozenset(
    "A An And As At But By For From How If In Is It Of On Or The What When Where Which Who "
    "Whom Whose Why With Does Did Do Are Was Were Tell Give List Name Can Could Should Would".split()
)
_QUESTION_NAME_RE = re.compile(r"[A-Z][\w'’-]*(?:\s+[A-Z][\w'’-]*)*|[\u4e00-\u9fff]{2,}")


def _last(req: LLMRequest) -> str:
    return req.messages[-1]["content"] if req.messages else ""


def question_of(req: LLMRequest) -> str:
    """The question of a query-side request: the text after the last question marker of the last message."""
    last = _last(req)
    cut = max(((last.rfind(m), m) for m in _QUESTION_MARKERS), key=lambda x: x[0])
    if cut[0] < 0:
        return last.strip()
    return last[cut[0] + len(cut[1]) :].strip()


def question_names(question: str, limit: int = 8) -> list[str]:
    """Capitalised word runs and CJK runs of a question, leading question words dropped, first occurrence order."""
    names: dict[str, str] = {}
    for match in _QUESTION_NAME_RE.finditer(question):
        words = match.group(0).split()
        while words and words[0] in _QUESTION_WORDS:
            words = words[1:]
        if words:
            name = " ".join(words).rstrip("?.!,;:")
            if name:
                names.setdefault(name.casefold(), name)
    return list(names.values())[:limit]


_PRONOUN = re.compile(r"\b(?:it|he|she|they|him|her|them|this)\b", re.IGNORECASE)


def _rewrite(question: str, conversation: list[str]) -> str:
    said = [line.split(":", 1)[1] for line in conversation if line.startswith("User:")]
    names = [name for line in reversed(said) for name in question_names(line)]
    if not names or not _PRONOUN.search(question):
        return question
    return _PRONOUN.sub(names[0], question, count=1)


def _section(text: str, header: str) -> list[str]:
    """Lines of a ``## header`` section of a prompt, up to the next ``## ``."""
    lines = text.split("\n")
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == header) + 1
    except StopIteration:
        return []
    out = []
    for line in lines[start:]:
        if line.startswith("## "):
            break
        if line.strip():
            out.append(line)
    return out


def _guess_kind(req: LLMRequest) -> str:
    last = req.messages[-1]["content"] if req.messages else ""
    if TEXT_MARKER in last:
        return "extract"
    if any(h in last for h in _CONTINUE_HINTS):
        return "glean"
    if req.choices and len(req.messages) > 2:
        return "judge"
    if any(h in last for h in _SUMMARY_HINTS):
        return "summarize"
    return ""


def _wants_json(req: LLMRequest) -> bool:
    if req.json_schema is not None:
        return True
    system = next((m["content"] for m in req.messages if m["role"] == "system"), "")
    return "JSON" in system


def _chunk_text(req: LLMRequest) -> str:
    for m in reversed(req.messages):
        content = m["content"]
        if m["role"] == "user" and TEXT_MARKER in content:
            return content.rsplit(TEXT_MARKER, 1)[1].lstrip("\n")
    return req.messages[-1]["content"] if req.messages else ""


def _find_names(text: str) -> list[str]:
    names: dict[str, str] = {}
    for match in _NAME_RE.finditer(text):
        if match.group("cjk"):
            run = match.group("cjk")
            # Chinese has no spaces: cut a run into 4-character pieces (a trailing single character is dropped).
            found = [run[i : i + 4] for i in range(0, len(run), 4) if len(run[i : i + 4]) >= 2]
        else:
            words = match.group("latin").split()
            while words and words[0].casefold() in _STOPWORDS:
                words = words[1:]
            found = [" ".join(words)] if words else []
        for name in found:
            names.setdefault(name.casefold(), name)
            if len(names) >= MAX_FAKE_ENTITIES:
                return list(names.values())
    return list(names.values())


def _glean_word(req: LLMRequest) -> str | None:
    earlier = " ".join(m["content"] for m in req.messages if m["role"] == "assistant").casefold()
    best = None
    for word in _GLEAN_WORD_RE.findall(_chunk_text(req)):
        if word in earlier:
            continue
        if best is None or len(word) > len(best):
            best = word
    return best
