"""The index job's cost as the corpus grows: wall time and peak memory per stage of the real ``hxd2 index``.

    .venv/bin/python bench/index_cost_curve.py [--chunks 10000,100000] [--update-fraction 0.01]
                                               [--set SECTION.KEY=VALUE ...] [--json-out FILE] [--plot FILE]

Per size N (chunks), ``bench/index_throughput.py``'s deterministic synthetic corpus (one paragraph per chunk, ten
chunks per document, names drawn Zipf-like from a fixed vocabulary of about 3,000) is indexed by the command a user
runs, in a fresh process each time, Ray's start-up included:

    python -m jobs.cli index --input CORPUS --output INDEX --set llm.backend=scripted \\
        --set embedding.backend=hashing --set embedding.dim=64 --set ray.num_cpus=2 --json

Then, on that index, a change of ``--update-fraction`` of its documents (default 1%): new documents from the same
generator under another seed (other ids, the same vocabulary) are appended by the same command with
``--input NEW``; its wall time is divided by the full build's.

While each command runs, every 0.5 s the bench reads the memory of the command's process (the driver) and of all
its descendants (psutil): RSS, and PSS where the kernel gives it (``memory_full_info``; shared pages such as Ray's
object store counted once across processes). Descendants are grouped as Ray workers (process title ``ray::…``:
the stages' actors and tasks), the child the write stage loads the Kùzu graph in (a ``multiprocessing`` spawn),
and Ray's own daemons (GCS, raylet, dashboard, …). Each sample is put in the stage the command's progress lines on
stderr (``[hxd2] <stage> …`` / ``<stage> done``) say is running; a stage's seconds are the job summary's
``seconds_per_stage`` (which also splits the write stage: vectors, synonyms, title mentions, graph load, read
structures, lexical index, refusal calibration).

Printed: per size and stage the seconds, ms per chunk, and that cost per chunk divided by the smallest size's
(the headline: 1.0 is linear growth, above it the stage grows faster than the corpus), and the peaks per stage
(driver PSS, all workers' PSS summed, the largest worker's RSS, the graph-load child's RSS, the whole job's PSS).
Written: the JSON (``--json-out``) and a plot (``--plot``; x: chunks, log).

The ``__main__`` guard keeps the bench importable (a smoke test, or a plot redrawn from a JSON with ``--replot``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.index_throughput import write_corpus  # noqa: E402

CHUNK_SIZE = 768  # chunking.chunk_size_chars of the shipped config: one generated paragraph is one chunk
CHUNKS_PER_DOC = 10
STAGES = ("ingest", "extract", "merge", "embed", "write")
# The parts of the write stage its summary times (hxd2_ray.indexer.publish), in the order they run.
WRITE_PARTS = (
    "vectors",
    "synonyms",
    "title_mentions",
    "graph_load",
    "graph_reads",
    "lexical",
    "refusal_calibration",
)
STAND_INS = ("llm.backend=scripted", "embedding.backend=hashing", "embedding.dim=64", "ray.num_cpus=2")
GROUPS = ("driver", "workers", "graph_load", "ray_daemons")
_STAGE_LINE = re.compile(r"^\[hxd2\] (\w+) (?:…|\.\.\.)\s*$")
_STAGE_DONE = re.compile(r"^\[hxd2\] (\w+) done\b")
MB = 1 << 20


# ----------------------------------------------------------------------------------------- memory sampling


def _group(proc: Any) -> str:
    """Which part of the job a descendant of the driver is."""
    try:
        cmdline = proc.cmdline()
    except Exception:  # noqa: BLE001 - gone, or not readable
        return "ray_daemons"
    first = cmdline[0] if cmdline else ""
    if first.startswith("ray::"):
        return "workers"
    if any("spawn_main" in part for part in cmdline):
        return "graph_load"  # the write stage's isolated_write child (the only spawn of the job)
    return "ray_daemons"


def _memory(proc: Any) -> tuple[int, int] | None:
    """(RSS, PSS) of ``proc`` in bytes; PSS is RSS where the kernel does not give it. None: gone."""
    try:
        full = proc.memory_full_info()
        return int(full.rss), int(getattr(full, "pss", full.rss))
    except Exception:  # noqa: BLE001 - ended between the listing and the read, or no permission
        try:
            rss = int(proc.memory_info().rss)
            return rss, rss
        except Exception:  # noqa: BLE001
            return None


def sample(driver: Any) -> dict[str, int]:
    """One sample of the driver and its descendants: per group the PSS sum (``<group>_pss``) and the largest RSS
    (``<group>_rss_max``), the workers' RSS sum and count, and the whole job's PSS."""
    out = {f"{g}_{k}": 0 for g in GROUPS for k in ("pss", "rss_max", "rss", "n")}
    try:
        procs = [(driver, "driver")] + [(p, _group(p)) for p in driver.children(recursive=True)]
    except Exception:  # noqa: BLE001 - the driver ended
        return {}
    for proc, group in procs:
        mem = _memory(proc)
        if mem is None:
            continue
        rss, pss = mem
        out[f"{group}_pss"] += pss
        out[f"{group}_rss"] += rss
        out[f"{group}_n"] += 1
        out[f"{group}_rss_max"] = max(out[f"{group}_rss_max"], rss)
    out["total_pss"] = sum(out[f"{g}_pss"] for g in GROUPS)
    return out


class Watch:
    """Runs one ``hxd2 index`` command: its stage lines read live from stderr, its memory sampled every
    ``interval`` seconds, each sample put in the stage running then."""

    def __init__(self, cmd: list[str], log: Path, interval: float = 0.5) -> None:
        self.cmd, self.log, self.interval = cmd, log, interval
        self.stage = "start"  # before the first stage line: Python and Ray starting, the input listed
        self.events: list[tuple[float, str, str]] = []
        self.samples: list[tuple[float, str, dict[str, int]]] = []
        self._done = threading.Event()

    def run(self) -> tuple[dict[str, Any], float]:
        import psutil

        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        started = time.perf_counter()
        with open(self.log, "w", encoding="utf-8") as err_log:
            proc = subprocess.Popen(
                self.cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            driver = psutil.Process(proc.pid)
            sampler = threading.Thread(target=self._sample, args=(driver, started), daemon=True)
            sampler.start()
            stdout: list[str] = []
            reader = threading.Thread(target=lambda: stdout.append(proc.stdout.read()), daemon=True)  # type: ignore[union-attr]
            reader.start()
            for line in proc.stderr:  # type: ignore[union-attr]
                err_log.write(line)
                self._line(line.rstrip("\n"), time.perf_counter() - started)
            proc.wait()
            wall = time.perf_counter() - started
            self._done.set()
            sampler.join()
            reader.join()
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(self.cmd)} exited {proc.returncode}; its stderr is in {self.log}")
        return json.loads("".join(stdout)), wall

    def _line(self, line: str, t: float) -> None:
        begun, done = _STAGE_LINE.match(line), _STAGE_DONE.match(line)
        if begun and begun.group(1) in STAGES:
            self.stage = begun.group(1)
            self.events.append((t, self.stage, "start"))
        elif done and done.group(1) in STAGES:
            self.events.append((t, done.group(1), "done"))
            self.stage = "between" if done.group(1) != STAGES[-1] else "finish"

    def _sample(self, driver: Any, started: float) -> None:
        while not self._done.is_set():
            t0 = time.perf_counter()
            stage = self.stage
            s = sample(driver)
            if s:
                self.samples.append((t0 - started, stage, s))
            self._done.wait(max(0.0, self.interval - (time.perf_counter() - t0)))

    def peaks(self) -> dict[str, dict[str, int]]:
        """Per stage (and ``all``), the largest value of each sampled figure."""
        out: dict[str, dict[str, int]] = {}
        for _, stage, s in self.samples:
            for key in (stage, "all"):
                peak = out.setdefault(key, {})
                for k, v in s.items():
                    if v > peak.get(k, 0):
                        peak[k] = v
        return out


# ----------------------------------------------------------------------------------------- one size


def index_command(corpus: Path, output: Path, settings: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", "jobs.cli", "index", "--input", str(corpus), "--output", str(output), "--json"]
    for item in (*STAND_INS, *settings):
        cmd += ["--set", item]
    return cmd


def _run(cmd: list[str], log: Path, interval: float) -> dict[str, Any]:
    load = os.getloadavg()[0]
    watch = Watch(cmd, log, interval)
    summary, wall = watch.run()
    peaks = watch.peaks()
    return {
        "wall_s": round(wall, 3),
        "seconds_total": summary.get("seconds_total"),
        "seconds_per_stage": summary.get("seconds_per_stage", {}),
        "kind": summary.get("kind"),
        "status": summary.get("status"),
        "documents": summary.get("documents"),
        "chunks": summary.get("chunks"),
        "entities": summary.get("entities"),
        "relations": summary.get("relations"),
        "synonym_edges": summary.get("synonym_edges"),
        "title_mentions": summary.get("title_mentions"),
        "embedded_texts": summary.get("embedded_texts"),
        "llm_calls": (summary.get("run") or {}).get("llm_calls"),
        "peaks": {
            k: {m: round(v / MB, 1) if not m.endswith("_n") else v for m, v in p.items()} for k, p in peaks.items()
        },
        "stage_events": [[round(t, 2), s, e] for t, s, e in watch.events],
        "samples": len(watch.samples),
        "load_before": round(load, 2),
        "load_after": round(os.getloadavg()[0], 2),
    }


def _buffer_pools_mb(index: Path) -> list[int]:
    """The Kùzu buffer pool of every graph load the index's job logs record, in order (``graph loaded in … (buffer
    pool N MB, …)``: hxd2_ray.indexer.publish)."""
    found: list[int] = []
    for log in sorted((index / "_logs").glob("index-*.log")):
        found += [int(m.replace(",", "")) for m in re.findall(r"buffer pool ([\d,]+) MB", log.read_text("utf-8"))]
    return found


def _tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def measure(n: int, work: Path, seed: int, fraction: float, settings: list[str], interval: float) -> dict[str, Any]:
    corpus, index = work / f"corpus-{n}", work / f"index-{n}"
    shutil.rmtree(index, ignore_errors=True)
    t0 = time.perf_counter()
    info = write_corpus(corpus, n, seed=seed, chunk_size=CHUNK_SIZE, chunks_per_doc=CHUNKS_PER_DOC)
    print(
        f"\n=== {n:,} chunks: {info['documents']:,} documents, {info['bytes'] / 1e6:.1f} MB "
        f"(generated in {time.perf_counter() - t0:.1f} s, not timed)",
        flush=True,
    )
    build = _run(index_command(corpus, index, settings), work / f"build-{n}.stderr", interval)
    build["output_bytes"] = _tree_bytes(index)  # the index, its staged work and its LLM cache
    print(_one_line("build", build), flush=True)
    new_docs = max(1, round(fraction * info["documents"]))
    new = work / f"new-{n}"
    shutil.rmtree(new, ignore_errors=True)
    write_corpus(new, new_docs * CHUNKS_PER_DOC, seed=seed + 1000, chunk_size=CHUNK_SIZE, chunks_per_doc=CHUNKS_PER_DOC)
    update = _run(index_command(new, index, settings), work / f"update-{n}.stderr", interval)
    update["added_documents"] = new_docs
    pools = _buffer_pools_mb(index)
    build["buffer_pool_mb"], update["buffer_pool_mb"] = (pools + [None, None])[:2]
    update["wall_share_of_build"] = round(update["wall_s"] / build["wall_s"], 4)
    update["job_share_of_build"] = round(float(update["seconds_total"]) / float(build["seconds_total"]), 4)
    print(_one_line("update", update), flush=True)
    print(
        f"Kùzu buffer pool of the graph loads (MB): build {build['buffer_pool_mb']}, update {update['buffer_pool_mb']}"
    )
    return {
        "chunks": n,
        "documents": info["documents"],
        "corpus_bytes": info["bytes"],
        "build": build,
        "update": update,
    }


def _one_line(what: str, run: dict[str, Any]) -> str:
    secs = ", ".join(f"{k} {v:.1f}" for k, v in run["seconds_per_stage"].items())
    peak = run["peaks"].get("all", {})
    return (
        f"{what} ({run['kind']}): {run['wall_s']:.1f} s wall, job {run['seconds_total']:.1f} s [{secs}]; "
        f"peak PSS {peak.get('total_pss', 0):,.0f} MB (driver {peak.get('driver_pss', 0):,.0f}, workers "
        f"{peak.get('workers_pss', 0):,.0f}, graph-load child RSS {peak.get('graph_load_rss_max', 0):,.0f}); "
        f"load {run['load_before']}-{run['load_after']}"
    )


# ----------------------------------------------------------------------------------------- report


def stage_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Per size and stage (the five stages, the write stage's parts, the whole job): seconds, ms per chunk and that
    cost per chunk divided by the smallest size's."""
    sizes = report["sizes"]
    base = sizes[0]
    rows = []
    for size in sizes:
        n, b = size["chunks"], size["build"]
        secs = dict(b["seconds_per_stage"])
        secs["job"] = b["seconds_total"]
        secs["command"] = b["wall_s"]
        base_secs = dict(base["build"]["seconds_per_stage"])
        base_secs["job"], base_secs["command"] = base["build"]["seconds_total"], base["build"]["wall_s"]
        for name in (*STAGES, *WRITE_PARTS, "job", "command"):
            s = float(secs.get(name, 0.0))
            s0 = float(base_secs.get(name, 0.0))
            per0 = s0 / base["chunks"]
            rows.append(
                {
                    "chunks": n,
                    "stage": name,
                    "seconds": s,
                    "ms_per_chunk": 1000 * s / n,
                    "per_chunk_ratio": (s / n) / per0 if per0 > 0 else None,
                }
            )
    return rows


