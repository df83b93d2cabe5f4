"""The ``--questions`` file of ``hxd2 query``: one ``{"question": ...}`` object per line, checked line by line.

Every problem is a ``ValueError`` naming the line (not JSON, not an object, no question, a question that is
not text or not valid Unicode), so the CLI answers with one clear line instead of a traceback.
"""

from __future__ import annotations

import json
import os

from hxd2_ray.text_validation import lone_surrogate


def read_questions(path: str | os.PathLike[str]) -> list[str]:
    """The questions of a JSONL file, in order; ``OSError`` / ``ValueError`` (with the line) when unusable."""
    questions = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:  # JSONDecodeError, and integer literals too long to convert
                raise ValueError(f"line {n} is not valid JSON ({exc})") from None
            except RecursionError:
                raise ValueError(f"line {n} is not valid JSON (nested too deeply)") from None
            if not isinstance(record, dict):
                raise ValueError(f'line {n} is not a JSON object with a "question"')
            question = record.get("question")
            if question is None or (isinstance(question, str) and not question.strip()):
                raise ValueError(f"line {n} has no question")
            if not isinstance(question, str):
                raise ValueError(f"line {n}: the question is not text (a {type(question).__name__})")
            where = lone_surrogate(question)
            if where:
                raise ValueError(
                    f"line {n}: the question holds a lone surrogate ({where}), which is not valid Unicode text"
                )
            questions.append(question)
    return questions
