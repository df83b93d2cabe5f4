"""Index-time cost of title mentions: every chunk read for the other documents' titles, at scale.

    .venv/bin/python bench/title_mentions_build.py [--sizes 10000,100000] [--words 150] [--names-per-chunk 4]

Per size N: N documents of one chunk each, titled with two to three capitalised made-up words (a vocabulary of
5,000, so titles repeat words as real names do); each chunk has ``--words`` words of lower- and upper-case
filler (sentence starts, other capitalised words that are no title) and ``--names-per-chunk`` other documents'
titles. Then :func:`hxd2_ray.graph_assembly.title_mentions.title_mention_edges` over all N, as the write stage runs
it. Reported: seconds, chunks/s, rows found, and the share of planted names found.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from hxd2_ray.config import TitleMentionConfig
from hxd2_ray.graph.schema import CHUNKS, DOCUMENTS
from hxd2_ray.graph_assembly.title_mentions import title_mention_edges

FILLER = (
    "the of and a in to was is for on as with by at from that which his her its were has had river city "
    "album film song team player born known first later during after before school university"
).split()


def corpus(n: int, args: argparse.Namespace) -> tuple[pa.Table, pa.Table, int]:
    rng = random.Random(args.seed)
    vocab = [
        f"{rng.choice('BCDFGKLMNPRSTVZ')}{''.join(rng.choice('aeiou') + rng.choice('lmnrstvz') for _ in range(2))}"
        for _ in range(5000)
    ]
    titles: list[str] = []
    seen: set[str] = set()
    while len(titles) < n:
        t = " ".join(rng.choice(vocab) for _ in range(rng.choice((2, 2, 3))))
        if t not in seen:
            seen.add(t)
            titles.append(t)
    docs, chunks, planted = [], [], 0
    for i, title in enumerate(titles):
        words = [rng.choice(FILLER) if rng.random() < 0.85 else rng.choice(vocab) for _ in range(args.words)]
        for _ in range(args.names_per_chunk):
            other = titles[rng.randrange(n)]
            if other != title:
                words.insert(rng.randrange(len(words)), f"the {other} of")
                planted += 1
        docs.append({"id": f"d{i}", "source_id": f"d{i}", "source_path": "", "title": title, "n_chars": 0})
        chunks.append(
            {
                "id": f"c{i}",
                "doc_id": f"d{i}",
                "order": 0,
                "start": 0,
                "text": " ".join(words) + ".",
                "header_path": "",
                "language": "en",
                "shard": 0,
            }
        )
    return pa.Table.from_pylist(docs, schema=DOCUMENTS), pa.Table.from_pylist(chunks, schema=CHUNKS), planted


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--words", type=int, default=150)
    ap.add_argument("--names-per-chunk", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(f"{'chunks':>9} {'seconds':>8} {'chunks/s':>9} {'rows':>9} {'planted found':>14}  load average")
    for n in (int(s) for s in args.sizes.split(",")):
        docs, chunks, planted = corpus(n, args)
        started = time.perf_counter()
        rows = title_mention_edges(docs, chunks, TitleMentionConfig())
        seconds = time.perf_counter() - started
        found = rows.num_rows / max(1, planted)
        print(
            f"{n:>9,} {seconds:>8.1f} {n / seconds:>9,.0f} {rows.num_rows:>9,} {found:>14.3f}"
            f"  {os.getloadavg()[0]:.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