def print_report(report: dict[str, Any]) -> None:
    sizes = report["sizes"]
    rows = stage_rows(report)
    ns = [s["chunks"] for s in sizes]
    print("\nSeconds per stage (ratio: cost per chunk ÷ at the smallest size; 1.0 = linear)")
    print(f"{'stage':<20}" + "".join(f"{f'{n:,} s':>12}{'ratio':>7}" for n in ns))
    for name in (*STAGES, *WRITE_PARTS, "job", "command"):
        line = f"{('  ' if name in WRITE_PARTS else '') + name:<20}"
        for n in ns:
            r = next(r for r in rows if r["chunks"] == n and r["stage"] == name)
            ratio = f"{r['per_chunk_ratio']:.2f}" if r["per_chunk_ratio"] is not None else "-"
            line += f"{r['seconds']:>12.1f}{ratio:>7}"
        print(line)
    print("\nPeak memory per stage, MB (PSS; largest worker and graph-load child: RSS)")
    cols = ("driver_pss", "workers_pss", "workers_rss_max", "graph_load_rss_max", "ray_daemons_pss", "total_pss")
    print(f"{'chunks':>9} {'stage':<8}" + "".join(f"{c:>19}" for c in cols))
    for size in sizes:
        for stage in (*STAGES, "all"):
            peak = size["build"]["peaks"].get(stage, {})
            print(f"{size['chunks']:>9,} {stage:<8}" + "".join(f"{peak.get(c, 0):>19,.0f}" for c in cols))
    print("\n1% update (append)")
    for size in sizes:
        u = size["update"]
        print(
            f"{size['chunks']:>9,} chunks: +{u['added_documents']:,} documents, {u['wall_s']:.1f} s wall "
            f"({u['wall_share_of_build']:.1%} of the build's), job {u['seconds_total']:.1f} s "
            f"({u['job_share_of_build']:.1%}); peak PSS {u['peaks'].get('all', {}).get('total_pss', 0):,.0f} MB"
        )


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = report["sizes"]
    ns = [s["chunks"] for s in sizes]
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4.4))
    names = (*STAGES, "graph_load", "job")
    for name in names:
        ys = [
            float(s["build"]["seconds_per_stage"].get(name, 0.0)) if name != "job" else s["build"]["seconds_total"]
            for s in sizes
        ]
        style = {"linewidth": 2.5, "color": "black"} if name == "job" else {}
        ax1.plot(ns, ys, marker="o", label=name, **style)
    ups = [s["update"]["seconds_total"] for s in sizes]
    ax1.plot(ns, ups, marker="s", linestyle="--", color="grey", label="1% update (job)")
    job0 = sizes[0]["build"]["seconds_total"]
    ax1.plot(ns, [job0 * n / ns[0] for n in ns], linestyle=":", color="black", label="∝ chunks (from the job)")
    ax1.set_xscale("log")
    ax1.set_yscale("log")
    ax1.set_xlabel("chunks")
    ax1.set_ylabel("seconds")
    ax1.set_title("seconds per stage (build)")
    ax1.legend(fontsize=7)

    rows = stage_rows(report)
    for name in (*STAGES, "graph_load", "job"):
        pts = [(r["chunks"], r["per_chunk_ratio"]) for r in rows if r["stage"] == name and r["per_chunk_ratio"]]
        style = {"linewidth": 2.5, "color": "black"} if name == "job" else {}
        ax2.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name, **style)
    up0 = sizes[0]["update"]["seconds_total"]
    ax2.plot(
        ns,
        [(s["update"]["seconds_total"] / up0) / (n / ns[0]) for s, n in zip(sizes, ns)],
        marker="s",
        linestyle="--",
        color="grey",
        label="1% update (job)",
    )
    ax2.axhline(1.0, linestyle=":", color="black")
    ax2.set_xscale("log")
    ax2.set_xlabel("chunks")
    ax2.set_ylabel(f"cost per chunk ÷ at {ns[0]:,}")
    ax2.set_title("growth against the corpus (1.0 = linear)")
    ax2.legend(fontsize=7)

    for key, label in (
        ("total_pss", "whole job (PSS)"),
        ("driver_pss", "driver (PSS)"),
        ("workers_pss", "Ray workers, summed (PSS)"),
        ("workers_rss_max", "largest worker (RSS)"),
        ("graph_load_rss_max", "graph-load child (RSS)"),
    ):
        ax3.plot(ns, [s["build"]["peaks"].get("all", {}).get(key, 0) for s in sizes], marker="o", label=label)
    ax3.set_xscale("log")
    ax3.set_xlabel("chunks")
    ax3.set_ylabel("peak MB")
    ax3.set_title("peak memory (build)")
    ax3.legend(fontsize=7)
    fig.suptitle(f"hxd2 index, scripted LLM + hashing embedder, 2 CPUs ({report['measured']})", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", default="10000,100000", help="sizes, comma-separated (e.g. 10000,100000,500000)")
    parser.add_argument("--update-fraction", type=float, default=0.01, help="documents appended, as a share")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between memory samples")
    parser.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="another config override for every command (e.g. graph.build_buffer_pool_mb=2048)",
    )
    parser.add_argument("--workdir", default=None, help="corpora, indexes and stderr logs (default: a temp folder)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--json-out", default=str(REPO / "bench" / "figures" / "index_cost_curve.json"))
    parser.add_argument("--plot", default=str(REPO / "bench" / "figures" / "index_cost_curve.png"))
    parser.add_argument("--replot", action="store_true", help="redraw the table and plot from --json-out; run nothing")
    args = parser.parse_args(argv)

    if args.replot:
        recorded = json.loads(Path(args.json_out).read_text(encoding="utf-8"))
        print_report(recorded)
        plot(recorded, Path(args.plot))
        return 0
    sizes = sorted(int(s) for s in args.chunks.split(","))
    work = Path(args.workdir or tempfile.mkdtemp(prefix="hxd2-cost-curve-"))
    work.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "measured": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "commit": _commit(),
        "command": " ".join(["bench/index_cost_curve.py", *(argv if argv is not None else sys.argv[1:])]),
        "index_command": " ".join(index_command(Path("CORPUS"), Path("INDEX"), args.settings)[1:]),
        "machine": {
            "cpus": os.cpu_count(),
            "memory_gb": round(_machine_bytes() / (1 << 30), 1),
            "python": platform.python_version(),
        },
        "update_fraction": args.update_fraction,
        "sizes": [],
    }
    try:
        for n in sizes:
            report["sizes"].append(measure(n, work, args.seed, args.update_fraction, args.settings, args.interval))
            # written after every size: a long run that is stopped keeps what it measured
            Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json_out).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
            if not args.keep:  # an index of 100k chunks takes a few GB
                shutil.rmtree(work / f"index-{n}", ignore_errors=True)
                shutil.rmtree(work / f"corpus-{n}", ignore_errors=True)
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    print_report(report)
    plot(report, Path(args.plot))
    print(f"\nwrote {args.json_out} and {args.plot}")
    return 0


def _machine_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return 0


if __name__ == "__main__":
    sys.exit(main())
