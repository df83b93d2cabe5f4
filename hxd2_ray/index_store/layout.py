"""Where a built index keeps its files: the one place that turns an index folder into the paths a reader opens.

Every writer publishes through a manifest (:mod:`hxd2_ray.index_store.manifest`) that names the current generation:
``generations/<id>/`` for indexes the index job built or changed, ``""`` (the root itself) for the flat layout of
``hxd2 index-kb`` and of format-1 manifests. A reader that joins ``graph.kuzu`` to the root by hand breaks on the
first of these; readers locate the index here instead, so both layouts open alike.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from hxd2_ray.errors import IndexNotFoundError
from hxd2_ray.index_store.manifest import MANIFEST_NAME, IndexManifest, generation_dir, read_manifest

GRAPH_NAME = "graph.kuzu"
VECTORS_NAME = "vectors"


@dataclass(frozen=True)
class IndexLayout:
    """A local index folder and its manifest: the paths of the generation the manifest names."""

    root: Path
    manifest: IndexManifest

    @property
    def generation_root(self) -> Path:
        """The folder holding the current generation's graph and vectors."""
        return self.root / generation_dir(self.manifest.generation)

    @property
    def graph_path(self) -> Path:
        return self.generation_root / GRAPH_NAME

    @property
    def vectors_root(self) -> Path:
        return self.generation_root / VECTORS_NAME


def locate_local_index(location: str | os.PathLike[str]) -> IndexLayout:
    """The layout of the complete index at a local folder; :class:`IndexNotFoundError` says what is missing."""
    where = os.fspath(location)
    if "://" in where:
        raise IndexNotFoundError(f"{where} is not a local folder: copy the index to a local folder first")
    root = Path(where).expanduser()
    if not root.is_dir():
        raise IndexNotFoundError(f"no index at {root}: the folder does not exist")
    if not (root / MANIFEST_NAME).exists():
        raise IndexNotFoundError(
            f"no {MANIFEST_NAME} in {root}: not an index folder, or a build that never finished (the index job "
            "writes the manifest last); rerun hxd2 index to finish it"
        )
    layout = IndexLayout(root=root, manifest=read_manifest(root))
    if not layout.graph_path.exists():
        raise IndexNotFoundError(
            f"index at {root} has a manifest but no {GRAPH_NAME} at {layout.graph_path}: copy or rebuild it whole"
        )
    return layout
