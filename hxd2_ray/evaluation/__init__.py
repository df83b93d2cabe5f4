"""Batch evaluation, Ray-free core: metrics, benchmark loaders and reports.

* :mod:`hxd2_ray.evaluation.metrics` - pure scoring functions (choice extraction, set F1, ROUGE-L with jieba,
  SQuAD EM/F1, recall@k, Hits@1);
* :mod:`hxd2_ray.evaluation.datasets` - loaders into :class:`EvalItem` plus the benchmark registry;
* :mod:`hxd2_ray.evaluation.report` - aggregates per-question traces into Markdown / JSON / PNG reports;
* :mod:`hxd2_ray.evaluation.judge` - pairwise LLM-as-judge of two answer sets, both orders (``hxd2 eval judge``).

Importing this package loads no Ray, jieba, rouge_score or matplotlib: each is imported when first used.
"""
