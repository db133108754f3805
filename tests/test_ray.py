"""Tuning on a Ray cluster (``--ray``, autotune.ray_runner): a local cluster on 127.0.0.1
(a head without CPUs and worker nodes with one CPU and a private object cache each, so
objects travel between nodes as between machines). ``pypto-tune network`` with a worker
node killed halfway and the driver killed and resumed; a node killed while it measures;
nodes of another target or compiler refused by name; a node joining late; no node of
the target; ``pypto-tune tune --ray``; unreachable addresses."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

import autotune as at
import pypto as pt

ray = pytest.importorskip(
    "ray", reason="ray is not installed (the distributed extra; .ci/optional-tools installs it)"
)
from ray._private import ray_constants  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from autotune.ray_runner import RayMeasurer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Ray replaces 127.0.0.1 by the machine's address unless told it is not forming a real
# cluster; with this every process of the test cluster stays on the loopback interface
LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
HOST = pt.Target("host").name
OTHER = "generic" if HOST != "generic" else "x86-avx2"
# runs long enough to kill a node during one; their timeout allows for a loaded machine
# (three nodes' runners share the cores with whatever else runs: under a parallel test
# run a 0.6 s measurement took over 10 s)
LONG_RUNS = at.MeasureOption(number=1, repeat=2, min_repeat_ms=300, timeout=120)


class LocalCluster:
    """A head (no CPUs: it neither builds nor measures) and worker nodes added on demand."""

    def __init__(self):
        self.saved = {k: os.environ.get(k) for k in LOOPBACK}
        os.environ.update(LOOPBACK)  # for the nodes and the drivers started from here
        self.saved_flag = ray_constants.ENABLE_RAY_CLUSTER
        ray_constants.ENABLE_RAY_CLUSTER = False  # this process read the variable already
        self.workers = []
        self.tmp = tempfile.mkdtemp(prefix="pypto-ray-test-")  # the nodes' object caches
        try:
            self.c = Cluster(
                initialize_head=True,
                head_node_args={
                    "num_cpus": 0,
                    "include_dashboard": False,
                    "node_ip_address": "127.0.0.1",
                    # a killed node is noticed within a couple of seconds
                    "_system_config": {"health_check_period_ms": 500},
                },
            )
        except BaseException:
            self._restore()
            raise

    @property
    def address(self) -> str:
        return self.c.address

    def add(self, **env):
        """A worker node with one CPU, its own object cache and ``env``."""
        cache = tempfile.mkdtemp(dir=self.tmp)
        node = self.c.add_node(
            num_cpus=1,
            node_ip_address="127.0.0.1",
            env_vars={"PYTHONPATH": ROOT, "PYPTO_CACHE_DIR": cache, **env},
        )
        node.env_vars_extra = env
        self.workers.append(node)
        return node

    def plain(self):
        """A live worker node of this host's target and compiler (added if there is none)."""
        live = [n for n in self.workers if n in self.c.worker_nodes and not n.env_vars_extra]
        return live[0] if live else self.add()

    def node_id(self, node) -> str:
        return node.node_id

    def kill(self, node):
        self.c.remove_node(node, allow_graceful=False)

    def shutdown(self):
        """Leave the cluster and end every process of it (``Cluster.shutdown`` kills each
        node's processes; no ``ray stop``, which would end other users' Ray too)."""
        try:
            if ray.is_initialized():
                ray.shutdown()
            self.c.shutdown()
        finally:
            self._restore()

    def _restore(self):
        shutil.rmtree(self.tmp, ignore_errors=True)
        ray_constants.ENABLE_RAY_CLUSTER = self.saved_flag
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def cluster():
    c = LocalCluster()
    try:
        yield c
    finally:
        c.shutdown()


