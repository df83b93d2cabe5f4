"""Logic-form retrieval (paper §3.2.2, Algorithms 2 and 4): plan -> execute over the graph -> verify.

Where things are: planning: :mod:`plan` is the plan representation, :mod:`plan_arguments` parses each operator's
arguments, :mod:`plan_validation` validates a plan (:func:`validate_plan`) and gives the JSON schema that constrains a
model's plan (:func:`plan_json_schema`), :mod:`safe_math` is the ``math`` operator's arithmetic (an ast whitelist,
never eval), and :mod:`planner` is :class:`LogicFormPlanner` (LLM planning with one repair round, versioned prompts
under ``prompts/``). Executing: :mod:`executor` is :class:`LogicFormExecutor`; it reads the graph through
:mod:`queries` (:class:`GraphQueries`, the traced named reads of :mod:`hxd2_ray.graph.templates`), links plan names
to entity keys with :mod:`linking` (:class:`EntityLinker`) and reads facts and numbers off edges and names with
:mod:`facts` (:class:`PredicateMatcher`); :mod:`evidence` holds what running a plan produced (:class:`Value`,
:class:`StepTrace`, :class:`LogicFormEvidence`). Verifying: :mod:`verifier` is :class:`EvidenceVerifier`
(pre-check / post-check). :mod:`metaqa` loads MetaQA's knowledge base (or any ``subject|relation|object`` triple
file) straight into the graph; it is the one module here that writes a Kùzu graph, everything else reaches the
backends through their seams. No Ray here.
"""

from hxd2_ray.graph.templates import LOGIC_TEMPLATES
from hxd2_ray.logic.evidence import LogicFormEvidence, StepTrace, Value
from hxd2_ray.logic.executor import LogicFormExecutor
from hxd2_ray.logic.facts import PredicateMatcher, parse_number
from hxd2_ray.logic.linking import EntityLinker, LinkResult
from hxd2_ray.logic.plan import OPERATORS, Plan, PlanError, Ref, Step
from hxd2_ray.logic.plan_validation import plan_json_schema, validate_plan
from hxd2_ray.logic.planner import LogicFormPlanner, PlanResult, load_logic_prompts
from hxd2_ray.logic.queries import GraphQueries
from hxd2_ray.logic.safe_math import MathError, evaluate_math
from hxd2_ray.logic.verifier import EvidenceVerifier, Verdict, parse_verdict

__all__ = [
    "LOGIC_TEMPLATES",
    "OPERATORS",
    "EntityLinker",
    "EvidenceVerifier",
    "GraphQueries",
    "LinkResult",
    "LogicFormEvidence",
    "LogicFormExecutor",
    "LogicFormPlanner",
    "MathError",
    "Plan",
    "PlanError",
    "PlanResult",
    "PredicateMatcher",
    "Ref",
    "Step",
    "StepTrace",
    "Value",
    "Verdict",
    "evaluate_math",
    "load_logic_prompts",
    "parse_number",
    "parse_verdict",
    "plan_json_schema",
    "validate_plan",
]
