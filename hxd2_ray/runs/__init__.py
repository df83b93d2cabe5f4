"""Evaluation runs as library functions: a typed request in (:mod:`requests`), a summary out.

Where things are: :mod:`requests` holds the typed requests (``hxd2 eval run``, ``eval grid``, ``eval judge``);
:mod:`evaluation` answers benchmarks in resumable shards (``hxd2 eval run``) and runs an ablation grid's cells as
ordinary runs (``eval grid``); :mod:`judging` compares two runs, or two modes of one run, with an LLM judge
(``hxd2 eval judge``); :mod:`refusal_rates` gives the refusal gate's two error rates (in-corpus and off-topic
refusals), reported with every run. Answering is delegated to a shard runner, so no Ray is imported here:
``jobs/evaluate.py`` supplies Ray Data's actor pool, tests the in-process runner of :mod:`hxd2_ray.stages.eval_stage`.
"""
