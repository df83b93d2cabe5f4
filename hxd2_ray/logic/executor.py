"""Run a validated logic-form plan against the knowledge graph and collect the evidence.

Every graph access is one of the fixed, parameterised templates in :data:`LOGIC_TEMPLATES`, executed through
:class:`GraphQueries` (which uses ``KuzuGraphStore._rows``: the ``check_params`` guard, bound ``$params``
only). Plan arguments never reach query text: names are linked to entity keys (exact key, then rapidfuzz
over entity names, then a vector search), predicates are matched in Python against each edge's keywords.

Graph conventions this module relies on (see :mod:`hxd2_ray.logic.metaqa`):

* ``RELATED`` is stored once per unordered pair, so an edge's direction is not in the graph structure. A
  directed fact ``S --p--> O`` is recorded as a line ``"S --p--> O"`` in the edge description (one line per
  fact; ``p`` is also one of the edge's keywords). Edges without such lines (LLM-extracted edges) are
  undirected facts whose predicates are their keywords.
* Numbers are value entities: "Zhefu 802" --height_cm--> "85". :func:`parse_number` reads the number from the
  entity name ("85", "85 cm", "1,200", "7.5").
"""

from __future__ import annotations

import math
import re
import threading
import time
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
from rapidfuzz import fuzz, process

from hxd2_ray.config import ExtractionConfig
from hxd2_ray.extraction.merge import entity_key, normalize_name
from hxd2_ray.llm.base import LLMClient, LLMRequest
from hxd2_ray.logic.plan import (
    KIND_BOOLEAN,
    KIND_ENTITIES,
    KIND_NUMBER,
    KIND_STRINGS,
    KIND_TEXT,
    MathError,
    Plan,
    Ref,
    Step,
    evaluate_math,
    format_number,
    math_refs,
)

__all__ = [
    "LOGIC_TEMPLATES",
    "EntityLinker",
    "Fact",
    "GraphQueries",
    "LinkResult",
    "LogicFormEvidence",
    "LogicFormExecutor",
    "PredicateMatcher",
    "QueryTrace",
    "StepTrace",
    "Value",
    "directed_fact_line",
    "edge_facts",
    "parse_number",
]

# ---------------------------------------------------------------------------------------------------
# Query templates (to move into kuzu_store.py). Constants only: every value is a bound $param.

_LF_EDGE = (
    "a.key AS a_key, a.name AS a_name, b.key AS b_key, b.name AS b_name,"
    " r.description AS description, r.keywords AS keywords"
)
Q_LF_EDGES = f"UNWIND $keys AS k MATCH (a:Entity {{key: k}})-[r:RELATED]-(b:Entity) RETURN {_LF_EDGE} LIMIT $limit"
Q_LF_PATHS_2HOP = (
    "UNWIND $keys AS k MATCH (a:Entity {key: k})-[r1:RELATED]-(m:Entity)-[r2:RELATED]-(b:Entity)"
    " WHERE b.key <> k"
    " RETURN a.key AS a_key, a.name AS a_name, m.key AS m_key, m.name AS m_name, b.key AS b_key, b.name AS b_name,"
    " r1.description AS d1, r1.keywords AS k1, r2.description AS d2, r2.keywords AS k2 LIMIT $limit"
)
Q_LF_EDGES_BETWEEN = (
    f"UNWIND $pairs AS p MATCH (a:Entity {{key: p.s}})-[r:RELATED]-(b:Entity {{key: p.t}}) RETURN {_LF_EDGE}"
)
Q_LF_PATHS_BETWEEN = (
    "UNWIND $pairs AS p MATCH (a:Entity {key: p.s})-[r1:RELATED]-(m:Entity)-[r2:RELATED]-(b:Entity {key: p.t})"
    " RETURN a.key AS a_key, a.name AS a_name, m.key AS m_key, m.name AS m_name, b.key AS b_key, b.name AS b_name,"
    " r1.description AS d1, r1.keywords AS k1, r2.description AS d2, r2.keywords AS k2 LIMIT $limit"
)
Q_LF_ENTITY_NAMES = "MATCH (e:Entity) RETURN e.key AS key, e.name AS name ORDER BY e.key SKIP $skip LIMIT $limit"
Q_LF_NAMES_OF = "UNWIND $keys AS k MATCH (e:Entity {key: k}) RETURN e.key AS key, e.name AS name"

LOGIC_TEMPLATES: Mapping[str, str] = MappingProxyType({
    "lf_edges": Q_LF_EDGES,
    "lf_paths_2hop": Q_LF_PATHS_2HOP,
    "lf_edges_between": Q_LF_EDGES_BETWEEN,
    "lf_paths_between": Q_LF_PATHS_BETWEEN,
    "lf_entity_names": Q_LF_ENTITY_NAMES,
    "lf_names_of": Q_LF_NAMES_OF,
})


@dataclass(frozen=True, slots=True)
class QueryTrace:
    template: str  # a LOGIC_TEMPLATES name
    params: Mapping[str, Any]
    rows: int
    seconds: float


