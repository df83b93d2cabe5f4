"""Fail unless the demo's output answered every sample question with text and at least one reference.

    python .ci/check_demo.py DEMO_OUTPUT_FILE [QUESTIONS_JSONL]

``scripts/demo`` prints, per question, ``Q: <question>``, the answer, then ``References:`` with numbered lines
(``References: none`` when the answer cites nothing). CI runs the demo as a user would and then this check.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

QUESTIONS = Path(__file__).resolve().parents[1] / "hxd2_ray" / "sample_data" / "questions.jsonl"


def problems(output: str, questions: list[str]) -> list[str]:
    blocks = {m.group(1).strip(): m.group(2) for m in re.finditer(r"^Q: (.*)\n((?:(?!^Q: ).*\n?)*)", output, re.M)}
    out = []
    for question in questions:
        block = blocks.get(question)
        if block is None:
            out.append(f"not answered: {question}")
            continue
        answer, _, refs = block.partition("References:")
        if not answer.strip():
            out.append(f"an empty answer: {question}")
        if not re.search(r"^\s+\[1\] ", refs, re.M):
            out.append(f"no reference: {question}")
    return out


def main(argv: list[str]) -> int:
    output = Path(argv[1]).read_text(encoding="utf-8", errors="replace")
    source = Path(argv[2]) if len(argv) > 2 else QUESTIONS
    questions = [json.loads(line)["question"] for line in source.read_text(encoding="utf-8").splitlines() if line]
    found = problems(output, questions)
    for line in found:
        print(f"demo check: {line}", file=sys.stderr)
    if "demo finished" not in output:
        print("demo check: the demo did not finish", file=sys.stderr)
        return 1
    print(f"demo check: {len(questions) - len(found)}/{len(questions)} sample questions answered with references")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
