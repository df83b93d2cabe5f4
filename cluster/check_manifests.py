"""Check the KubeRay manifests under ``cluster/kuberay/`` against KubeRay's own CRDs, as a cluster's API server would.

    python cluster/check_manifests.py [MANIFEST.yaml ...]     (default: cluster/kuberay/*.yaml)

Each document is validated against the ``openAPIV3Schema`` of its kind's CRD (``cluster/kuberay/crds/``, copied
unchanged from KubeRay, gzipped) with ``jsonschema``. Type validation alone is not enough: a Kubernetes API server
silently prunes a field its structural schema does not declare, so a misspelt key (``replcas:``) applies as if it
were absent. Every object whose schema lists its ``properties`` is therefore checked closed: a key it does not
declare is an error. Beyond the CRDs: every container image is the one ``${HXD2_IMAGE}`` variable, ``rayVersion``
is the Ray that ``pyproject.toml`` pins, and a RayService's ``serveConfigV2`` is YAML whose application args the
Serve app accepts. Exit status 1 with one line per problem, 0 when every manifest holds.
"""

from __future__ import annotations

import functools
import gzip
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator

CLUSTER = Path(__file__).resolve().parent
REPO = CLUSTER.parent
CRDS = CLUSTER / "kuberay" / "crds"
IMAGE_VARIABLE = "${HXD2_IMAGE}"
_CRD_FILES = {
    "RayCluster": "ray.io_rayclusters.yaml.gz",
    "RayJob": "ray.io_rayjobs.yaml.gz",
    "RayService": "ray.io_rayservices.yaml.gz",
}


@functools.lru_cache(maxsize=None)
def crd_schema(kind: str, version: str) -> dict[str, Any]:
    """The openAPIV3Schema of ``kind`` at ``version`` (``v1`` of ``ray.io/v1``), closed (:func:`closed`)."""
    if kind not in _CRD_FILES:
        raise ValueError(f"no KubeRay CRD for kind {kind!r} (known: {', '.join(_CRD_FILES)})")
    with gzip.open(CRDS / _CRD_FILES[kind], "rt", encoding="utf-8") as fh:
        crd = yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # 1 MB each: the C parser
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return dict(closed(v["schema"]["openAPIV3Schema"]))
    raise ValueError(f"the {kind} CRD has no version {version!r}")


def closed(schema: Any) -> Any:
    """A copy of a structural schema in which every object that lists its properties admits no other key (what the
    API server would prune without a word). Maps (``additionalProperties``) and preserved objects stay open."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: closed(v) for k, v in schema.items()}
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def _where(path: Any) -> str:
    return ".".join(str(p) for p in path) or "(document)"


def schema_problems(doc: dict[str, Any]) -> list[str]:
    api = str(doc.get("apiVersion", ""))
    if not api.startswith("ray.io/"):
        return [f"apiVersion {api!r} is not ray.io/…"]
    schema = crd_schema(str(doc.get("kind")), api.split("/", 1)[1])
    # metadata is checked by the API server itself, not by the CRD (its schema says only "object")
    validator = Draft202012Validator(schema)
    problems = []
    for err in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
        if err.validator == "additionalProperties":
            extra = re.findall(r"'([^']+)' (?:was|were) unexpected", err.message)
            problems.append(
                f"{_where(err.absolute_path)}: field(s) the schema does not declare (Kubernetes would "
                f"drop them silently): {', '.join(extra) or err.message}"
            )
        else:
            problems.append(f"{_where(err.absolute_path)}: {err.message[:300]}")
    return problems


def _containers(node: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                for i, c in enumerate(value):
                    if isinstance(c, dict):
                        yield ".".join((*path, key, str(i))), c
            else:
                yield from _containers(value, (*path, str(key)))
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _containers(item, (*path, str(i)))


def pinned_ray_version(pyproject: Path = REPO / "pyproject.toml") -> str:
    match = re.search(r'"ray\[[^\]]*\]==([0-9.]+)"', pyproject.read_text(encoding="utf-8"))
    if not match:
        raise ValueError(f"{pyproject} pins no ray[...]==version")
    return match[1]


def project_problems(doc: dict[str, Any]) -> list[str]:
    """What the CRDs cannot know: one image variable, the pinned Ray, a Serve config the app accepts."""
    problems = []
    for where, container in _containers(doc.get("spec", {}), ("spec",)):
        if container.get("image") != IMAGE_VARIABLE:
            problems.append(
                f"{where}.image: {container.get('image')!r}; every container runs {IMAGE_VARIABLE} "
                "(set at apply time, cluster/README.md)"
            )
    ray = pinned_ray_version()
    for where, value in _find_key(doc.get("spec", {}), "rayVersion", ("spec",)):
        if str(value) != ray:
            problems.append(f"{where}: {value!r} but pyproject.toml pins ray {ray}")
    serve_config = doc.get("spec", {}).get("serveConfigV2")
    if serve_config is not None:
        problems += serve_config_problems(serve_config)
    return problems


def _find_key(node: Any, key: str, path: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k == key:
                yield ".".join((*path, k)), v
            else:
                yield from _find_key(v, key, (*path, str(k)))
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _find_key(item, key, (*path, str(i)))


def serve_config_problems(text: str) -> list[str]:
    # the repo root is on sys.path only once __main__ (or the test runner) put it there
    from pydantic import ValidationError  # noqa: PLC0415

    from serve.schemas import ServeAppArgs  # noqa: PLC0415

    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return [f"spec.serveConfigV2: not YAML ({str(exc).splitlines()[0]})"]
    problems = []
    for i, app in enumerate((config or {}).get("applications") or []):
        if app.get("import_path") != "serve.app:build_app":
            continue
        args = dict(app.get("args") or {})
        args.pop("deployment_options", None)
        try:
            ServeAppArgs.model_validate(args)
        except ValidationError as exc:
            for e in exc.errors():
                problems.append(f"spec.serveConfigV2.applications.{i}.args.{_where(e['loc'])}: {e['msg']}")
    return problems


def check_file(path: Path) -> list[str]:
    problems = []
    for n, doc in enumerate(yaml.safe_load_all(path.read_text(encoding="utf-8"))):
        if not doc:
            continue
        where = f"{path.name}[{n}] {doc.get('kind')}"
        problems += [f"{where}: {p}" for p in schema_problems(doc) + project_problems(doc)]
    return problems


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or sorted((CLUSTER / "kuberay").glob("*.yaml"))
    problems = [p for path in paths for p in check_file(path)]
    for p in problems:
        print(p, file=sys.stderr)
    if not problems:
        print(f"{len(paths)} KubeRay manifest(s) valid against the KubeRay CRDs", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))  # serve.schemas, when run as a script from anywhere
    sys.exit(main(sys.argv[1:]))