class GraphQueries:
    """Named-template reads over a graph store; every call is traced for the evidence.

    ``store`` is a :class:`~hxd2_ray.graph.kuzu_store.KuzuGraphStore` (anything with the guarded
    ``_rows(query, params)``; a store that grows a public ``run_template(name, params)`` is used through it).
    """

    def __init__(self, store: Any, templates: Mapping[str, str] = LOGIC_TEMPLATES):
        self.store = store
        self.templates = templates
        self._local = threading.local()

    @property
    def trace(self) -> list[QueryTrace] | None:
        """Where this thread's queries are recorded (set by the executor around a step); None: not traced."""
        return getattr(self._local, "trace", None)

    @trace.setter
    def trace(self, value: list[QueryTrace] | None) -> None:
        self._local.trace = value

    def run_template(self, name: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        if name not in self.templates:
            raise KeyError(f"unknown query template {name!r}")
        started = time.perf_counter()
        runner = getattr(self.store, "run_template", None)
        if callable(runner):
            rows = runner(name, dict(params))
        else:
            rows = self.store._rows(self.templates[name], dict(params))
        if self.trace is not None:
            self.trace.append(QueryTrace(name, _trace_params(params), len(rows), time.perf_counter() - started))
        return rows

    def get_entities(self, keys: Sequence[str]) -> list[dict[str, Any]]:
        return list(self.store.get_entities(keys))

    def counts(self) -> dict[str, int]:
        return self.store.counts()

    def names_of(self, keys: Sequence[str]) -> dict[str, str]:
        keys = list(dict.fromkeys(keys))
        if not keys:
            return {}
        return {r["key"]: r["name"] for r in self.run_template("lf_names_of", {"keys": keys})}


def _trace_params(params: Mapping[str, Any], max_items: int = 50) -> dict[str, Any]:
    """Parameters as recorded in the evidence: long lists are cut (the count is kept)."""
    out: dict[str, Any] = {}
    for k, v in params.items():
        if isinstance(v, list) and len(v) > max_items:
            out[k] = v[:max_items] + [f"... {len(v) - max_items} more"]
        else:
            out[k] = v
    return out


# ---------------------------------------------------------------------------------------------------
# Facts and numbers

ARROW_FMT = "{s} --{p}--> {o}"


def directed_fact_line(subject: str, predicate: str, obj: str) -> str:
    """The description line that records a directed fact on an (unordered) RELATED edge."""
    return ARROW_FMT.format(s=subject, p=predicate, o=obj)


@dataclass(frozen=True, slots=True)
class Fact:
    subject_key: str
    subject_name: str
    predicate: str  # "" when the edge has no keywords
    object_key: str
    object_name: str
    directed: bool  # False: an edge without direction lines; subject/object are just the two ends
    context: str = ""  # the edge description, for undirected edges (predicate matching, evidence)

    def other(self, key: str) -> tuple[str, str]:
        return (self.object_key, self.object_name) if key == self.subject_key else (self.subject_key, self.subject_name)

    def text(self) -> str:
        if self.directed:
            return directed_fact_line(self.subject_name, self.predicate, self.object_name)
        label = self.predicate or "related"
        ctx = f": {self.context[:160]}" if self.context else ""
        return f"{self.subject_name} --{label}-- {self.object_name}{ctx}"


def _same_entity(part: str, key: str, name: str) -> bool:
    norm = normalize_name(part)
    return norm == key or norm == normalize_name(name)


def edge_facts(
    a_key: str, a_name: str, b_key: str, b_name: str, description: str, keywords: Sequence[str]
) -> list[Fact]:
    """The facts one RELATED edge carries: directed ones from ``"S --p--> O"`` description lines whose ends
    are this edge's entities, undirected ones for keywords without such a line."""
    description = description or ""
    keywords = [k for k in (keywords or []) if k]
    lines = description.splitlines()
    facts: list[Fact] = []
    for kw in keywords:
        sep = f" --{kw}--> "
        directed = []
        for line in lines:
            parts = line.split(sep)
            if len(parts) != 2:
                continue
            left, right = parts
            if _same_entity(left, a_key, a_name) and _same_entity(right, b_key, b_name):
                directed.append(Fact(a_key, a_name, kw, b_key, b_name, True))
            elif _same_entity(left, b_key, b_name) and _same_entity(right, a_key, a_name):
                directed.append(Fact(b_key, b_name, kw, a_key, a_name, True))
        facts.extend(dict.fromkeys(directed))
        if not directed:
            facts.append(Fact(a_key, a_name, kw, b_key, b_name, False, description))
    if not keywords:
        facts.append(Fact(a_key, a_name, "", b_key, b_name, False, description))
    return facts


_NUMBER_RE = re.compile(
    r"^\s*(?P<num>[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][+-]?\d+)?|[+-]?\.\d+)"
    r"\s*(?P<unit>%|[A-Za-z°]{1,6}\.?|[\u4e00-\u9fff]{1,3})?\s*$"
)


def parse_number(text: Any) -> int | float | None:
    """A number written as an entity name: "85", "-3", "1,200", "7.5", "85 cm", "120天"; None otherwise."""
    if isinstance(text, bool):
        return None
    if isinstance(text, (int, float)):
        return text if math.isfinite(text) else None
    if not isinstance(text, str):
        return None
    m = _NUMBER_RE.match(text)
    if not m:
        return None
    raw = m.group("num").replace(",", "")
    try:
        if re.fullmatch(r"[+-]?\d+", raw):
            return int(raw)
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


# ---------------------------------------------------------------------------------------------------
# Predicate matching


def _norm_predicate(text: str) -> str:
    return normalize_name(re.sub(r"[_\-]+", " ", text))


_PREDICATE_STOPWORDS = frozenset("a an the by of in on at to is was has have had for with from as".split())
_SUFFIXES = ("ations", "ation", "ings", "ing", "ors", "ers", "ies", "ed", "or", "er", "en", "es", "s")


def _stem_tokens(norm: str) -> str:
    """Crude English stemming of a normalised predicate, stopwords dropped: "director" and "directed by"
    both become "direct", "starred actors" -> "starr act". Non-Latin tokens are kept as they are."""
    out = []
    for tok in norm.split():
        if tok in _PREDICATE_STOPWORDS:
            continue
        if tok.isascii() and tok.isalpha():
            for suf in _SUFFIXES:
                if len(tok) - len(suf) >= 3 and tok.endswith(suf):
                    tok = tok[: -len(suf)]
                    break
        out.append(tok)
    return " ".join(out)


class PredicateMatcher:
    """How well a plan predicate ("director", "directed by") names a graph predicate ("directed_by"), 0..100.

    Normalised equality is 100; otherwise rapidfuzz WRatio (which scores a predicate contained in a longer
    one at 90), and, with an embedder, 100 * cosine of the two strings. Edges without predicates (LLM-extracted
    edges with empty keywords) are matched against their description with partial_ratio.
    """

    def __init__(self, embedder: Any | None = None, cutoff: float = 75.0):
        self.embedder = embedder
        self.cutoff = cutoff
        self._vec: dict[str, np.ndarray] = {}

    def _embed(self, texts: Iterable[str]) -> None:
        missing = [t for t in dict.fromkeys(texts) if t not in self._vec]
        if missing and self.embedder is not None:
            for t, v in zip(missing, self.embedder.embed(missing)):
                self._vec[t] = np.asarray(v, dtype=np.float32)

    def score(self, wanted: str, predicate: str, context: str = "") -> float:
        w = _norm_predicate(wanted)
        if not w:
            return 0.0
        if predicate:
            p = _norm_predicate(predicate)
            if w == p:
                return 100.0
            best = float(fuzz.WRatio(w, p))
            ws, ps = _stem_tokens(w), _stem_tokens(p)
            if ws and ps:
                best = max(best, float(fuzz.token_set_ratio(ws, ps)))
            if self.embedder is not None:
                self._embed([w, p])
                best = max(best, 100.0 * float(np.dot(self._vec[w], self._vec[p])))
            return best
        if context:
            return 0.9 * float(fuzz.partial_ratio(w, normalize_name(context)))
        return 0.0

    def select(self, wanted: str | None, facts: Sequence[Fact]) -> list[Fact]:
        """Facts whose predicate matches ``wanted`` (all when None): exact matches when there are any,
        else everything at or above the cutoff."""
        if wanted is None or not wanted.strip():
            return list(facts)
        scored = [(self.score(wanted, f.predicate, "" if f.directed else f.context), f) for f in facts]
        exact = [f for s, f in scored if s >= 100.0]
        if exact:
            return exact
        return [f for s, f in scored if s >= self.cutoff]


# ---------------------------------------------------------------------------------------------------
# Entity linking


@dataclass(frozen=True, slots=True)
class LinkResult:
    name: str
    keys: tuple[str, ...]
    method: str  # exact | fuzzy | vector | none
    score: float = 0.0


def _clean_name(name: str) -> str:
    name = name.strip()
    for opener, closer in (("[", "]"), ('"', '"'), ("'", "'"), ("“", "”"), ("《", "》"), ("「", "」")):
        if len(name) >= 2 and name.startswith(opener) and name.endswith(closer):
            name = name[1:-1].strip()
    return name


class EntityLinker:
    """Literal name -> entity keys: exact key, then rapidfuzz over entity names, then vector search.

    * exact: ``entity_key(name)`` (the merge stage's normaliser) is a node key;
    * fuzzy: best ``fuzz.ratio`` over the normalised names of all entities, >= ``fuzzy_cutoff`` (the name
      list is read once, paged, through the ``lf_entity_names`` template; skipped above ``max_fuzzy_names``);
    * vector: the name's embedding against the entity_name family (``name_index``, keys = entity keys),
      best hit with cosine >= ``vector_threshold``.
    """

    def __init__(
        self,
        graph: GraphQueries,
        *,
        embedder: Any | None = None,
        name_index: Any | None = None,
        key_fn: Callable[[str], str] | None = None,
        fuzzy_cutoff: float = 90.0,
        vector_threshold: float = 0.8,
        max_fuzzy_names: int = 500_000,
        page_size: int = 50_000,
    ):
        self.graph = graph
        self.embedder = embedder
        self.name_index = name_index
        cfg = ExtractionConfig()
        self.key_fn = key_fn or (lambda name: entity_key(name, cfg))
        self.fuzzy_cutoff = fuzzy_cutoff
        self.vector_threshold = vector_threshold
        self.max_fuzzy_names = max_fuzzy_names
        self.page_size = page_size
        self._names: tuple[list[str], list[str]] | None = None  # (keys, normalised names)
        self._cache: dict[str, LinkResult] = {}

    def _name_table(self) -> tuple[list[str], list[str]]:
        if self._names is None:
            keys: list[str] = []
            names: list[str] = []
            skip = 0
            while len(keys) <= self.max_fuzzy_names:
                rows = self.graph.run_template("lf_entity_names", {"skip": skip, "limit": self.page_size})
                for r in rows:
                    keys.append(r["key"])
                    names.append(normalize_name(r["name"] or r["key"]))
                if len(rows) < self.page_size:
                    break
                skip += self.page_size
            if len(keys) > self.max_fuzzy_names:
                keys, names = [], []  # too many names to scan per query; the vector stage covers it
            self._names = (keys, names)
        return self._names

    def link(self, name: str) -> LinkResult:
        cleaned = _clean_name(name)
        if cleaned in self._cache:
            return self._cache[cleaned]
        result = self._link(cleaned)
        self._cache[cleaned] = result
        return result

    def _link(self, name: str) -> LinkResult:
        if not name:
            return LinkResult(name, (), "none")
        key = self.key_fn(name)
        if key and self.graph.get_entities([key]):
            return LinkResult(name, (key,), "exact", 100.0)
        if self.fuzzy_cutoff <= 100:
            keys, names = self._name_table()
            if names:
                hit = process.extractOne(normalize_name(name), names, scorer=fuzz.ratio, score_cutoff=self.fuzzy_cutoff)
                if hit is not None:
                    _, score, idx = hit
                    return LinkResult(name, (keys[idx],), "fuzzy", float(score))
        if self.embedder is not None and self.name_index is not None:
            hits = self.name_index.search(self.embedder.embed([name]), 1)[0]
            if hits and hits[0][1] >= self.vector_threshold:
                return LinkResult(name, (hits[0][0],), "vector", float(hits[0][1]))
        return LinkResult(name, (), "none")


# ---------------------------------------------------------------------------------------------------
# Values and evidence


@dataclass(frozen=True, slots=True)
class Value:
    kind: str  # entities | strings | number | boolean | text
    keys: tuple[str, ...] = ()  # entities
    names: tuple[str, ...] = ()  # entity names (aligned with keys), or the strings
    number: int | float | None = None
    flag: bool | None = None
    text: str = ""
    details: Mapping[str, str] = field(default_factory=dict)  # key -> annotation (sort attribute…)

    @staticmethod
    def entities(pairs: Iterable[tuple[str, str]], *, ordered: bool = False, details: Mapping[str, str] | None = None
                 ) -> "Value":
        uniq = dict(pairs)
        items = list(uniq.items()) if ordered else sorted(uniq.items(), key=lambda kv: (kv[1].casefold(), kv[0]))
        return Value(KIND_ENTITIES, tuple(k for k, _ in items), tuple(n for _, n in items),
                     details=MappingProxyType(dict(details or {})))

    def items(self) -> list[str]:
        """What this value says, as display strings."""
        if self.kind in (KIND_ENTITIES, KIND_STRINGS):
            return list(self.names)
        if self.kind == KIND_NUMBER:
            return [format_number(self.number)] if self.number is not None else []
        if self.kind == KIND_BOOLEAN:
            return ["yes" if self.flag else "no"]
        return [self.text] if self.text else []

    def summary(self, max_items: int = 20) -> str:
        items = self.items()
        if self.kind == KIND_ENTITIES and self.details:
            items = [f"{n} ({self.details[k]})" if k in self.details else n for k, n in zip(self.keys, self.names)]
        if not items:
            return "(none)"
        shown = items[:max_items]
        more = f" … ({len(items) - max_items} more)" if len(items) > max_items else ""
        return ", ".join(shown) + more

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind}
        if self.kind == KIND_ENTITIES:
            d["keys"] = list(self.keys)
            d["names"] = list(self.names)
            if self.details:
                d["details"] = dict(self.details)
        elif self.kind == KIND_STRINGS:
            d["items"] = list(self.names)
        elif self.kind == KIND_NUMBER:
            d["number"] = self.number
        elif self.kind == KIND_BOOLEAN:
            d["flag"] = self.flag
        else:
            d["text"] = self.text
        return d


