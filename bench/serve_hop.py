"""One deployment-to-deployment call, measured alone, over each ``args.transport`` (grpc and actor).

A caller deployment makes ``--calls`` sequential handle calls to an echo deployment from a worker thread, as a
Retriever replica's pipeline thread does (``serve/handles.py``), with a question-sized payload; the wall time per
call and each replica's CPU time per call (user + system of its process) are printed. Both transports are
deployed side by side and measured alternately, ``--rounds`` times, keeping each one's best round: this machine's
load drifts, and only the ratio within one run is worth reading.

    .venv/bin/python bench/serve_hop.py [--calls 1000] [--rounds 3] [--json-out hop.json]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PAYLOAD = {"question": "Which breeding line carries the Pi-ta blast resistance gene? " * 3, "trace": False}


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) a process has used."""
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000, help="sequential calls per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (best kept)")
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args(argv)

    import ray
    from ray import serve

    from serve.handles import TRANSPORTS, over

    @serve.deployment(max_ongoing_requests=64, ray_actor_options={"num_cpus": 0.05})
    class Echo:
        async def echo(self, payload: dict[str, Any]) -> dict[str, Any]:
            return payload

        async def pid(self) -> int:
            return os.getpid()

    @serve.deployment(max_ongoing_requests=64, ray_actor_options={"num_cpus": 0.05})
    class Caller:
        def __init__(self, echo: Any, transport: str):
            self.echo = over(echo, transport)
            self.pool = concurrent.futures.ThreadPoolExecutor(1)

        def _calls(self, n: int, payload: dict[str, Any]) -> float:
            t0 = time.perf_counter()
            for _ in range(n):
                self.echo.echo.remote(payload).result()
            return (time.perf_counter() - t0) / n * 1000

        async def pids(self) -> dict[str, int]:
            return {"caller": os.getpid(), "callee": await self.echo.pid.remote()}

        async def run(self, n: int, payload: dict[str, Any]) -> float:
            return await asyncio.get_running_loop().run_in_executor(self.pool, self._calls, n, payload)

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        with socket.socket() as probe:  # the HTTP proxy is not measured; any free port
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        handles = {
            t: serve.run(Caller.bind(Echo.bind(), t), name=f"hop-{t}", route_prefix=f"/hop-{t}") for t in TRANSPORTS
        }
        pids = {t: h.pids.remote().result() for t, h in handles.items()}
        for handle in handles.values():  # warm the routers and connections
            handle.run.remote(100, PAYLOAD).result()
        best: dict[str, dict[str, float]] = {}
        for _ in range(args.rounds):
            for transport, handle in handles.items():
                before = {side: cpu_seconds(pid) for side, pid in pids[transport].items()}
                wall = handle.run.remote(args.calls, PAYLOAD).result()
                row = {
                    "wall_ms": wall,
                    **{
                        f"{side}_cpu_ms": (cpu_seconds(pid) - before[side]) * 1000 / args.calls
                        for side, pid in pids[transport].items()
                    },
                }
                if transport not in best or wall < best[transport]["wall_ms"]:
                    best[transport] = row
        print(f"one handle call from a worker thread, best of {args.rounds} round(s) of {args.calls}:")
        for transport, row in best.items():
            print(
                f"  {transport:6} wall {row['wall_ms']:.2f} ms/call, CPU ms/call: caller "
                f"{row['caller_cpu_ms']:.2f}, callee {row['callee_cpu_ms']:.2f}"
            )
        if set(best) == {"grpc", "actor"}:
            ratio = best["actor"]["wall_ms"] / best["grpc"]["wall_ms"]
            print(f"actor / grpc wall time per call: x{ratio:.2f}")
        if args.json_out:
            args.json_out.write_text(json.dumps(best, indent=2))
    finally:
        serve.shutdown()
        ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
