"""Evaluation runs as library functions: a typed request in (:mod:`.requests`), a summary out.

:mod:`.evaluation` answers benchmarks in resumable shards (``hxd2 eval run``, ``eval grid``), :mod:`.judging`
compares two runs with an LLM judge (``hxd2 eval judge``). Answering is delegated to a shard runner, so no Ray is
imported here: ``jobs/evaluate.py`` supplies Ray Data's actor pool, tests the in-process runner of
:mod:`hxd2_ray.stages.eval_stage`.
"""