@dataclass
class StepTrace:
    index: int
    question: str
    op: str
    alias: str | None
    args: dict[str, Any]  # JSON form, as planned
    queries: list[QueryTrace] = field(default_factory=list)
    value: Value | None = None
    facts: list[str] = field(default_factory=list)  # the graph facts the step used
    sub_answer: str = ""
    error: str = ""
    notes: list[str] = field(default_factory=list)  # linking, direction relaxed, skipped items…

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index, "question": self.question, "op": self.op, "alias": self.alias, "args": self.args,
            "queries": [{"template": q.template, "params": dict(q.params), "rows": q.rows} for q in self.queries],
            "value": self.value.to_dict() if self.value is not None else None,
            "facts": list(self.facts), "sub_answer": self.sub_answer, "error": self.error, "notes": list(self.notes),
        }


@dataclass
class LogicFormEvidence:
    question: str
    plan: Plan
    steps: list[StepTrace] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)  # final answer candidates (display strings)
    answer_values: dict[str, Value] = field(default_factory=dict)  # output alias -> value
    failed: bool = False
    failure: str = ""  # why, when failed: the pipeline falls back to dual-level retrieval
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failed

    def format(self, max_facts_per_step: int = 20, max_items: int = 30) -> str:
        """Evidence text for the answer prompt and the verifier: sub-questions, sub-answers and facts."""
        lines = ["## Sub-questions and answers"]
        for st in self.steps:
            ref = f" -> ${st.alias}" if st.alias else ""
            lines.append(f"{st.index + 1}. {st.question or st.op} [{st.op}{ref}]")
            if st.error:
                lines.append(f"   Error: {st.error}")
            elif st.value is not None:
                lines.append(f"   Answer: {st.value.summary(max_items)}")
            for fact in st.facts[:max_facts_per_step]:
                lines.append(f"   - {fact}")
            if len(st.facts) > max_facts_per_step:
                lines.append(f"   - … {len(st.facts) - max_facts_per_step} more facts")
        if self.answers:
            lines.append("## Answer candidates")
            lines.append(", ".join(self.answers[:max_items]) + (" …" if len(self.answers) > max_items else ""))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "question": self.question, "plan": self.plan.to_json(), "steps": [s.to_dict() for s in self.steps],
            "answers": list(self.answers), "failed": self.failed, "failure": self.failure,
            "llm_calls": self.llm_calls, "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens, "seconds": self.seconds,
        }


