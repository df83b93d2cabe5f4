"""Serve one or more indexes over HTTP: OpenAI-compatible chat completions (streaming), /v1/query, /v1/models.

    hxd2 serve --index PATH_OR_S3 [--index NAME=PATH_OR_S3 ...] [--config configs/local.yaml]
               [--set section.key=value] [--serve-config configs/serve.yaml] [--host 127.0.0.1] [--port 8000]
               [--address auto|ray://HEAD:10001] [--num-cpus N] [--no-auth] [--mode MODE]
               [--parts deployments|in_replica] [--detach]
    hxd2 serve reload [--url http://127.0.0.1:8000] [--key-env HXD2_API_KEYS]

Deployment sizes (replicas, autoscaling, queues, CPUs/GPUs) and the HTTP options come from the Serve config file
(``--serve-config``, default ``configs/serve.yaml``); the flags override its index, hxd2 config, host and port.
API keys: ``$HXD2_API_KEYS`` (comma-separated) in this shell (a local Ray passes it to the replicas) or
``api_keys_file`` in the Serve config; ``--no-auth`` serves without keys (only on 127.0.0.1).

The same application also runs with Serve's own CLI: ``serve run configs/serve.yaml`` or
``serve deploy configs/serve.yaml -a http://HEAD:8265``. Exit codes: 0 stopped cleanly, 2 bad input, 1 failure.
"""

from __future__ import annotations

import argparse
import copy
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import yaml

from jobs.cli import add_config_overrides
from jobs.process_reaper import become_subreaper, reap_descendants
from jobs.serve_placement import POLL_S, PlacementWatch, wait_until_stopped

