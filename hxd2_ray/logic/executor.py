"""Run a validated logic-form plan against the knowledge graph and collect the evidence.

Every graph access is a named read (:mod:`hxd2_ray.graph.templates`) through :class:`GraphQueries`, so plan
arguments never reach query text: names are linked to entity keys (:class:`EntityLinker`), predicates are
matched in Python against each edge's facts (:class:`PredicateMatcher`, :func:`edge_facts`), and each step's
reads, facts and value go into the :class:`LogicFormEvidence`.
"""

from __future__ import annotations

import math
import re
import time
from typing import Any, Callable, Mapping, Sequence

from hxd2_ray.chunking.splitter import detect_language
from hxd2_ray.extraction.merge import normalize_name
from hxd2_ray.graph.base import GraphStore
from hxd2_ray.graph.templates import LF_EDGES, LF_EDGES_BETWEEN, LF_PATHS_2HOP, LF_PATHS_BETWEEN
from hxd2_ray.llm.base import LLMClient, LLMRequest
from hxd2_ray.logic.evidence import LogicFormEvidence, StepError, StepTrace, Value
from hxd2_ray.logic.facts import Fact, PredicateMatcher, edge_facts, parse_number
from hxd2_ray.logic.linking import EntityLinker
from hxd2_ray.logic.plan import KIND_BOOLEAN, KIND_ENTITIES, KIND_NUMBER, KIND_STRINGS, KIND_TEXT, Plan, Ref, Step
from hxd2_ray.logic.planner import LogicPromptSet, fill, load_logic_prompts
from hxd2_ray.logic.queries import GraphQueries
from hxd2_ray.logic.safe_math import MathError, evaluate_math, format_number, math_refs

__all__ = ["LogicFormExecutor"]


class LogicFormExecutor:
    """Runs a :class:`Plan` step by step (the graph conventions are in :mod:`hxd2_ray.logic.facts`).

    ``graph``: a graph store (or a :class:`GraphQueries` over one). ``linker``: defaults to an
    :class:`EntityLinker` without vectors. ``llm``: only ``deduce`` steps call it.
    ``relax_direction``: when no fact matches in the asked direction, use the reverse one (noted in the step).
    ``clock``: seconds for the evidence and its query traces (a monotonic clock; tests pass their own).
    """

    def __init__(
        self,
        graph: GraphStore | GraphQueries,
        linker: EntityLinker | None = None,
        llm: LLMClient | None = None,
        *,
        prompts: LogicPromptSet | None = None,
        matcher: PredicateMatcher | None = None,
        max_rows: int = 5000,
        max_pairs: int = 1000,
        relax_direction: bool = True,
        deduce_max_tokens: int = 512,
        language: str = "auto",
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.queries = graph if isinstance(graph, GraphQueries) else GraphQueries(graph, clock=clock)
        self.linker = linker or EntityLinker(self.queries)
        self.llm = llm
        self._prompts = prompts
        self.matcher = matcher or PredicateMatcher()
        self.max_rows = max_rows
        self.max_pairs = max_pairs
        self.relax_direction = relax_direction
        self.deduce_max_tokens = deduce_max_tokens
        self.language = language
        self.clock = clock

    @property
    def prompts(self) -> LogicPromptSet:
        if self._prompts is None:
            self._prompts = load_logic_prompts()
        return self._prompts

    # -- driver -----------------------------------------------------------------------------------

    def execute(self, plan: Plan, question: str = "") -> LogicFormEvidence:
        started = self.clock()
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
            except Exception as exc:  # noqa: BLE001 - a bug or a backend failure fails this evidence, not the query
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
        ev.seconds = self.clock() - started
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
        text_number = parse_number(value.text) if value.kind == KIND_TEXT else None
        if text_number is not None:
            return [text_number]
        raise StepError(f"{what}: a {value.kind} value is not a number")

    def _single_number(self, value: Value, what: str) -> int | float:
        nums = self._numbers_of(value, what)
        if len(nums) != 1:
            raise StepError(f"{what}: expected one number, got {len(nums)}")
        return nums[0]

    # -- graph facts ------------------------------------------------------------------------------

    def _facts_around(self, keys: Sequence[str], trace: StepTrace) -> list[Fact]:
        rows = self.queries.run_template(LF_EDGES, {"keys": list(keys), "limit": self.max_rows})
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
        rows = self.queries.run_template(LF_PATHS_2HOP, {"keys": list(known), "limit": self.max_rows})
        for r in rows:
            path = self._two_hop_path(p, r)
            if path is None or r["b_key"] in known:
                continue
            out[r["b_key"]] = r["b_name"]
            texts.append(path)
        if len(rows) >= self.max_rows:
            trace.notes.append(f"2-hop paths cut at {self.max_rows}")
        trace.facts.extend(dict.fromkeys(texts))
        return Value.entities(out.items())

    def _two_hop_path(self, p: str | None, r: Mapping[str, Any]) -> str | None:
        """A 2-hop path row (a -> m -> b, with each edge's description and keywords) as text: the first fact of
        each edge that matches ``p`` (its first fact when none does); None when ``p`` matches neither edge."""
        f1 = edge_facts(r["a_key"], r["a_name"], r["m_key"], r["m_name"], r["d1"], r["k1"])
        f2 = edge_facts(r["m_key"], r["m_name"], r["b_key"], r["b_name"], r["d2"], r["k2"])
        hit1, hit2 = self.matcher.select(p, f1), self.matcher.select(p, f2)
        if p is not None and not hit1 and not hit2:
            return None
        return " / ".join(f.text() for f in (hit1 or f1)[:1] + (hit2 or f2)[:1])

    def _relations_between(
        self, s_keys: Mapping[str, str], o_keys: Mapping[str, str], p: str | None, hops: int, trace: StepTrace
    ) -> Value:
        pairs = [{"s": s, "t": o} for s in s_keys for o in o_keys if s != o][: self.max_pairs]
        strict: list[str] = []
        reverse: list[str] = []
        texts: list[str] = []
        if pairs:
            for r in self.queries.run_template(LF_EDGES_BETWEEN, {"pairs": pairs}):
                for f in self.matcher.select(
                    p, edge_facts(r["a_key"], r["a_name"], r["b_key"], r["b_name"], r["description"], r["keywords"])
                ):
                    label = f.predicate or "related"
                    if not f.directed or f.subject_key in s_keys:
                        strict.append(label)
                    else:
                        reverse.append(label)
                    texts.append(f.text())
            if hops == 2:
                rows = self.queries.run_template(LF_PATHS_BETWEEN, {"pairs": pairs, "limit": self.max_rows})
                for r in rows:
                    path = self._two_hop_path(p, r)
                    if path is None:
                        continue
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
                hit = any(
                    k in target_keys or (target_num is not None and parse_number(n) == target_num) for k, n in objs
                )
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
        return Value.entities(
            [(k, n) for _, k, n in scored], ordered=True, details={k: format_number(v) for v, k, _ in scored}
        )

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
                    nums: dict[str, int | float] = {}
                    for f in attrs.get(key, []):
                        k2, n2 = f.other(key)
                        parsed = parse_number(n2)
                        if parsed is not None:
                            nums[k2] = parsed
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
                "greater": ln > rn,
                "less": ln < rn,
                "greater_equal": ln >= rn,
                "less_equal": ln <= rn,
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
        partial = LogicFormEvidence(
            question=ev.question, plan=ev.plan, steps=[s for s in ev.steps[:-1] if not wanted or s.alias in wanted]
        )
        language = self.language
        if language == "auto":
            language = detect_language(ev.question or question)
        lp = self.prompts.for_language(language)
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
