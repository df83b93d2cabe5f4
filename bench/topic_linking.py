"""How often a question typed without brackets starts where its bracketed form does: MetaQA's dev questions, the
topic linked from the plain text the way ``hxd2 query`` and GraphFlow link it, against the bracketed topic.

    .venv/bin/python bench/topic_linking.py [--data ../shared/data/metaqa] [--questions 2000]

The linker is the walk's own (``StartLinker``'s name pass: :func:`~hxd2_ray.extraction.names.named_entities` over
the KB's entity keys, a leading "the" allowed, as ``_GraphKeys`` reads them); no model, no index. A question whose
bracketed topic is not an entity of the KB (the shared KB is rebuilt and misses a few) is left out and counted.
Per hop: the share linked to the bracketed topic, none found, and another entity found first.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from hxd2_ray.extraction.merge import normalize_name
from hxd2_ray.extraction.names import named_entities
from hxd2_ray.graphflow.linking import NAME_MAX_WORDS, plain_question

BRACKETS = re.compile(r"\[([^\[\]]+)\]")
ARTICLE = "the "


class KBKeys:
    """The KB's entity keys as ``named_entities`` reads a graph (``get_entities``), "the X" answering for "X"."""

    def __init__(self, kb: Path):
        self.keys: set[str] = set()
        with open(kb, encoding="utf-8") as fh:
            for line in fh:
                parts = line.rstrip("\n").split("|")
                if len(parts) == 3:
                    self.keys.update((normalize_name(parts[0]), normalize_name(parts[2])))

    def node(self, key: str) -> str | None:
        if key in self.keys:
            return key
        if not key.startswith(ARTICLE) and ARTICLE + key in self.keys:
            return ARTICLE + key
        return None

    def get_entities(self, keys: list[str]) -> list[dict[str, str]]:
        return [{"key": k} for k in keys if self.node(k) is not None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "metaqa"))
    parser.add_argument("--questions", type=int, default=2000, help="first N dev questions per hop (0: all)")
    parser.add_argument("--examples", type=int, default=0, help="print this many misses per hop")
    args = parser.parse_args()
    data = Path(args.data)
    keys = KBKeys(data / "kb.txt")
    print(f"{len(keys.keys):,} entity keys in {data / 'kb.txt'}")
    print(
        "| hop | questions | linked to the bracketed topic | none found | another entity first | topic not in the KB |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for hop in (1, 2, 3):
        lines = (data / f"{hop}-hop" / "qa_dev.txt").read_text(encoding="utf-8").splitlines()
        lines = lines[: args.questions] if args.questions else lines
        right = none = wrong = absent = 0
        misses: list[str] = []
        for line in lines:
            question = line.split("\t")[0]
            topic = BRACKETS.search(question)
            gold = normalize_name(topic.group(1)) if topic else ""
            if gold not in keys.keys:
                absent += 1
                continue
            found = named_entities(plain_question(question), keys, None, max_words=NAME_MAX_WORDS)
            first = keys.node(found[0].key) if found else None
            if first == gold:
                right += 1
                continue
            none += first is None
            wrong += first is not None
            if len(misses) < args.examples:
                misses.append(f"  {question!r} -> {[m.text for m in found[:3]]}")
        counted = len(lines) - absent
        print(
            f"| {hop} | {counted:,} | {right / counted:.3f} | {none / counted:.3f} | {wrong / counted:.3f} | {absent} |"
        )
        for miss in misses:
            print(miss)


if __name__ == "__main__":
    main()