log = logging.getLogger("hxd2.serve")
DEFAULT_SERVE_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "serve.yaml"
APP_NAME = "hxd2"
# Ray's core worker ends the process 60 s after it loses the GCS; a stop signal sent to the whole process group
# (systemd's default, a test killing its session) stops the GCS with us, so the shutdown gives up before that.
SHUTDOWN_TIMEOUT_S = 45.0
# How long, after a stop signal, to watch the Ray node this command started for processes the same signal stopped.
RAY_STOP_WAIT_S = 2.0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hxd2 serve", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--index",
        dest="indexes",
        action="append",
        default=[],
        metavar="[NAME=]PATH_OR_S3",
        help="an index to serve (repeatable); NAME is the OpenAI 'model' (default: folder name)",
    )
    parser.add_argument(
        "--config",
        default=None,
        help="hxd2 YAML config (llm, embedding, retrieval, s3); with --index and no --config, the "
        "config the index was built with",
    )
    add_config_overrides(parser, "override an hxd2 config value (repeatable)")
    parser.add_argument(
        "--serve-config",
        default=None,
        help="Serve config file for deployment sizes and HTTP options "
        f"(default: configs/{DEFAULT_SERVE_CONFIG.name} when present)",
    )
    parser.add_argument("--host", default=None, help="HTTP host (default: the Serve config's, else 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="HTTP port (default: the Serve config's, else 8000)")
    parser.add_argument("--address", default=None, help="Ray cluster to join (auto, ray://…); default: a local Ray")
    parser.add_argument("--num-cpus", type=int, default=None, help="CPUs of a local Ray (default: all)")
    parser.add_argument("--no-auth", action="store_true", help="serve without API keys (local development)")
    parser.add_argument(
        "--keys-file",
        default=None,
        metavar="FILE",
        help="tenants' keys (hxd2 keys add): each key reads only its indexes, within its budgets; a change is "
        "picked up within seconds, no restart",
    )
    parser.add_argument(
        "--audit-log",
        default=None,
        metavar="PATH",
        help="JSON-lines audit log, a line per request (tenant, index, route, status, latency, tokens; never a key); "
        "'{pid}' in PATH gives each Ingress replica its own file",
    )
    parser.add_argument("--mode", default=None, help="default query mode of requests that name none (auto)")
    parser.add_argument(
        "--parts",
        choices=("deployments", "in_replica"),
        default=None,
        help="planner, plan executor and verifier as their own deployments (default) or inside each Retriever replica",
    )
    parser.add_argument("--name", default=APP_NAME, help="Serve application name")
    parser.add_argument(
        "--detach",
        action="store_true",
        help="return once deployed, leaving the app running (with --address: on the cluster)",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show Ray's and Serve's logs here instead of writing them to a log file",
    )
    return parser


RAY_START_ATTEMPTS = 4
RAY_START_FIRST_WAIT_S = 5.0  # then 10, 20: a busy machine gets ~35 s of waits besides Ray's own start waits


def start_ray_with_retries(
    init: Callable[[], None],
    shutdown: Callable[[], None],
    *,
    where: str,
    attempts: int = RAY_START_ATTEMPTS,
    first_wait_s: float = RAY_START_FIRST_WAIT_S,
    sleep: Callable[[float], None] = time.sleep,
    log: Callable[[str], None] = print,
) -> None:
    """``init()`` Ray, again after a growing wait when it fails (on a busy machine the local node's start can time
    out: "current node timed out during startup"), at most ``attempts`` times; then one
    :class:`~hxd2_ray.errors.HxdError` that says why and what to do."""
    from hxd2_ray.errors import HxdError

    wait = first_wait_s
    last = ""
    for attempt in range(1, attempts + 1):
        try:
            init()
            return
        except Exception as exc:  # noqa: BLE001 - Ray raises plain Exception/RuntimeError/ConnectionError here
            last = " ".join(str(exc).split())[:200] or type(exc).__name__
            try:
                shutdown()  # what a failed start left running, before the next try
            except Exception as cleanup:  # noqa: BLE001 - said with the start's own failure
                last += f"; its cleanup failed too: {type(cleanup).__name__}: {' '.join(str(cleanup).split())[:200]}"
            if attempt < attempts:
                log(f"Ray did not start ({last}); trying again in {wait:.0f} s ({attempt}/{attempts})")
                sleep(wait)
                wait *= 2
    raise HxdError(
        f"Ray did not start {where} after {attempts} tries ({last}). The machine may be too busy: try "
        "again when it is quieter, or start Ray yourself (ray start --head) and pass --address auto"
    )


def _index_arg(value: str) -> tuple[str, str]:
    name, sep, location = value.partition("=")
    if sep and name and "://" not in name and "/" not in name:
        return name, location
    location = value
    base = location.rstrip("/").rsplit("/", 1)[-1] or "index"
    return base, location


def plan(argv: list[str]) -> tuple[dict[str, Any], dict[str, Any], argparse.Namespace]:
    """Parse flags and the Serve config into (app args, http options, flags). Raises ValueError on bad input."""
    ns = build_parser().parse_args(argv)
    serve_config_path = Path(ns.serve_config) if ns.serve_config else DEFAULT_SERVE_CONFIG
    serve_config: dict[str, Any] = {}
    if ns.serve_config or serve_config_path.exists():
        if not serve_config_path.exists():
            raise ValueError(f"Serve config not found: {serve_config_path}")
        serve_config = yaml.safe_load(serve_config_path.read_text(encoding="utf-8")) or {}
    apps = serve_config.get("applications") or [{}]
    app_cfg = copy.deepcopy(apps[0])
    args: dict[str, Any] = dict(app_cfg.get("args") or {})
    if ns.indexes:
        indexes: dict[str, str] = {}
        for raw in ns.indexes:
            name, location = _index_arg(raw)
            if name in indexes:
                raise ValueError(f"index name {name!r} given twice; use NAME=PATH to tell them apart")
            indexes[name] = location
        args["indexes"] = indexes
        args.pop("default_index", None)
        if ns.config is None:
            # Indexes named here carry their own config; the Serve file's belongs to its own indexes.
            args.pop("config", None)
            args.pop("config_data", None)
    if not args.get("indexes"):
        raise ValueError("no index to serve: give --index PATH (or indexes in the Serve config's args)")
    if ns.config is not None:
        args["config"] = ns.config
        args.pop("config_data", None)
    if ns.overrides:
        args["overrides"] = list(args.get("overrides") or []) + ns.overrides
    if ns.no_auth:
        args["auth"] = False
    if ns.mode is not None:
        args["mode"] = ns.mode
    if ns.parts is not None:
        args["parts"] = ns.parts
    # The file's deployments list (Serve applies it for `serve run/deploy`) becomes deployment_options here.
    options = dict(args.get("deployment_options") or {})
    for dep in app_cfg.get("deployments") or []:
        dep = dict(dep)
        name = dep.pop("name")
        options[name] = {**dep, **options.get(name, {})}
    args["deployment_options"] = options
    for name, location in args["indexes"].items():
        if "://" not in location and not Path(location).expanduser().is_dir():
            raise ValueError(f"index {name!r}: no folder at {location}")
    http = dict(serve_config.get("http_options") or {})
    http["host"] = ns.host or http.get("host") or "127.0.0.1"
    http["port"] = ns.port or http.get("port") or 8000
    if ns.audit_log is not None:
        args["audit_log"] = str(Path(ns.audit_log).expanduser().absolute())
    if ns.keys_file is not None:
        args["keys_file"] = str(Path(ns.keys_file).expanduser().absolute())
    if args.get("keys_file"):
        from serve.tenants import read_keys_file

        read_keys_file(args["keys_file"])  # a bad or missing file is one line here, not a replica that fails
    if args.get("auth", True) and not args.get("api_keys_file") and not args.get("keys_file"):
        env = args.get("api_keys_env", "HXD2_API_KEYS")
        if not os.environ.get(env, "").strip():
            raise ValueError(f"auth is on but ${env} is empty: export {env}=key1,key2 (or --no-auth for local use)")
    if ns.detach and not ns.address:
        raise ValueError("--detach needs --address: a local Ray ends with this process")
    if not args.get("auth", True) and http["host"] not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError(f"--no-auth only on a loopback host, not {http['host']}")
    return args, http, ns


def deployment_failures(app_status: Any) -> list[str]:
    """``Deployment: cause`` of each deployment that failed to start, the cause being the last line of the replica's
    traceback that Serve keeps in the deployment's status message (Serve itself only names the deployments)."""
    out = []
    for name, info in sorted((getattr(app_status, "deployments", None) or {}).items()):
        status = str(getattr(info, "status", ""))
        if "FAIL" not in status and "UNHEALTHY" not in status:
            continue
        lines = [line.strip() for line in str(getattr(info, "message", "") or "").splitlines() if line.strip()]
        cause = next((line for line in reversed(lines) if not line.startswith(("File ", "^", "~"))), "")
        out.append(f"{name}: {cause or status}")
    return out


def unplaceable_upscales(deployment_options: dict[str, dict[str, Any]], cluster_cpus: float) -> list[str]:
    """The deployments whose ``max_replicas`` cannot all be placed on ``cluster_cpus`` logical CPUs with every
    other deployment at its own maximum: the autoscaler would decide such an upscale and it would stay pending,
    without a word from Serve. One line per deployment, for the serve log and the terminal."""

    def cpus(options: dict[str, Any]) -> float:
        return float((options.get("ray_actor_options") or {}).get("num_cpus", 0) or 0)

    def most(options: dict[str, Any]) -> int:
        auto = options.get("autoscaling_config") or {}
        return int(auto.get("max_replicas") or options.get("num_replicas") or 1)

    at_max = sum(cpus(o) * most(o) for o in deployment_options.values())
    if at_max <= cluster_cpus + 1e-9:
        return []
    at_min = {
        name: cpus(o) * int((o.get("autoscaling_config") or {}).get("min_replicas") or o.get("num_replicas") or 1)
        for name, o in deployment_options.items()
    }
    lines = []
    for name, options in sorted(deployment_options.items()):
        if most(options) <= 1 or cpus(options) == 0:
            continue
        others = sum(v for n, v in at_min.items() if n != name)
        fits = int((cluster_cpus - others + 1e-9) // cpus(options)) if cpus(options) else most(options)
        if fits < most(options):
            lines.append(
                f"{name}: max_replicas {most(options)} at {cpus(options):g} CPU each, but {cluster_cpus:g} "
                f"CPUs hold {max(fits, 0)} beside the other deployments; lower its num_cpus share or its "
                "max_replicas (configs/serve.yaml), or add nodes"
            )
    return lines or [f"the deployments' max_replicas need {at_max:g} CPUs at once; the cluster has {cluster_cpus:g}"]


def check_local_indexes_on_every_node(indexes: dict[str, str]) -> None:
    """A replica may start on any node: a local index path must hold the index on every node of the cluster."""
    import pyarrow.fs as pafs

    from hxd2_ray.index_store.cluster_storage import ReadCheck
    from jobs.cluster_check import check_every_node

    local = [loc.removeprefix("file://") for loc in indexes.values() if "://" not in loc or loc.startswith("file://")]
    if local:
        manifests = tuple(os.path.join(os.path.abspath(os.path.expanduser(p)), "manifest.json") for p in local)
        check_every_node(
            None, "", ", ".join(local), reads=[ReadCheck(pafs.LocalFileSystem(), manifests, "index")], what="index path"
        )


def reload_main(argv: list[str]) -> int:
    """``hxd2 serve reload``: ask a running server to switch to its indexes' newly published generations now."""
    parser = argparse.ArgumentParser(prog="hxd2 serve reload", description=reload_main.__doc__)
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the server (default http://127.0.0.1:8000)")
    parser.add_argument(
        "--key-env",
        default="HXD2_API_KEYS",
        help="environment variable holding the API key (the first of a comma-separated list)",
    )
    try:
        ns = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    import httpx

    key = (os.environ.get(ns.key_env, "").split(",")[0]).strip()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    url = f"{ns.url.rstrip('/')}/v1/admin/reload"
    try:
        response = httpx.post(url, headers=headers, timeout=150)
    except httpx.HTTPError as exc:
        print(f"error: no answer from {url} ({type(exc).__name__}); is hxd2 serve running there?", file=sys.stderr)
        return 2
    if response.status_code != 200:
        try:
            message = response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = response.text[:300]
        print(f"error: {url} answered {response.status_code}: {message}", file=sys.stderr)
        return 2 if response.status_code in (401, 403, 404) else 1
    for name, generation in response.json().get("generations", {}).items():
        print(f"{name}: serving generation {generation}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "reload":
        return reload_main(argv[1:])
    try:
        app_args, http, ns = plan(argv)
    except SystemExit as exc:  # --help, or a usage error argparse has explained
        return int(exc.code or 0)
    except (ValueError, OSError, yaml.YAMLError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    from hxd2_ray.errors import HxdError
    from serve.app import build_app

    try:
        app = build_app(app_args)  # validates args and the hxd2 config before Ray starts
    except (HxdError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    from jobs.console import engine_logs_to

    first_local = next((loc for loc in app_args["indexes"].values() if "://" not in loc), None)
    with engine_logs_to("serve", first_local, verbose=ns.verbose) as logs:
        if logs.path is not None:
            print(
                f"hxd2 serve: Ray's and Serve's logs go to {logs.path} (-v shows them here)",
                file=logs.terminal,
                flush=True,
            )
        return _serve(app, app_args, http, ns, logs.terminal)


def _serve(app: Any, app_args: dict[str, Any], http: dict[str, Any], ns: argparse.Namespace, terminal: Any) -> int:
    import ray
    from ray import serve

    from hxd2_ray.errors import HxdError

    def say(line: str) -> None:
        print(line, file=terminal, flush=True)

    stop = {"now": False, "started": False, "signalled": False}

    def _stop(*_: Any) -> None:
        stop["now"] = True
        stop["signalled"] = True
        if not stop["started"]:
            # Still starting: serve.run blocks until every deployment is up, and the same signal may have stopped
            # Ray's own processes, so waiting for it would end with Ray's silent exit; stop as Ctrl-C would.
            raise KeyboardInterrupt

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    # Serve's proxies on the Ray this starts run the front door (a lost Ingress answers a JSON 503, deadlines count
    # from the proxy); a cluster's nodes get it from their environment (cluster/Dockerfile).
    from serve.front_door import PROXY_CALLBACK, PROXY_CALLBACK_ENV

    os.environ.setdefault(PROXY_CALLBACK_ENV, PROXY_CALLBACK)
    become_subreaper()  # before Ray starts: what its workers start and leave behind becomes ours to stop at exit
    try:
        if ns.address:
            start_ray_with_retries(
                lambda: ray.init(address=ns.address), ray.shutdown, where=f"at {ns.address}", log=say
            )
        else:
            start_ray_with_retries(
                lambda: ray.init(address="local", num_cpus=ns.num_cpus, include_dashboard=False),
                ray.shutdown,
                where="on this machine",
                log=say,
            )
        check_local_indexes_on_every_node(app_args["indexes"])
    except HxdError as exc:
        say(f"error: {exc}")
        ray.shutdown()
        return 2
    # The processes of the Ray node this command started (none with --address): a stop signal sent to the whole
    # process group (`kill %1`, systemd, a test) stops them with us, and a graceful teardown then aborts the process.
    ray_processes = [] if ns.address else started_processes()
    signal.signal(signal.SIGTERM, _stop)  # after ray.init, which sets its own (an exit that skips our teardown)
    for line in unplaceable_upscales(
        app_args.get("deployment_options") or {}, float(ray.cluster_resources().get("CPU", 0))
    ):
        log.warning("upscale cannot be placed: %s", line)  # the serve log has it too
        say(f"warning: an upscale cannot be placed: {line}")
    code = 0
    try:
        serve.start(http_options=http)
        try:
            serve.run(app, name=ns.name, route_prefix="/")
        except RuntimeError as exc:
            failures = deployment_failures(serve.status().applications.get(ns.name))
            if not failures:
                raise
            say(f"error: the application did not start ({exc}):")
            for line in failures:
                say(f"  {line}")
            code = 1
            return code
        stop["started"] = True
        url = f"http://{http['host']}:{http['port']}"
        say(
            f"serving {', '.join(app_args['indexes'])} at {url}/v1 (OpenAI base_url); web UI: {url}/ui; "
            f"health: {url}/healthz"
        )
        if ns.detach:
            return 0
        watch = PlacementWatch(ns.name, app_args.get("deployment_options") or {}, say)
        watch_error = {"last": ""}

        def poll_placement() -> None:
            try:
                watch.poll()
                watch_error["last"] = ""
            except Exception as exc:  # noqa: BLE001 - a status call that failed once is tried again next time
                if f"{type(exc).__name__}: {exc}" != watch_error["last"]:  # once per new error, not every poll
                    watch_error["last"] = f"{type(exc).__name__}: {exc}"
                    log.warning("placement watch: %s (tried again every %s s)", watch_error["last"], POLL_S)

        wait_until_stopped(lambda: stop["now"], poll_placement)
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # noqa: BLE001 - report, then leave a clean exit code
        say(f"error: {type(exc).__name__}: {exc}")
        code = 1
    finally:
        if not ns.detach:
            say("shutting down")
            # A second Ctrl-C or stop signal must not leave Ray half torn down.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)

            def _tear_down() -> None:
                try:
                    serve.shutdown()
                finally:
                    ray.shutdown()

            def _give_up(exit_code: int = code) -> None:
                say(
                    f"warning: Ray did not finish shutting down within {SHUTDOWN_TIMEOUT_S:.0f} s (its own "
                    "processes got the stop signal too?); exiting without it"
                )
                reap_descendants(say=say)
                os._exit(exit_code)

            if stop["signalled"] and any_went_down(ray_processes, within_s=RAY_STOP_WAIT_S):
                say("Ray's own processes got the stop signal too; exiting without Serve's teardown")
                reap_descendants(say=say)
                logging.shutdown()
                os._exit(code)
            shut_down_within(_tear_down, SHUTDOWN_TIMEOUT_S, _give_up)
            reap_descendants(say=say)
    return code


def started_processes() -> list[Any]:
    """The GCS and the raylet among this process's children: after a local ``ray.init``, the node it started."""
    import psutil

    found = []
    for child in psutil.Process().children():
        try:
            if child.name() in ("gcs_server", "raylet"):
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def any_went_down(processes: list[Any], within_s: float) -> bool:
    """Whether any of ``processes`` has exited (or is a zombie) within ``within_s`` seconds."""
    import psutil

    deadline = time.monotonic() + within_s
    while True:
        for process in processes:
            try:
                if process.status() == psutil.STATUS_ZOMBIE:
                    return True
            except psutil.NoSuchProcess:
                return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def shut_down_within(tear_down: Callable[[], None], timeout_s: float, give_up: Callable[[], None]) -> None:
    """Run ``tear_down`` on this thread; if it has not returned after ``timeout_s``, a watchdog calls ``give_up``
    (which exits the process: a teardown blocked on a dead GCS cannot be interrupted)."""
    watchdog = threading.Timer(timeout_s, give_up)
    watchdog.daemon = True
    watchdog.start()
    try:
        tear_down()
    finally:
        watchdog.cancel()


if __name__ == "__main__":
    sys.exit(main())
