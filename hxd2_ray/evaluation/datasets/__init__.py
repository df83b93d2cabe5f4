"""Benchmark loaders into one :class:`EvalItem` shape, the benchmark registry, and per-item scoring.

Where things are: :mod:`items` holds what every loader returns (:class:`EvalItem`, :class:`LoadReport`), its error
(:class:`DatasetError`) and the file helpers the loaders share; one loader module per format: :mod:`seedbench`
(SeedBench QA-1..4, its segments corpus, the answer options inside a question), :mod:`hotpotqa` (HotpotQA as HippoRAG
ships it, with its corpora), :mod:`metaqa` (the 1/2/3-hop question files and the knowledge base), :mod:`generic`
(JSONL corpus and questions); :mod:`registry` is the benchmark registry (each benchmark's loader, task and metrics)
with per-item scoring.

Every loader returns a :class:`LoadReport`: the items, plus ``skipped`` rows as ``(where, reason)`` pairs
(``where`` is ``file#index`` for JSON arrays, ``file:line`` for line formats). A malformed row is skipped and
counted, never fatal; a file that is missing or not readable as a whole raises :class:`DatasetError`.

Formats (inspected on the copies under ``../shared/data``):

* **SeedBench** ``zero-shot/1-{1..4}.json``: a JSON array of ``{instruction, question, answer, split: {level1,
  level2}, task_type}``. QA-1 answers are one letter; QA-2 answers are letter lists ``"A, D, B"`` (unordered);
  QA-3 (fill-in-blank) and QA-4 (generation) answers are free text, Chinese or English. Options sit in the
  question as trailing ``A. …`` lines. The generation prompt is ``instruction + "\\n" + question`` (as the
  reference's ``2_kag_extract.py``); retrieval uses :func:`question_stem` (the question without its options).
  **Rice filter** (``rice_only``): ``split.level2`` names the species and is ``"Oryza sativa"`` for rice
  (compared after NFKC, ``_`` -> space, case-folding). ``split.level1`` is the task subcategory, *not* the crop:
  rice rows use Chinese subcategory names, but some soybean rows do too. With the filter, 1-1.json keeps
  200 items (its first 200: the 200-item file of commit 2c6a650 the paper used, spot-checked), 1-2 187,
  1-3 223, 1-4 240. Caution: QA-4 gold answers mostly restate the question, so echoing the question alone
  scores ROUGE-L 0.53 (0.49 on rice items); QA-3 echo scores 0.02. Compare QA-4 runs with that floor.
* **HotpotQA (HippoRAG)**: ``hotpotqa_train.json`` is the HotpotQA distractor format (``_id, question, answer,
  supporting_facts: [[title, sentence_index], …], context``); ``*_corpus.json`` maps ``title -> [sentences]``.
  A passage's id is its title, so the gold passages of a question are the distinct titles of its supporting
  facts. HippoRAG's toy sets (``sample.json``, ``case_study_university.json``) use another format (``id,
  question, answer: [..], paragraphs: [{title, text, is_supporting, idx}]`` with a list corpus); titles repeat
  there, so a list corpus uses ``"title (idx)"`` ids when its titles are not unique, and supporting paragraphs
  are matched to corpus entries by (title, text).
* **MetaQA**: ``question<TAB>answers[<TAB>qtype]`` lines, the topic entity in ``[brackets]``, answers
  ``|``-separated; ``qa_dev.txt`` has its qtypes line-aligned in ``qa_dev_qtype.txt``. The hop count comes from
  the ``{h}-hop`` folder name.
* **Generic**: corpus JSONL ``{id, title, text}``; questions JSONL ``{id, question, answers, gold_passages?}``.
"""

from __future__ import annotations

from hxd2_ray.evaluation.datasets.generic import load_corpus_jsonl, load_generic, write_corpus_jsonl
from hxd2_ray.evaluation.datasets.hotpotqa import load_corpus_hotpotqa, load_hotpotqa
from hxd2_ray.evaluation.datasets.items import (
    TASKS,
    DatasetError,
    EvalItem,
    LoadReport,
)
from hxd2_ray.evaluation.datasets.metaqa import load_metaqa, load_metaqa_kb
from hxd2_ray.evaluation.datasets.registry import (
    BENCHMARKS,
    DEFAULT_DATA_ROOT,
    DEFAULT_KS,
    BenchmarkSpec,
    Prediction,
    default_data_root,
    get_benchmark,
    score_item,
)
from hxd2_ray.evaluation.datasets.seedbench import (
    SEEDBENCH_SUBSETS,
    is_rice,
    load_seedbench,
    load_seedbench_segments,
    parse_choices,
    question_stem,
)

__all__ = [
    "BENCHMARKS",
    "BenchmarkSpec",
    "DEFAULT_DATA_ROOT",
    "DEFAULT_KS",
    "DatasetError",
    "EvalItem",
    "LoadReport",
    "Prediction",
    "SEEDBENCH_SUBSETS",
    "TASKS",
    "default_data_root",
    "get_benchmark",
    "is_rice",
    "load_corpus_hotpotqa",
    "load_corpus_jsonl",
    "load_generic",
    "load_hotpotqa",
    "load_metaqa",
    "load_metaqa_kb",
    "load_seedbench",
    "load_seedbench_segments",
    "parse_choices",
    "question_stem",
    "score_item",
    "write_corpus_jsonl",
]
