"""Trials per minute on a local Ray cluster: one worker node against two.

    python -m benchmarks.ray_throughput [--trials 32] [--template matmul --args 96,96,96]

A head without CPUs and worker nodes of one CPU each, on 127.0.0.1, every node
with its own fresh object cache (builds are real compiles, and objects travel
to the measuring node as between machines). The same random search goes on
through a ``RayMeasurer``: ``--trials`` candidates on one worker node, then as
many more (other configs) on two fresh nodes, each after a short warm-up. Builds dominate when a
candidate's build takes longer than its run (the table shows both, per
trial), so two nodes should measure close to twice the trials per minute of
one. On a machine with fewer free cores than worker nodes, they cannot.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import autotune as at  # noqa: E402
from autotune.ray_runner import HAVE_RAY, INSTALL_HINT, RayMeasurer  # noqa: E402
from benchmarks.common import table  # noqa: E402

if HAVE_RAY:
    from ray._private import ray_constants
    from ray.cluster_utils import Cluster

LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}  # keep Ray on 127.0.0.1


def _start_cluster():
    os.environ.update(LOOPBACK)
    ray_constants.ENABLE_RAY_CLUSTER = False  # read at import: this process's copy
    return Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "include_dashboard": False, "node_ip_address": "127.0.0.1"},
    )


def _add_node(cluster):
    cache = tempfile.mkdtemp(prefix="pypto-ray-bench-cache-")
    return cluster.add_node(
        num_cpus=1,
        node_ip_address="127.0.0.1",
        env_vars={"PYTHONPATH": ROOT, "PYPTO_CACHE_DIR": cache},
    )


def _spin(n: int) -> int:
    return sum(i * i for i in range(n))


def machine_speedup(jobs: int = 8, n: int = 2_000_000) -> float:
    """How much faster two processes do ``jobs`` CPU-bound jobs than one, now: the most
    two worker nodes on this machine can gain (other users' load lowers it)."""
    walls = []
    for procs in (1, 2):
        with concurrent.futures.ProcessPoolExecutor(procs) as pool:
            list(pool.map(_spin, [1000] * procs))  # started
            t0 = time.perf_counter()
            list(pool.map(_spin, [n] * jobs))
            walls.append(time.perf_counter() - t0)
    return walls[0] / walls[1]


def _phase(m, tuner, trials: int, nodes: int) -> dict:
    """``trials`` more trials of ``tuner`` through ``m``: trials per minute, seconds per
    trial of building and of running, and where they ran. First a warm-up of two trials
    per node, not counted: each node's build worker and runner child start and import
    pypto once, which is no trial's cost."""
    tuner.tune(2 * nodes, measurer=m)
    before = len(tuner.history)
    m.measured_on.clear()
    t0 = time.perf_counter()
    tuner.tune(trials, measurer=m)
    wall = time.perf_counter() - t0
    done = tuner.history[before:]
    ok = [r for _, r in done if r.ok]
    return {
        "trials": len(done),
        "per_min": 60.0 * len(done) / wall,
        "concurrency": sum(r.build_s for _, r in done) / wall,  # builds running at once
        "build_s": statistics.median(r.build_s for _, r in done) if done else 0.0,
        "run_s": statistics.median(r.run_s for r in ok) if ok else 0.0,
        "errors": len(done) - len(ok),
        "nodes": dict(m.measured_on),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--trials", type=int, default=32, help="trials per phase (default 32)")
    p.add_argument("--template", default="matmul", help="template to tune (default matmul)")
    p.add_argument("--args", default="96,96,96", help="its arguments (default 96,96,96)")
    p.add_argument("--batch", type=int, default=16, help="candidates per measure call")
    a = p.parse_args(argv)
    if a.trials < 1 or a.batch < 1:
        p.error(f"--trials and --batch must be positive, got {a.trials} and {a.batch}")
    if not HAVE_RAY:
        print(f"ray is not installed; {INSTALL_HINT}", file=sys.stderr)
        return 2
    try:
        task = at.Task(a.template, [int(x) for x in a.args.split(",")], target="host")
    except (ValueError, TypeError, KeyError) as e:
        p.error(f"--template {a.template} --args {a.args}: {e.args[0] if e.args else e}")
    tuner = at.RandomTuner(task, seed=0)
    tuner.batch_size = a.batch
    opt = at.MeasureOption(number=3, repeat=3)
    before = machine_speedup()
    cluster = _start_cluster()
    rows = []
    try:
        first = _add_node(cluster)
        with RayMeasurer(cluster.address, opt, say=lambda msg: print(msg, file=sys.stderr)) as m:
            m.usable_nodes(task.target.name)  # the node's actor started: not in the timing
            one = _phase(m, tuner, a.trials, 1)
            cluster.remove_node(first)
            _add_node(cluster), _add_node(cluster)  # fresh caches: builds are real again
            while len(m.usable_nodes(task.target.name)) < 2:
                time.sleep(0.5)
            two = _phase(m, tuner, a.trials, 2)
        for name, r in (("1 worker node", one), ("2 worker nodes", two)):
            rows.append(
                [name, r["trials"], f"{r['per_min']:.1f}", f"{r['build_s'] * 1e3:.0f}",
                 f"{r['run_s'] * 1e3:.0f}", f"{r['concurrency']:.2f}", r["errors"],
                 len(r["nodes"])]
            )  # fmt: skip
    finally:
        cluster.shutdown()
    print(f"{a.template} {a.args} on {task.target.name}, {os.cpu_count()} CPU(s) here")
    heads = ["cluster", "trials", "trials/min", "build ms", "run ms", "builds at once"]
    heads += ["errors", "nodes used"]
    print(table(heads, rows))
    after = machine_speedup()
    print(f"two nodes / one: {two['per_min'] / one['per_min']:.2f}x")
    print(
        f"this machine's own speedup of two CPU-bound processes over one: {before:.2f}x "
        f"before, {after:.2f}x after (the most two nodes can gain here; 2x when it is idle)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
