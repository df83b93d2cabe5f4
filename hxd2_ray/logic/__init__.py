"""Logic-form retrieval (paper §3.2.2, Algorithms 2 and 4): plan -> execute over the graph -> verify.

* :mod:`.plan`: the plan representation, :func:`validate_plan`, :func:`plan_json_schema`, safe math;
* :mod:`.planner`: :class:`LogicFormPlanner` (LLM planning with one repair round, versioned prompts);
* :mod:`.executor`: :class:`LogicFormExecutor`, :class:`EntityLinker`, the graph query templates;
* :mod:`.verifier`: :class:`EvidenceVerifier` (pre-check / post-check);
* :mod:`.metaqa`: MetaQA KB and question loaders.
"""

from hxd2_ray.logic.executor import (
    LOGIC_TEMPLATES,
    EntityLinker,
    GraphQueries,
    LinkResult,
    LogicFormEvidence,
    LogicFormExecutor,
    PredicateMatcher,
    StepTrace,
    Value,
    parse_number,
)
from hxd2_ray.logic.plan import (
    OPERATORS,
    MathError,
    Plan,
    PlanError,
    Ref,
    Step,
    evaluate_math,
    plan_json_schema,
    validate_plan,
)
from hxd2_ray.logic.planner import LogicFormPlanner, PlanResult, load_logic_prompts
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