class StepError(Exception):
    """A step that cannot produce its result (no entity, no facts, bad operand…): evidence fails."""


# ---------------------------------------------------------------------------------------------------
# The executor


class LogicFormExecutor:
    """Runs a :class:`Plan` step by step; see the module docstring for the graph conventions.

    ``graph``: a KuzuGraphStore (or a :class:`GraphQueries`). ``linker``: defaults to an
    :class:`EntityLinker` without vectors. ``llm``: only ``deduce`` steps call it.
    ``relax_direction``: when no fact matches in the asked direction, use the reverse one (noted in the step).
    """

    def __init__(
        self,
        graph: Any,
        linker: EntityLinker | None = None,
        llm: LLMClient | None = None,
        *,
        prompts: Any | None = None,
        matcher: PredicateMatcher | None = None,
        max_rows: int = 5000,
        max_pairs: int = 1000,
        relax_direction: bool = True,
        deduce_max_tokens: int = 512,
        language: str = "auto",
    ):
        self.queries = graph if isinstance(graph, GraphQueries) else GraphQueries(graph)
        self.linker = linker or EntityLinker(self.queries)
        self.llm = llm
        self._prompts = prompts
        self.matcher = matcher or PredicateMatcher()
        self.max_rows = max_rows
        self.max_pairs = max_pairs
        self.relax_direction = relax_direction
        self.deduce_max_tokens = deduce_max_tokens
        self.language = language

    @property
    def prompts(self) -> Any:
        if self._prompts is None:
            from hxd2_ray.logic.planner import load_logic_prompts

            self._prompts = load_logic_prompts()
        return self._prompts

    # -- driver -----------------------------------------------------------------------------------

    def execute(self, plan: Plan, question: str = "") -> LogicFormEvidence:
        started = time.perf_counter()
        ev = LogicFormEvidence(question=question, plan=plan)
        values: dict[str, Value] = {}
        for step in plan.steps:
            trace = StepTrace(step.index, step.question, step.op, step.alias, step.to_json()["action"]["args"])
            ev.steps.append(trace)
            self.queries.trace = trace.queries
            if self.linker.graph is not self.queries:
                self.linker.graph.trace = trace.queries
            try:
                value = self._run(step, values, trace, ev)
            except (StepError, MathError) as exc:
                trace.error = str(exc)
            except Exception as exc:  # a bug or a backend failure must not take the query down
                trace.error = f"internal error: {type(exc).__name__}: {exc}"
            finally:
                self.queries.trace = None
                self.linker.graph.trace = None
            if trace.error:
                ev.failed = True
                ev.failure = f"step {step.index + 1} ({step.op}): {trace.error}"
                break
            if value is not None:
                trace.value = value
                trace.sub_answer = value.summary()
                if step.alias is not None:
                    values[step.alias] = value
        if not ev.failed:
            for alias in plan.output_aliases:
                value = values[alias]
                ev.answer_values[alias] = value
                ev.answers.extend(v for v in value.items() if v not in ev.answers)
            if not ev.answers:
                ev.failed = True
                ev.failure = "the plan produced no answer (the output values are empty)"
        ev.seconds = time.perf_counter() - started
        return ev

    def _run(self, step: Step, values: Mapping[str, Value], trace: StepTrace, ev: LogicFormEvidence) -> Value | None:
        handler = {
            "retrieval": self._retrieval,
            "filter": self._filter,
            "sort": self._sort,
            "count": self._count,
            "sum": self._sum,
            "compare": self._compare,
            "math": self._math,
            "deduce": self._deduce,
            "output": self._output,
        }[step.op]
        return handler(step, values, trace, ev)

    # -- operands ---------------------------------------------------------------------------------

    def _entity_keys(self, term: Any, values: Mapping[str, Value], trace: StepTrace, what: str) -> dict[str, str]:
        """key -> name of a literal name (linked) or an alias (entities, or a number linked by its text)."""
        if isinstance(term, Ref):
            value = values[term.alias]
            if value.kind == KIND_ENTITIES:
                if not value.keys:
                    raise StepError(f"{what}: ${term.alias} is empty")
                return dict(zip(value.keys, value.names))
            if value.kind == KIND_NUMBER and value.number is not None:
                term = format_number(value.number)
            else:
                raise StepError(f"{what}: ${term.alias} holds {value.kind}, not entities")
        if isinstance(term, (int, float)) and not isinstance(term, bool):
            term = format_number(term)
        link = self.linker.link(str(term))
        if not link.keys:
            raise StepError(f"{what}: no entity matches {str(term)[:80]!r}")
        if link.method != "exact":
            trace.notes.append(f"linked {link.name[:80]!r} to {list(link.keys)} by {link.method} ({link.score:.2f})")
        names = self.queries.names_of(list(link.keys))
        return {k: names.get(k, k) for k in link.keys}

    def _numbers_of(self, value: Value, what: str) -> list[int | float]:
        if value.kind == KIND_NUMBER and value.number is not None:
            return [value.number]
        if value.kind in (KIND_ENTITIES, KIND_STRINGS):
            out = []
            for name in value.names:
                num = parse_number(name)
                if num is None:
                    raise StepError(f"{what}: {name[:60]!r} is not a number")
                out.append(num)
            return out
        if value.kind == KIND_TEXT and parse_number(value.text) is not None:
            return [parse_number(value.text)]  # type: ignore[list-item]
        raise StepError(f"{what}: a {value.kind} value is not a number")

    def _single_number(self, value: Value, what: str) -> int | float:
        nums = self._numbers_of(value, what)
        if len(nums) != 1:
            raise StepError(f"{what}: expected one number, got {len(nums)}")
        return nums[0]

    # -- graph facts ------------------------------------------------------------------------------

    def _facts_around(self, keys: Sequence[str], trace: StepTrace) -> list[Fact]:
        rows = self.queries.run_template("lf_edges", {"keys": list(keys), "limit": self.max_rows})
        if len(rows) >= self.max_rows:
            trace.notes.append(f"edges cut at {self.max_rows}: the result may be incomplete")
        facts: list[Fact] = []
        for r in rows:
            facts.extend(edge_facts(r["a_key"], r["a_name"], r["b_key"], r["b_name"], r["description"], r["keywords"]))
        return list(dict.fromkeys(facts))

    def _attribute_facts(self, keys: Sequence[str], p: str | None, trace: StepTrace) -> dict[str, list[Fact]]:
        """For each key, the facts ``key --p--> x`` (undirected facts count too); reverse facts when no key
        has a forward one and direction may be relaxed."""
        keyset = set(keys)
        facts = self.matcher.select(p, self._facts_around(keys, trace))
        fwd: dict[str, list[Fact]] = {k: [] for k in keys}
        rev: dict[str, list[Fact]] = {k: [] for k in keys}
        for f in facts:
            if f.directed:
                if f.subject_key in keyset:
                    fwd[f.subject_key].append(f)
                if f.object_key in keyset:
                    rev[f.object_key].append(f)
            else:
                for end in (f.subject_key, f.object_key):
                    if end in keyset:
                        fwd[end].append(f)
        if not any(fwd.values()) and any(rev.values()) and self.relax_direction:
            trace.notes.append(f"direction relaxed: no fact has the items as subject of {p!r}; used the reverse")
            return rev
        return fwd

    # -- operators --------------------------------------------------------------------------------

    def _retrieval(self, step: Step, values: Mapping[str, Value], trace: StepTrace, ev: LogicFormEvidence) -> Value:
        a = step.args
        s_keys = self._entity_keys(a["s"], values, trace, "s") if a["s"] is not None else None
        o_keys = self._entity_keys(a["o"], values, trace, "o") if a["o"] is not None else None
        p = a["p"]
        if s_keys is not None and o_keys is not None:
            value = self._relations_between(s_keys, o_keys, p, a["hops"], trace)
        else:
            known = s_keys if s_keys is not None else o_keys
            assert known is not None
            known_is_subject = s_keys is not None
            if a["hops"] == 2:
                value = self._two_hop(known, p, trace)
            else:
                value = self._one_hop(known, p, known_is_subject, trace)
        if a["exclude"] and value.kind == KIND_ENTITIES:
            drop: set[str] = set()
            for term in a["exclude"]:
                try:
                    drop |= set(self._entity_keys(term, values, trace, "exclude"))
                except StepError as exc:
                    trace.notes.append(f"exclude ignored: {exc}")
            kept = [(k, n) for k, n in zip(value.keys, value.names) if k not in drop]
            if value.keys and not kept:
                raise StepError(f"nothing is left after exclude (p={p!r})")
            value = Value.entities(kept, ordered=True)
        if (value.kind == KIND_ENTITIES and not value.keys) or (value.kind == KIND_STRINGS and not value.names):
            raise StepError(f"no facts match (p={p!r})")
        return value

    def _one_hop(self, known: Mapping[str, str], p: str | None, known_is_subject: bool, trace: StepTrace) -> Value:
        facts = self.matcher.select(p, self._facts_around(list(known), trace))
        strict: list[tuple[Fact, str, str]] = []
        reverse: list[tuple[Fact, str, str]] = []
        for f in facts:
            if not f.directed:
                for end in (f.subject_key, f.object_key):
                    if end in known:
                        strict.append((f, *f.other(end)))
                continue
            if known_is_subject:
                if f.subject_key in known:
                    strict.append((f, f.object_key, f.object_name))
                if f.object_key in known:
                    reverse.append((f, f.subject_key, f.subject_name))
            else:
                if f.object_key in known:
                    strict.append((f, f.subject_key, f.subject_name))
                if f.subject_key in known:
                    reverse.append((f, f.object_key, f.object_name))
        chosen = strict
        if not strict and reverse and self.relax_direction:
            side = "subject" if known_is_subject else "object"
            trace.notes.append(f"direction relaxed: the known entity is never the {side} of {p!r}; used the reverse")
            chosen = reverse
        trace.facts.extend(dict.fromkeys(f.text() for f, _, _ in chosen))
        return Value.entities((k, n) for _, k, n in chosen if k not in known)

    def _two_hop(self, known: Mapping[str, str], p: str | None, trace: StepTrace) -> Value:
        """Entities 1..2 hops away whose path has an edge matching ``p`` (any direction)."""
        out: dict[str, str] = {}
        texts: list[str] = []
        for f in self.matcher.select(p, self._facts_around(list(known), trace)):
            for end in (f.subject_key, f.object_key):
                if end in known:
                    k, n = f.other(end)
                    if k not in known:
                        out[k] = n
                        texts.append(f.text())
        rows = self.queries.run_template("lf_paths_2hop", {"keys": list(known), "limit": self.max_rows})
        for r in rows:
            f1 = edge_facts(r["a_key"], r["a_name"], r["m_key"], r["m_name"], r["d1"], r["k1"])
            f2 = edge_facts(r["m_key"], r["m_name"], r["b_key"], r["b_name"], r["d2"], r["k2"])
            hit1, hit2 = self.matcher.select(p, f1), self.matcher.select(p, f2)
            if p is not None and not hit1 and not hit2:
                continue
            if r["b_key"] in known:
                continue
            out[r["b_key"]] = r["b_name"]
            texts.append(" / ".join(f.text() for f in (hit1 or f1)[:1] + (hit2 or f2)[:1]))
        if len(rows) >= self.max_rows:
            trace.notes.append(f"2-hop paths cut at {self.max_rows}")
        trace.facts.extend(dict.fromkeys(texts))
        return Value.entities(out.items())

    def _relations_between(self, s_keys: Mapping[str, str], o_keys: Mapping[str, str], p: str | None, hops: int,
                           trace: StepTrace) -> Value:
        pairs = [{"s": s, "t": o} for s in s_keys for o in o_keys if s != o][: self.max_pairs]
        strict: list[str] = []
        reverse: list[str] = []
        texts: list[str] = []
        if pairs:
            for r in self.queries.run_template("lf_edges_between", {"pairs": pairs}):
                for f in self.matcher.select(p, edge_facts(r["a_key"], r["a_name"], r["b_key"], r["b_name"],
                                                           r["description"], r["keywords"])):
                    label = f.predicate or "related"
                    if not f.directed or f.subject_key in s_keys:
                        strict.append(label)
                    else:
                        reverse.append(label)
                    texts.append(f.text())
            if hops == 2:
                rows = self.queries.run_template("lf_paths_between", {"pairs": pairs, "limit": self.max_rows})
                for r in rows:
                    f1 = edge_facts(r["a_key"], r["a_name"], r["m_key"], r["m_name"], r["d1"], r["k1"])
                    f2 = edge_facts(r["m_key"], r["m_name"], r["b_key"], r["b_name"], r["d2"], r["k2"])
                    hit1, hit2 = self.matcher.select(p, f1), self.matcher.select(p, f2)
                    if p is not None and not hit1 and not hit2:
                        continue
                    path = " / ".join(f.text() for f in (hit1 or f1)[:1] + (hit2 or f2)[:1])
                    strict.append(path)
                    texts.append(path)
        chosen = strict
        if not strict and reverse and self.relax_direction:
            trace.notes.append("direction relaxed: the relation runs from o to s")
            chosen = reverse
        trace.facts.extend(dict.fromkeys(texts))
        return Value(KIND_STRINGS, names=tuple(dict.fromkeys(chosen)))

    def _filter(self, step: Step, values: Mapping[str, Value], trace: StepTrace, ev: LogicFormEvidence) -> Value:
        a = step.args
        items = values[a["items"].alias]
        cmp, target = a["cmp"], a["value"]
        if not items.keys:
            return Value.entities([])
        attrs = self._attribute_facts(items.keys, a["p"], trace)
        target_keys: set[str] = set()
        target_num: int | float | None = None
        target_text = ""
        if isinstance(target, Ref):
            tv = values[target.alias]
            if tv.kind == KIND_ENTITIES:
                target_keys = set(tv.keys)
                if len(tv.names) == 1:
                    target_num = parse_number(tv.names[0])
            else:
                target_num = self._single_number(tv, "filter.value")
        elif isinstance(target, (int, float)):
            target_num = target
        elif isinstance(target, str):
            target_text = normalize_name(target)
            target_num = parse_number(target)
            target_keys = {self.linker.key_fn(target)}
            link = self.linker.link(target) if cmp in ("eq", "ne") else None
            if link is not None and link.keys:
                target_keys |= set(link.keys)
        kept: list[tuple[str, str]] = []
        for key, name in zip(items.keys, items.names):
            objs = [f.other(key) for f in attrs.get(key, [])]
            if target is None:
                hit = bool(objs)
            elif cmp in ("eq", "ne"):
                hit = any(k in target_keys or (target_num is not None and parse_number(n) == target_num)
                          for k, n in objs)
                hit = hit if cmp == "eq" else not hit
            elif cmp == "contains":
                hit = any(target_text and target_text in normalize_name(n) for _, n in objs)
            else:
                if target_num is None:
                    raise StepError(f"filter: cmp {cmp} needs a numeric value")
                nums = [x for x in (parse_number(n) for _, n in objs) if x is not None]
                hit = any(_cmp(cmp, x, target_num) for x in nums)
            if hit:
                kept.append((key, name))
                trace.facts.extend(f.text() for f in attrs.get(key, [])[:5])
        trace.facts[:] = list(dict.fromkeys(trace.facts))
        return Value.entities(kept, ordered=True)

    def _sort(self, step: Step, values: Mapping[str, Value], trace: StepTrace, ev: LogicFormEvidence) -> Value:
        a = step.args
        items = values[a["items"].alias]
        desc = a["order"] == "desc"
        scored: list[tuple[int | float, str, str]] = []
        missing: list[str] = []
        if a["p"] is None:
            for key, name in zip(items.keys, items.names):
                num = parse_number(name)
                (scored.append((num, key, name)) if num is not None else missing.append(name))
        else:
            attrs = self._attribute_facts(items.keys, a["p"], trace)
            for key, name in zip(items.keys, items.names):
                nums = []
                for f in attrs.get(key, []):
                    num = parse_number(f.other(key)[1])
                    if num is not None:
                        nums.append(num)
                        trace.facts.append(f.text())
                if nums:
                    scored.append((max(nums) if desc else min(nums), key, name))
                else:
                    missing.append(name)
        if not scored:
            raise StepError(f"sort: no item has a numeric {a['p'] or 'name'}")
        if missing:
            trace.notes.append(f"sort: {len(missing)} items without a number were dropped: {', '.join(missing[:5])}")
        scored.sort(key=lambda t: (-t[0] if desc else t[0], t[2].casefold(), t[1]))
        if a["limit"] is not None:
            scored = scored[: a["limit"]]
        return Value.entities([(k, n) for _, k, n in scored], ordered=True,
                              details={k: format_number(v) for v, k, _ in scored})

    def _count(self, step: Step, values: Mapping[str, Value], trace: StepTrace, ev: LogicFormEvidence) -> Value:
        value = values[step.args["items"].alias]
        return Value(KIND_NUMBER, number=len(value.keys) if value.kind == KIND_ENTITIES else len(value.names))

    def _sum(self, step: Step, values: Mapping[str, Value], trace: StepTrace, ev: LogicFormEvidence) -> Value:
        a = step.args
        total: int | float = 0
        if a["values"] is not None:
            for i, v in enumerate(a["values"]):
                if isinstance(v, Ref):
                    for num in self._numbers_of(values[v.alias], f"sum.values[{i}]"):
                        total += num
                else:
                    total += v
        else:
            items = values[a["items"].alias]
            if a["p"] is None:
                total = sum(self._numbers_of(items, "sum.items"))
            else:
                attrs = self._attribute_facts(items.keys, a["p"], trace)
                counted = 0
                for key, name in zip(items.keys, items.names):
                    nums = {}
                    for f in attrs.get(key, []):
                        k2, n2 = f.other(key)
                        num = parse_number(n2)
                        if num is not None:
                            nums[k2] = num
                            trace.facts.append(f.text())
                    if nums:
                        counted += 1
                        total += sum(nums.values())
                    else:
                        trace.notes.append(f"sum: {name[:60]!r} has no numeric {a['p']!r}")
                if not counted:
                    raise StepError(f"sum: no item has a numeric {a['p']!r}")
        if isinstance(total, float) and not math.isfinite(total):
            raise StepError("sum: overflow")
        return Value(KIND_NUMBER, number=total)

    def _operand(self, term: Any, values: Mapping[str, Value]) -> Value:
        if isinstance(term, Ref):
            return values[term.alias]
        if isinstance(term, (int, float)):
            return Value(KIND_NUMBER, number=term)
        num = parse_number(term)
        if num is not None:
            return Value(KIND_NUMBER, number=num)
        return Value(KIND_STRINGS, names=(term,))

    def _compare(self, step: Step, values: Mapping[str, Value], trace: StepTrace, ev: LogicFormEvidence) -> Value:
        a = step.args
        left, right = self._operand(a["left"], values), self._operand(a["right"], values)
        op = a["op"]

        def as_number(v: Value) -> int | float | None:
            try:
                return self._single_number(v, "compare")
            except StepError:
                return None

        ln, rn = as_number(left), as_number(right)
        if ln is not None and rn is not None:
            result = {
                "equal": math.isclose(ln, rn, rel_tol=1e-9, abs_tol=1e-12),
                "not_equal": not math.isclose(ln, rn, rel_tol=1e-9, abs_tol=1e-12),
                "greater": ln > rn, "less": ln < rn, "greater_equal": ln >= rn, "less_equal": ln <= rn,
            }[op]
            trace.facts.append(f"{format_number(ln)} {op} {format_number(rn)}: {'yes' if result else 'no'}")
            return Value(KIND_BOOLEAN, flag=result)
        if op not in ("equal", "not_equal"):
            raise StepError(f"compare {op} needs two numbers, got {left.kind} and {right.kind}")
        if left.kind == KIND_ENTITIES and right.kind == KIND_ENTITIES:
            same = set(left.keys) == set(right.keys)
        else:
            lset = {normalize_name(x) for x in left.items()}
            rset = {normalize_name(x) for x in right.items()}
            same = lset == rset
        result = same if op == "equal" else not same
        trace.facts.append(f"{left.summary(5)} {op} {right.summary(5)}: {'yes' if result else 'no'}")
        return Value(KIND_BOOLEAN, flag=result)

    def _math(self, step: Step, values: Mapping[str, Value], trace: StepTrace, ev: LogicFormEvidence) -> Value:
        expr = step.args["expr"]
        nums = {alias: self._single_number(values[alias], f"math ${alias}") for alias in math_refs(expr)}
        result = evaluate_math(expr, nums)
        shown = expr
        for alias, num in nums.items():
            shown = re.sub(rf"\${alias}\b", format_number(num), shown)
        trace.facts.append(f"{shown} = {format_number(result)}")
        return Value(KIND_NUMBER, number=result)

    def _deduce(self, step: Step, values: Mapping[str, Value], trace: StepTrace, ev: LogicFormEvidence) -> Value:
        if self.llm is None:
            raise StepError("deduce needs an LLM and none was given")
        question = step.args["question"] or step.question or ev.question
        wanted = {r.alias for r in step.args["inputs"]}
        partial = LogicFormEvidence(question=ev.question, plan=ev.plan,
                                    steps=[s for s in ev.steps[:-1] if not wanted or s.alias in wanted])
        language = self.language
        if language == "auto":
            from hxd2_ray.chunking.splitter import detect_language

            language = detect_language(ev.question or question)
        lp = self.prompts.for_language(language)
        from hxd2_ray.logic.planner import fill

        req = LLMRequest(
            messages=(
                {"role": "system", "content": lp.deduce_system},
                {"role": "user", "content": fill(lp.deduce_user, evidence=partial.format(), question=question)},
            ),
            max_tokens=self.deduce_max_tokens,
            tag="logic_deduce",
        )
        resp = self.llm.complete([req])[0]
        ev.llm_calls += 1
        ev.prompt_tokens += resp.prompt_tokens
        ev.completion_tokens += resp.completion_tokens
        if resp.error:
            raise StepError(f"deduce: LLM error: {resp.error}")
        text = resp.text.strip()
        if not text:
            raise StepError("deduce: the LLM gave an empty reply")
        return Value(KIND_TEXT, text=text)

    def _output(self, step: Step, values: Mapping[str, Value], trace: StepTrace, ev: LogicFormEvidence) -> None:
        trace.sub_answer = "; ".join(f"${r.alias}: {values[r.alias].summary()}" for r in step.args["aliases"])
        return None


def _cmp(op: str, x: int | float, y: int | float) -> bool:
    return {"gt": x > y, "ge": x >= y, "lt": x < y, "le": x <= y}[op]
