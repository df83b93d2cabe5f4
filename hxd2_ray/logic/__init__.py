"""Logic-form retrieval (paper §3.2.2, Algorithms 2 and 4): plan -> execute over the graph -> verify.

* :mod:`.plan`: the plan representation, :func:`validate_plan`, :func:`plan_json_schema`;
* :mod:`.safe_math`: the ``math`` operator's arithmetic (an ast whitelist, never eval);
* :mod:`.planner`: :class:`LogicFormPlanner` (LLM planning with one repair round, versioned prompts);
* :mod:`.queries`: :class:`GraphQueries`, the traced named reads of the graph (:mod:`hxd2_ray.graph.templates`);
* :mod:`.linking`: :class:`EntityLinker` (plan names -> entity keys);
* :mod:`.facts`: facts and numbers read off edges and names, :class:`PredicateMatcher`;
* :mod:`.evidence`: :class:`Value`, :class:`StepTrace`, :class:`LogicFormEvidence`;
* :mod:`.executor`: :class:`LogicFormExecutor`;
* :mod:`.verifier`: :class:`EvidenceVerifier` (pre-check / post-check);
* :mod:`.metaqa`: MetaQA KB and question loaders.
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
