"""Raw vLLM throughput of the configured model (default SmolLM2-135M) on extraction-like prompts.

Measures one ``llm.chat`` pass over a batch of extraction prompts (a ~700-character chunk each),
unconstrained and JSON-schema-constrained, and the same JSON batch through ``VllmEngineLLM.complete``
(the pipeline's path: token counting, truncation check, per-request SamplingParams), so the overhead of the
wrapper is visible. This is the "raw vLLM" reference of the NER-efficiency benchmark.

    .venv/bin/python bench/raw_vllm.py [--batch 32] [--max-tokens 256] [--repeats 2] [--mp] [--json-out f]

``--mp`` runs the engine core in a separate process (vLLM's default) instead of in-process.
Wall-clock numbers are only meaningful on otherwise idle cores (the summary records the load average);
in-process runs also report tokens per CPU-second, which contention distorts much less.
The ``__main__`` guard is required: with ``--mp`` vLLM spawns its EngineCore, which re-imports this file.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

INSTRUCTION = (
    "Extract the named entities (people, organizations, locations, events, concepts) and the relations "
    "between them from the text below. Answer with JSON only.\n\nText:\n"
)

ENTITY_SCHEMA = {
    "type": "object",
    "properties": {
        "entities": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "type": {"type": "string"},
                    "description": {"type": "string"},
                },
                "required": ["name", "type", "description"],
            },
        },
        "relations": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "source": {"type": "string"},
                    "target": {"type": "string"},
                    "description": {"type": "string"},
                },
                "required": ["source", "target", "description"],
            },
        },
    },
    "required": ["entities", "relations"],
}

_PEOPLE = [
    "Marie Curie",
    "Alan Turing",
    "Ada Lovelace",
    "Niels Bohr",
    "Grace Hopper",
    "Rosalind Franklin",
    "Enrico Fermi",
    "Lise Meitner",
    "Claude Shannon",
    "Emmy Noether",
    "Tu Youyou",
    "Qian Xuesen",
]
_ORGS = [
    "the University of Paris",
    "Bletchley Park",
    "the Royal Society",
    "CERN",
    "Bell Labs",
    "MIT",
    "the Manhattan Project",
    "Caltech",
    "the Chinese Academy of Sciences",
    "IBM",
]
_PLACES = ["Warsaw", "London", "Copenhagen", "Geneva", "New Jersey", "Berlin", "Beijing", "Chicago", "Zurich"]
_TOPICS = [
    "radioactivity",
    "computability",
    "quantum mechanics",
    "information theory",
    "compilers",
    "X-ray crystallography",
    "nuclear fission",
    "abstract algebra",
    "malaria treatment",
    "rocketry",
]


def make_chunk(rng: random.Random, target_chars: int = 700) -> str:
    """A synthetic ~700-character passage dense in entities, like a chunk of an encyclopedia article."""
    sentences: list[str] = []
    while sum(len(s) + 1 for s in sentences) < target_chars:
        p, q = rng.sample(_PEOPLE, 2)
        o, pl, t = rng.choice(_ORGS), rng.choice(_PLACES), rng.choice(_TOPICS)
        year = rng.randint(1890, 1990)
        sentences.append(
            rng.choice(
                [
                    f"In {year}, {p} joined {o} in {pl}, where the work on {t} began.",
                    f"{p} corresponded with {q} about {t} while both were visiting {pl}.",
                    f"The lectures {p} gave at {o} in {year} shaped later research on {t}.",
                    f"{q} credited {p} for the key insight on {t}, published in {pl} in {year}.",
                ]
            )
        )
    return " ".join(sentences)[: target_chars + 80]


def make_prompts(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [INSTRUCTION + make_chunk(rng) for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=2, help="timed runs per mode; the best is reported")
    ap.add_argument("--model", default="builtin:smollm2-135m-instruct")
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--dtype", default="float32", help="the engine's dtype (the shipped CPU config's: float32)")
    ap.add_argument("--mp", action="store_true", help="engine core in a separate process (vLLM default)")
    ap.add_argument("--json-out", default=None)
    args = ap.parse_args()

    # Must be decided before vLLM reads its env (the engine wrapper only sets a default).
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if args.mp else "0"

    from hxd2_ray.config import VllmLLMConfig
    from hxd2_ray.llm.base import LLMRequest
    from hxd2_ray.llm.vllm_engine import VllmEngineLLM

    prompts = make_prompts(args.batch)
    cfg = VllmLLMConfig(
        model=args.model, max_model_len=args.max_model_len, max_num_seqs=max(64, args.batch), dtype=args.dtype
    )
    t0 = time.perf_counter()
    eng = VllmEngineLLM(cfg)
    init_s = time.perf_counter() - t0
    prompt_tokens = [eng.prompt_tokens([{"role": "user", "content": p}]) for p in prompts]

    eng.generate_raw(prompts[:2], 8)  # warm-up: first-call allocations and structured-output compilation
    eng.generate_raw(prompts[:2], 8, json_schema=ENTITY_SCHEMA)

    results: dict[str, dict[str, float]] = {}

    def record(name: str, runs: list[tuple[int, float, float]]) -> None:
        gen, secs, cpu = min(runs, key=lambda r: r[1] / max(r[0], 1))
        results[name] = {"generated_tokens": gen, "seconds": round(secs, 3), "tokens_per_s": round(gen / secs, 1)}
        line = f"{name:>22}: {gen:6d} tokens in {secs:7.2f} s = {gen / secs:7.1f} tok/s"
        if not args.mp:
            # In-process, this process's CPU time includes the engine's: tokens per CPU-second is far less
            # sensitive than wall time to other jobs competing for the same cores.
            results[name]["cpu_seconds"] = round(cpu, 3)
            results[name]["tokens_per_cpu_s"] = round(gen / cpu, 1)
            line += f"  ({gen / cpu:7.1f} tok per CPU-s)"
        print(line, flush=True)

    load_before = os.getloadavg()
    for name, schema in (("raw_unconstrained", None), ("raw_json_schema", ENTITY_SCHEMA)):
        runs = []
        for _ in range(args.repeats):
            c0 = time.process_time()
            texts, gen, secs = eng.generate_raw(prompts, args.max_tokens, json_schema=schema)
            runs.append((gen, secs, time.process_time() - c0))
        record(name, runs)
        if schema is not None:
            ok = 0
            for t in texts:
                try:
                    json.loads(t)
                    ok += 1
                except ValueError:
                    pass
            results[name]["valid_json"] = ok

    reqs = [
        LLMRequest(
            messages=({"role": "user", "content": p},),
            max_tokens=args.max_tokens,
            json_schema=ENTITY_SCHEMA,
            tag="extract",
        )
        for p in prompts
    ]
    runs = []
    for _ in range(args.repeats):
        t, c0 = time.perf_counter(), time.process_time()
        resp = eng.complete(reqs)
        runs.append((sum(r.completion_tokens for r in resp), time.perf_counter() - t, time.process_time() - c0))
    record("complete_json_schema", runs)
    eng.close()

    summary = {
        "model": eng.model_id,
        "engine_core": "separate process (mp)" if args.mp else "in-process",
        "batch": args.batch,
        "max_tokens": args.max_tokens,
        "prompt_chars_mean": round(sum(map(len, prompts)) / len(prompts)),
        "prompt_tokens_mean": round(sum(prompt_tokens) / len(prompt_tokens), 1),
        "engine_init_s": round(init_s, 1),
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "cpus": os.cpu_count(),
        # Other jobs on the same cores distort wall-clock numbers; the load average shows how much.
        "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "machine": platform.machine(),
        "results": results,
    }
    print(json.dumps(summary, indent=2))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