def _driver(args, log, stderr=subprocess.PIPE):
    """``pypto-tune network ... --ray`` in its own process, as a user runs it."""
    env = dict(os.environ, PYTHONPATH=ROOT, **LOOPBACK)
    return subprocess.Popen(
        [sys.executable, "-m", "autotune", "network", *args, "--log", str(log)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )


def _wait_for_text(path, text, proc, timeout=120):
    deadline = time.monotonic() + timeout
    while text not in path.read_text():
        assert proc.poll() is None, path.read_text()[-3000:]
        assert time.monotonic() < deadline, f"no {text!r} after {timeout} s"
        time.sleep(0.2)


def _lines(path) -> int:
    try:
        with open(path) as f:
            return sum(1 for line in f if line.endswith("\n"))
    except FileNotFoundError:
        return 0


def _wait_for_lines(path, n, proc, timeout=120):
    deadline = time.monotonic() + timeout
    while _lines(path) < n:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{_lines(path)} lines after {timeout} s"
        time.sleep(0.2)


def test_network_on_two_nodes_survives_a_lost_node_and_a_killed_driver(cluster, tmp_path):
    cluster.add()
    doomed = cluster.add()
    net = tmp_path / "net.json"
    net.write_text(
        json.dumps(
            [
                {"template": "matmul", "args": [48, 48, 48], "weight": 2},
                {"template": "softmax", "args": [64, 128]},
            ]
        )
    )
    log = tmp_path / "log.jsonl"

    def args(trials):
        a = [str(net), "--trials", str(trials), "--tuner", "random", "--round", "4"]
        a += ["--confirm", "0", "--no-progress", "--number", "2", "--repeat", "2"]
        return a + ["--ray", cluster.address]

    err = tmp_path / "first.err"
    budget = 40  # more than the driver can measure before it notices the lost node
    with open(err, "w") as err_file:
        first = _driver(args(budget), log, stderr=err_file)
        _wait_for_lines(log, 4, first)
        cluster.kill(doomed)  # a worker node dies while candidates are built and measured
        _wait_for_text(err, "warning: lost node 127.0.0.1", first)  # noticed, and said
        _wait_for_lines(log, 10, first)
        first.send_signal(signal.SIGKILL)  # the driver dies too
        first.communicate(timeout=30)
    done = _lines(log)
    assert 10 <= done < budget

    trials = done + 4  # a resumed run counts the log's trials in its budget
    again = _driver(args(trials), log)  # resumes from the log (the default)
    out, err = again.communicate(timeout=180)
    assert again.returncode == 0, err
    assert "already in the logs" in out

    with open(log) as f:
        text = f.read()
    assert text.endswith("\n")
    lines = text.splitlines()
    recs = at.load_records(str(log))  # every line is a valid record
    assert len(recs) == len(lines) == trials
    assert all(r.ok for r in recs), [r.error_msg for r in recs if not r.ok]
    measured = [(r.workload, json.dumps(r.config, sort_keys=True)) for r in recs]
    assert len(set(measured)) == trials  # every candidate measured exactly once
    assert {r.target for r in recs} == {HOST}


def test_refused_node_late_node_and_a_node_killed_mid_measurement(cluster):
    """A node of another target is refused by name; a node joining late gets work; when
    it dies while measuring, its candidate is measured on another node, once."""
    cluster.plain()
    odd = cluster.add(PYPTO_TARGET=OTHER)
    task = at.Task("matmul", (32, 32, 32), target="host")
    said = []
    with RayMeasurer(cluster.address, say=said.append) as m:
        usable = m.usable_nodes(HOST)
        short = cluster.node_id(odd)[:8]
        refusal = f"refused node 127.0.0.1 ({short}): its target is {OTHER}, the task's {HOST}"
        assert refusal in m.refusals and f"warning: {refusal}" in said
        assert all(short not in name for name in usable)

        late = cluster.add()  # joins while the driver is connected
        was = cluster.node_id(late)[:8]
        deadline = time.monotonic() + 60
        while all(was not in n for n in m.usable_nodes(HOST)):
            assert time.monotonic() < deadline, "the late node never became usable"
            time.sleep(0.5)
        configs = [task.config_space.get(i) for i in range(8)]
        results = m.measure(task, configs)
        assert all(r.ok for r in results), [r.error_msg for r in results]
        assert sum(m.measured_on.values()) == len(configs)
        assert any(was in name for name in m.measured_on)
        assert all(short not in name for name in m.measured_on)

        m.option = LONG_RUNS
        m.measured_on.clear()
        configs = [task.config_space.get(i) for i in range(10, 16)]
        out = {}
        worker = threading.Thread(target=lambda: out.update(r=m.measure(task, configs)))
        worker.start()
        node = next(n for n in m.nodes.values() if n.id.startswith(was))
        while not node.busy:  # a candidate is being measured there
            assert worker.is_alive() and time.monotonic() < deadline + 60
            time.sleep(0.05)
        cluster.kill(late)
        worker.join(120)
        assert not worker.is_alive()
        assert any(f"warning: lost node 127.0.0.1 ({was})" in s for s in said)
        assert len(out["r"]) == len(configs)
        assert all(r.ok for r in out["r"]), [r.error_msg for r in out["r"]]
        assert sum(m.measured_on.values()) == len(configs)  # each once, none lost


def test_a_node_whose_actor_dies_gets_a_new_actor(cluster):
    """The node stays in the cluster: its candidate is measured again, and a new actor
    there measures on."""
    cluster.plain()
    task = at.Task("matmul", (32, 32, 32), target="host")
    said = []
    with RayMeasurer(cluster.address, say=said.append) as m:
        m.usable_nodes(HOST)
        m.option = LONG_RUNS
        configs = [task.config_space.get(i) for i in range(20, 26)]
        out = {}
        worker = threading.Thread(target=lambda: out.update(r=m.measure(task, configs)))
        worker.start()
        deadline = time.monotonic() + 120
        while not any(n.busy for n in m.nodes.values()):  # a candidate is being measured
            assert worker.is_alive() and time.monotonic() < deadline
            time.sleep(0.05)
        node = next(n for n in m.nodes.values() if n.busy)
        ray.kill(node.actor, no_restart=True)
        worker.join(180)
        assert not worker.is_alive()
        assert len(out["r"]) == len(configs)
        assert all(r.ok for r in out["r"]), [r.error_msg for r in out["r"]]
        assert sum(m.measured_on.values()) == len(configs)  # each once
        assert any(s.startswith(f"warning: lost node {node.name}") for s in said), said
        assert f"restarting the measuring actor of node {node.name} (1 of 2)" in said
        assert node.name in m.usable_nodes(HOST)  # the new actor measures there
        assert not m.nodes[node.id].lost and m.nodes[node.id] is not node


def test_no_node_of_the_task_target_is_an_environment_fault(cluster):
    task = at.Task("matmul", (16, 16, 16), target="aarch64-neon")  # no node runs it
    with RayMeasurer(cluster.address, say=lambda msg: None, node_wait=0.5) as m:
        with pytest.raises(
            at.EnvironmentFault,
            match="no node of the cluster can measure "
            "aarch64-neon .waited 0.5 s.: refused node 127.0.0.1",
        ):
            m.measure(task, [task.config_space.default_config()])


@pytest.mark.parametrize(
    "address, message",
    [("127.0.0.1:1", "--ray 127.0.0.1:1: cannot connect to the Ray cluster at 127.0.0.1:1: "
                     "Connection refused (is `ray start --head` running there?)"),
     ("nonsense", "--ray nonsense: 'nonsense' is not a Ray address: give host:port or 'auto'")],
)  # fmt: skip
def test_an_unreachable_cluster_is_refused(capsys, address, message, tmp_path):
    from autotune import cli

    assert cli.main(["network", "resnet18", "--trials", "1", "--ray", address]) == 2
    assert message in capsys.readouterr().err
    # the log made to check it could be written is not left behind, empty
    log = tmp_path / "logs" / "t.jsonl"
    assert cli.main(["matmul", "--args", "8,8,8", "--log", str(log), "--ray", address]) == 2
    assert message in capsys.readouterr().err and not log.exists()


def test_a_port_that_is_no_ray_head_is_refused_at_once(cluster):
    """Was: an HTTP server's port (say the dashboard's) passed the check and ray.init
    retried for 14 minutes. The head's GCS answers as a gRPC server; a silent listener
    and an HTTP server do not."""
    import http.server
    import socket

    from autotune.ray_runner import RayUnavailable, _check_reachable

    _check_reachable(cluster.address)  # the head's GCS
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    silent = socket.create_server(("127.0.0.1", 0))  # listens, never answers
    try:
        for port in (web.server_address[1], silent.getsockname()[1]):
            t = time.monotonic()
            with pytest.raises(RayUnavailable, match="answers, but not as a Ray cluster's head"):
                _check_reachable(f"127.0.0.1:{port}", timeout=2.0)
            assert time.monotonic() - t < 10
        with pytest.raises(RayUnavailable, match=r"cannot connect to the Ray cluster at \[::1\]:1"):
            _check_reachable("[::1]:1")  # IPv6 in brackets is parsed, not "not an address"
    finally:
        web.shutdown()
        silent.close()


def test_a_node_with_another_compiler_is_refused(cluster, tmp_path):
    fake = tmp_path / "fakecc"
    fake.write_text(
        '#!/bin/sh\n[ "$1" = --version ] && { echo "fakecc 0.1"; exit 0; }\nexec cc "$@"\n'
    )
    fake.chmod(0o755)
    odd = cluster.add(CC=str(fake))
    with RayMeasurer(cluster.address, say=lambda msg: None) as m:
        m.usable_nodes(HOST)
        mine = m.facts["compiler"]
        short = cluster.node_id(odd)[:8]
        assert (
            f"refused node 127.0.0.1 ({short}): its C compiler is 'fakecc 0.1' on "
            f"{m.facts['host']}, the driver's {mine!r}"
        ) in m.refusals


def test_tune_command_runs_on_the_cluster(cluster, tmp_path, capsys, monkeypatch):
    from autotune import cli, confirm

    # the confirmation's busy-machine check off: beside a parallel test run the nodes'
    # re-measurements ran over 2x the search's, and confirm_best rightly kept none
    monkeypatch.setattr(confirm, "BUSY", float("inf"))
    cluster.plain()
    log = tmp_path / "mm.jsonl"
    argv = ["tune", "matmul", "--args", "24,24,24", "--trials", "5", "--tuner", "random"]
    argv += ["--confirm", "1", "--no-progress", "--log", str(log), "--ray", cluster.address]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert f"Ray node(s) of {HOST}: 127.0.0.1" in out and "best of 5 trial(s)" in out
    recs = at.load_records(str(log))
    assert all(r.ok for r in recs)
    # the threads a run without Ray gives (Ray's own OMP_NUM_THREADS=1 does not leak in)
    assert {r.threads for r in recs} == {pt.runtime.get_num_threads()}, {r.threads for r in recs}
    assert len({json.dumps(r.config, sort_keys=True) for r in recs[:5]}) == 5
    assert len(recs) >= 5 + 2  # the fastest measured twice more (and any that overtook it)
    assert not ray.is_initialized()  # the command left the cluster


def test_no_ray_instance_here_names_pypto_tunes_own_flag(monkeypatch):
    """Ray's refusal of ``auto`` said to set "the `--address` flag", which pypto-tune has
    not: it says --ray HOST:PORT."""
    from autotune.ray_runner import RayUnavailable

    def no_instance(**kw):
        raise ConnectionError(
            "Could not find any running Ray instance. Please specify the one to connect to "
            "by setting `--address` flag or `RAY_ADDRESS` environment variable."
        )

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", no_instance)
    with pytest.raises(RayUnavailable, match=r"at auto: no running Ray instance found here "
                                             r"\(.*\); give --ray HOST:PORT$"):  # fmt: skip
        RayMeasurer("auto")
