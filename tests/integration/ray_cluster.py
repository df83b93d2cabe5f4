"""A real two-node Ray cluster on this machine for tests: a head and a second ``ray start --address`` node.

Both nodes live in a private ``--temp-dir`` with their own ports, so nothing else on the machine (another test
session's Ray, a ``ray start`` cluster of someone else) is touched: the head writes its address file into that
folder, not ``/tmp/ray``, and :meth:`TwoNodeCluster.stop` ends exactly the processes whose command line names
the folder (never ``ray stop``, which ends every Ray process of the machine).

The second node can be given node-local folders: it is started in its own mount namespace (``unshare -m``) with
a private folder bound over each path, the way a node-local disk at the same path looks on a real cluster (the
head and the driver see the real folder, the second node's processes see its private one).

The second node can be lost (:meth:`TwoNodeCluster.kill_second_node`: its processes SIGKILLed, as a machine that
dies) and another started in its place (:meth:`TwoNodeCluster.start_second_node`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from tests.integration.servers import free_port

# Token auth (Ray 2.60's default when a token exists in ~/.ray) is off for this private, loopback-only cluster.
ENV = {
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def _ports() -> list[str]:
    return [
        "--node-manager-port",
        str(free_port()),
        "--object-manager-port",
        str(free_port()),
        "--dashboard-agent-listen-port",
        str(free_port()),
        "--dashboard-agent-grpc-port",
        str(free_port()),
        "--runtime-env-agent-port",
        str(free_port()),
        "--metrics-export-port",
        str(free_port()),
    ]


def can_unshare_mounts() -> bool:
    """True where this process may start another in a private mount namespace with a bind mount (root, or
    unprivileged user namespaces)."""
    if shutil.which("unshare") is None:
        return False
    probe = tempfile.mkdtemp(prefix="hxd2-ns-")
    try:
        done = subprocess.run(
            ["unshare", "-m", "sh", "-c", f"mount --bind {probe} {probe}"], capture_output=True, timeout=30
        )
        return done.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        shutil.rmtree(probe, ignore_errors=True)


def _child_of(pid: int, parents: set[int]) -> bool:
    import psutil

    try:
        return any(parent.pid in parents for parent in psutil.Process(pid).parents())
    except psutil.NoSuchProcess:
        return True


@dataclass
class TwoNodeCluster:
    second_node_resources: dict[str, float]
    head_cpus: int = 1
    second_cpus: int = 2
    node_local: Sequence[Path] = ()  # paths the second node sees as its own private folders
    temp_dir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="hxd2rc-", dir="/tmp"))
    address: str = ""
    private: dict[str, str] = field(default_factory=dict)  # path -> the second node's private folder behind it
    second_node: list[int] = field(default_factory=list)  # the pids `ray start` left for the second node

    def _ray(self) -> str:
        return str(Path(sys.executable).with_name("ray"))

    def env(self) -> dict[str, str]:
        return {**os.environ, **ENV}

    def _common(self) -> list[str]:
        return ["--temp-dir", self.temp_dir, "--disable-usage-stats", "--node-ip-address", "127.0.0.1"]

    def start(self, timeout: float = 300) -> "TwoNodeCluster":
        port = free_port()
        head = [
            self._ray(),
            "start",
            "--head",
            "--port",
            str(port),
            "--num-cpus",
            str(self.head_cpus),
            "--ray-client-server-port",
            str(free_port()),
            "--include-dashboard=false",
            *self._common(),
            *_ports(),
        ]
        self._run(head, timeout)
        self.address = f"127.0.0.1:{port}"
        self.start_second_node(timeout)
        return self

    def start_second_node(self, timeout: float = 300) -> None:
        """Join a second node (``second_node_resources``, ``node_local``) to the head; again after
        :meth:`kill_second_node`, a new node in the lost one's place."""
        second = [
            self._ray(),
            "start",
            "--address",
            self.address,
            "--num-cpus",
            str(self.second_cpus),
            "--resources",
            json.dumps(self.second_node_resources),
            *self._common(),
            *_ports(),
        ]
        if self.node_local:
            binds = []
            for path in self.node_local:
                path.mkdir(parents=True, exist_ok=True)
                self.private.setdefault(str(path), tempfile.mkdtemp(prefix="hxd2-node-local-", dir=self.temp_dir))
                binds.append(f"mount --bind {self.private[str(path)]} {path}")
            second = ["unshare", "-m", "sh", "-c", " && ".join(binds) + ' && exec "$@"', "sh", *second]
        before = set(self.processes())
        self._run(second, timeout)
        # What `ray start` left running for this node (its raylet, log monitor), not a head's worker starting
        # meanwhile; the node's agents and workers are the raylet's children.
        self.second_node = [pid for pid in sorted(set(self.processes()) - before) if not _child_of(pid, before)]

    def _run(self, cmd: list[str], timeout: float) -> None:
        done = subprocess.run(cmd, env=self.env(), capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            self.stop()
            raise RuntimeError(f"{' '.join(cmd[:4])} failed ({done.returncode}):\n{done.stderr[-3000:]}")

    def processes(self) -> list[int]:
        import psutil

        mine = []
        for proc in psutil.process_iter(["pid", "cmdline"]):
            if proc.info["pid"] == os.getpid():
                continue
            try:
                if any(self.temp_dir in arg for arg in proc.info["cmdline"] or ()):
                    mine.append(proc.info["pid"])
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return mine

    def kill_second_node(self, sig: signal.Signals = signal.SIGKILL) -> list[int]:
        """Send ``sig`` (SIGKILL: a machine lost; SIGSTOP: one frozen, which a later SIGKILL loses) to every
        process of the second node at once: its raylet, log monitor and agents, and every worker the raylet
        started (found as the raylet's descendants, before any is signalled). Returns the pids signalled."""
        import psutil

        procs = []
        for pid in self.second_node:
            try:
                root = psutil.Process(pid)
                procs += [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
        for proc in procs:
            try:
                proc.send_signal(sig)
            except psutil.NoSuchProcess:
                continue
        if sig == signal.SIGKILL:
            psutil.wait_procs(procs, timeout=15)
        return [proc.pid for proc in procs]

    def stop(self) -> None:
        """End every process of this cluster (and only those), then remove its folder."""
        import psutil

        procs = []
        for pid in self.processes():
            try:
                procs.append(psutil.Process(pid))
            except psutil.NoSuchProcess:
                continue
        for proc in procs:
            try:
                proc.terminate()
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(procs, timeout=15)
        for proc in alive:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=15)
        deadline = time.monotonic() + 15
        while self.processes() and time.monotonic() < deadline:
            time.sleep(0.5)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
