"""Small generated graphs with questions, for GraphFlow's tests and benchmarks (no index needed).

:func:`movie_world`: movies, people and genres with directed relations (``directed_by``, ``starred_actors``,
``has_genre``) and MetaQA-shaped questions of five kinds, one and two hops, each with the full answer set.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hxd2_ray.config import ExtractionConfig
from hxd2_ray.evaluation.datasets import EvalItem
from hxd2_ray.extraction.merge import entity_key
from hxd2_ray.graphflow.walk_graph import Signature, WalkGraph, relation_label

__all__ = ["BASIC_KINDS", "SHORTCUT_KIND", "SyntheticWorld", "movie_world"]

BASIC_KINDS = (
    "movie_to_director",
    "movie_to_actor",
    "movie_to_director_to_movie",
    "director_to_movie",
    "director_to_movie_to_genre",
)
# "what genres do the other films by the director of [M] have": three hops (M -> director -> other film -> genre),
# but M's own genre is one hop away and is an answer exactly when another film of the director shares it. So
# shortest-path demonstrations teach the one-hop shortcut for some answers, which is right for some questions only:
# a task where imitating the shortest paths is not the same as following where the reward is.
SHORTCUT_KIND = "other_films_genres"

_WORDS = (
    "amber",
    "basil",
    "cedar",
    "delta",
    "ember",
    "fjord",
    "grove",
    "heron",
    "indigo",
    "juniper",
    "kestrel",
    "lumen",
    "maple",
    "nectar",
    "onyx",
    "pylon",
    "quartz",
    "raven",
    "sable",
    "tundra",
    "umber",
    "vesper",
    "willow",
    "xenon",
    "yarrow",
    "zephyr",
)


@dataclass
class SyntheticWorld:
    graph: WalkGraph
    node_texts: list[str]
    questions: list[EvalItem]


def _name(rng: np.random.Generator, used: set[str], prefix: str) -> str:
    while True:
        name = f"{prefix} {_WORDS[int(rng.integers(len(_WORDS)))].title()} {int(rng.integers(1000))}"
        if name not in used:
            used.add(name)
            return name


def movie_world(
    n_movies: int = 40, n_people: int = 24, n_genres: int = 5, seed: int = 0, kinds: tuple[str, ...] | None = None
) -> SyntheticWorld:
    """``kinds``: the question kinds to generate (default: the five of :data:`BASIC_KINDS`); add
    ``"other_films_genres"`` for the three-hop kind with a shortcut (see :data:`SHORTCUT_KIND`)."""
    rng = np.random.default_rng(seed)
    used: set[str] = set()
    movies = [_name(rng, used, "Film") for _ in range(n_movies)]
    people = [_name(rng, used, "Person") for _ in range(n_people)]
    genres = [f"Genre {w.title()}" for w in _WORDS[:n_genres]]
    names = movies + people + genres
    types = ["movie"] * n_movies + ["person"] * n_people + ["genre"] * n_genres
    key_cfg = ExtractionConfig()
    keys = [entity_key(n, key_cfg) for n in names]
    pid = {p: n_movies + i for i, p in enumerate(people)}
    gid = {g: n_movies + n_people + i for i, g in enumerate(genres)}
    facts: list[tuple[int, str, int]] = []
    director = {}
    for m in range(n_movies):
        d = people[int(rng.integers(n_people))]
        director[m] = d
        facts.append((m, "directed_by", pid[d]))
        for a in rng.choice(n_people, size=2, replace=False):
            if people[int(a)] != d:
                facts.append((m, "starred_actors", pid[people[int(a)]]))
        facts.append((m, "has_genre", gid[genres[int(rng.integers(n_genres))]]))
    edges: list[tuple[int, int, Signature]] = []
    for s, r, o in facts:
        edges.append((s, o, ((relation_label(r), "out"),)))
        edges.append((o, s, ((relation_label(r), "in"),)))
    graph = WalkGraph.from_edges(keys, edges, names=names, types=types)

    def objects(s: int, r: str) -> list[int]:
        return [o for ss, rr, o in facts if ss == s and rr == r]

    def subjects(o: int, r: str) -> list[int]:
        return [s for s, rr, oo in facts if oo == o and rr == r]

    questions: list[EvalItem] = []

    wanted = set(kinds or BASIC_KINDS)

    def add(text: str, answers: list[int], hops: int, kind: str) -> None:
        answers = sorted(set(answers))
        if answers and kind in wanted:
            questions.append(
                EvalItem(
                    id=f"q{len(questions):04d}",
                    question=text.replace("[", "").replace("]", ""),
                    answers=tuple(names[a] for a in answers),
                    task="kgqa",
                    meta={"question_marked": text, "hops": hops, "qtype": kind},
                )
            )

    for m in range(n_movies):
        add(f"who directed [{movies[m]}]", objects(m, "directed_by"), 1, "movie_to_director")
        add(f"who acted in [{movies[m]}]", objects(m, "starred_actors"), 1, "movie_to_actor")
        same = [x for d in objects(m, "directed_by") for x in subjects(d, "directed_by") if x != m]
        add(f"which films share the director of [{movies[m]}]", same, 2, "movie_to_director_to_movie")
        add(
            f"what genres do the other films by the director of [{movies[m]}] have",
            [g for x in same for g in objects(x, "has_genre")],
            3,
            SHORTCUT_KIND,
        )
    for p in range(n_people):
        add(f"what films did [{people[p]}] direct", subjects(pid[people[p]], "directed_by"), 1, "director_to_movie")
        add(
            f"what genres are the films directed by [{people[p]}]",
            [g for m in subjects(pid[people[p]], "directed_by") for g in objects(m, "has_genre")],
            2,
            "director_to_movie_to_genre",
        )
    return SyntheticWorld(graph=graph, node_texts=list(names), questions=questions)
