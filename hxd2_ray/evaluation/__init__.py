"""Batch evaluation, Ray-free core: metrics, benchmark loaders and reports.

Where things are: :mod:`datasets` loads benchmarks into :class:`EvalItem` and holds the benchmark registry and
per-item scoring; :mod:`metrics` holds the pure scoring functions (choice extraction, set F1, ROUGE-L with jieba,
SQuAD EM/F1, recall@k, Hits@1). :mod:`report` aggregates per-question traces into Markdown / JSON / PNG reports, with
:mod:`report_tables` (per-mode scores, the verifier's confusion, refusals, the Markdown tables), :mod:`report_plots`
(the plots, on matplotlib's object API) and :mod:`question_table` (one row per question and mode in ``report.md`` and
``report.html``). :mod:`grid` plans an ablation grid's cells (index variants x config axes x modes) and builds its
comparison table; it runs nothing. :mod:`judge` is the pairwise LLM-as-judge of two answer sets, both orders
(``hxd2 eval judge``; its prompt is ``prompts/judge_v1.yaml``), and :mod:`judge_verdicts` reads a judge's reply as a
verdict and gives the win rates. The runs that use all this are in :mod:`hxd2_ray.runs`.

Importing this package loads no Ray, jieba, rouge_score or matplotlib: each is imported when first used.
"""
