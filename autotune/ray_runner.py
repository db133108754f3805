"""Measurement on a Ray cluster: builds on any node, runs on the nodes of the task's target.

    driver (pypto-tune ... --ray ADDRESS)     tuners, task scheduler, records (the only writer)
      | build tasks (1 CPU each, any node)    template(cfg) -> lower -> C -> cc -> object bytes
      | a NodeRunner actor on every node      installs the object in its node's cache, then
      v   (one call at a time)                runs it in its own runner child (a local
                                              Measurer): check against the reference, time

``RayMeasurer.measure(task, configs)`` is the local ``Measurer``'s interface, so
the tuners and the task scheduler do not know where candidates run. A node
measures when it offers CPUs or the custom resource ``pypto_measure`` (a head
started with ``--num-cpus 0`` neither builds nor measures). Each node reports
its host target, its C compiler's version line and pypto's version; a node
whose target is not the task's, or whose compiler or pypto differs from the
driver's, is refused (a one-line message naming the node) and gets no
measurements; the others go on. Each node's actor takes one call at a time,
so measurements never overlap on a node.

Faults: a node that dies (or whose actor dies) while measuring loses only its
in-flight candidate, which goes back to the queue and is measured on another
node; a node still in the cluster after its actor died gets a new actor (at most
``ACTOR_RESTARTS`` times); a build whose node dies is retried by Ray on another.
Every config of a batch gets exactly one result, and only the driver turns
results into records, so a log holds each measured candidate once. The cluster's nodes are read
again every few seconds while a batch runs: a node that joins late gets work.

``ray`` is imported here only, and only if installed (``HAVE_RAY``); without it
``RayMeasurer`` raises ``RayUnavailable`` naming the extra to install.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import socket
import subprocess
import sys
import time

from pypto import __version__ as PYPTO_VERSION
from pypto.cache import Entry
from pypto.errors import BuildEnvironmentError
from pypto.runtime import compiler
from pypto.target import Target

from .measure import (
    EnvironmentFault,
    MeasureOption,
    Measurer,
    MeasureResult,
    candidate_specs,
    result_of,
)
from .records import ErrorKind
from .workers import build_worker, loadable, short_error

try:  # the optional `distributed` extra
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    HAVE_RAY = True
except ImportError:  # pragma: no cover - depends on the installation
    ray = NodeAffinitySchedulingStrategy = None
    HAVE_RAY = False

__all__ = ["HAVE_RAY", "INSTALL_HINT", "RayMeasurer", "RayUnavailable", "node_facts"]

INSTALL_HINT = "install the distributed extra (pip install 'pypto[distributed]')"
MEASURE_RESOURCE = "pypto_measure"  # a node offering it measures even without CPUs
REFRESH_S = 2.0  # how often the cluster's nodes are read while a batch runs
BUILD_RETRIES = 3  # Ray re-runs a build whose worker or node died
ACTOR_RESTARTS = 2  # new actors for a node that stays in the cluster when its actor dies


class RayUnavailable(RuntimeError):
    """Ray is not installed, or the cluster cannot be reached."""


# ---------------------------------------------------------------- the node side


def node_facts() -> dict:
    """What decides whether a node may measure a task: its host target (``$PYPTO_TARGET``
    overrides detection, as everywhere), its C compiler's version line (None: no working
    ``$CC``), pypto's version."""
    try:
        r = subprocess.run([*compiler(), "--version"], capture_output=True, text=True, timeout=30)
        cc = r.stdout.splitlines()[0] if r.returncode == 0 and r.stdout else None
    except (OSError, subprocess.TimeoutExpired):
        cc = None  # no working compiler
    return {
        "target": Target("host").name,
        "compiler": cc,
        "pypto": PYPTO_VERSION,
        "host": socket.gethostname(),
    }


def build_candidate(spec: dict) -> dict:
    """A build task: ``build_worker``'s reply, with the object's cache key and bytes (the
    measuring node may not share this node's cache)."""
    r = build_worker(spec)
    path = r.pop("so", None)
    if path is not None:
        with open(path, "rb") as f:
            r["object"] = (os.path.basename(path)[: -len(".so")], f.read())
    return r


def install_object(obj) -> None:
    """Put a shipped object into this node's cache, where the runner's build finds it."""
    if obj is None:
        return
    key, data = obj
    entry = Entry(key)
    if entry.lookup() is None:
        tmp = entry.temp_object()
        with open(tmp, "wb") as f:
            f.write(data)
        entry.store(tmp)


class NodeRunner:
    """The actor on one node: runs candidates one at a time in a local ``Measurer``'s
    runner child (crash and timeout isolation as on one machine)."""

    def __init__(self, omp_threads: str | None = None):
        # Ray sets its workers' OMP_NUM_THREADS (to 1 for this CPU-less actor); candidates
        # run with the driver's, else the node's cores, as they do without Ray
        if omp_threads is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = omp_threads
        self.m = None

    def facts(self) -> dict:
        return node_facts()

    def run(self, spec: dict, option: MeasureOption, obj) -> dict:
        try:
            install_object(obj)
            if self.m is None:
                self.m = Measurer(option)
            self.m.option = option
            return self.m.run(spec)
        except (EnvironmentFault, BuildEnvironmentError, OSError) as e:
            return {"fault": short_error(e)}

    def close(self):
        if self.m is not None:
            self.m.close()


# ---------------------------------------------------------------- the driver side


# an HTTP/2 client's first bytes: the connection preface and an empty SETTINGS frame
_H2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_SETTINGS = 4  # an HTTP/2 frame's type, its header's fourth byte


def _check_reachable(address: str | None, timeout: float = 10.0) -> None:
    """``RayUnavailable`` when nothing listens at ``host:port``, or what listens is no
    gRPC server, as a Ray head's GCS is (say the dashboard's port): Ray itself would
    retry for minutes. ``auto`` and None are Ray's to resolve; ``[::1]:6379`` is IPv6."""
    if not address or address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or not port.isdigit():
        raise RayUnavailable(f"{address!r} is not a Ray address: give host:port or 'auto'")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as conn:
            if os.environ.get("RAY_USE_TLS", "0").lower() in ("0", "false", ""):
                conn.sendall(_H2_HELLO)
                head = b""
                try:
                    while len(head) < 9 and (chunk := conn.recv(9 - len(head))):
                        head += chunk
                except TimeoutError:
                    pass  # silent: no gRPC server either
                if len(head) < 9 or head[3] != _SETTINGS:
                    raise RayUnavailable(
                        f"{address} answers, but not as a Ray cluster's head (its GCS, a gRPC "
                        "server): give the head's address as `ray start --head` printed it "
                        "(port 6379 unless --port chose another)"
                    )
    except OSError as e:
        raise RayUnavailable(
            f"cannot connect to the Ray cluster at {address}: {e.strerror or e} "
            "(is `ray start --head` running there?)"
        ) from None


class _Node:
    """The driver's view of one node."""

    def __init__(self, node_id: str, address: str, actor, facts_ref):
        self.id, self.address, self.actor, self.facts_ref = node_id, address, actor, facts_ref
        self.facts: dict | None = None
        self.refused = ""  # why it gets no measurements
        self.lost = False
        self.busy = False
        self.restarts = 0  # actors started on it after its first died

    @property
    def name(self) -> str:
        return f"{self.address} ({self.id[:8]})"


class RayMeasurer:
    """``measure(task, configs)`` on a Ray cluster (see the module docstring).

    ``address``: the cluster (``host:port`` or ``auto``), or None when ``ray.init``
    was called already; ``option_for(task)``: a task's own ``MeasureOption`` (default:
    ``option`` for all); ``node_wait``: seconds to wait for a node of the task's
    target before giving up (``EnvironmentFault``); ``say``: where refusals and lost
    nodes are reported (default: a line on stderr)."""

    def __init__(
        self,
        address: str | None = "auto",
        option: MeasureOption | None = None,
        option_for=None,
        node_wait: float = 60.0,
        say=None,
    ):
        if not HAVE_RAY:
            raise RayUnavailable(f"ray is not installed; {INSTALL_HINT}")
        self.option = option or MeasureOption()
        self.option_for = option_for or (lambda task: self.option)
        self.node_wait = node_wait
        self.say = say or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.own_session = not ray.is_initialized()
        if self.own_session:
            _check_reachable(address)
            try:
                ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as e:
                said = str(e)
                if "--address" in said:  # ray's advice names its own CLI's flag
                    said = (
                        "no running Ray instance found here (from RAY_ADDRESS or "
                        "`ray start` on this machine); give --ray HOST:PORT"
                    )
                msg = f"cannot connect to the Ray cluster at {address}: {said}"
                raise RayUnavailable(msg) from None
        # the driver's: a node's compiler and pypto must match them (with no compiler here,
        # the first node's compiler is the one)
        self.facts = node_facts()
        self.nodes: dict[str, _Node] = {}
        self.refusals: list[str] = []  # every refusal message, in order
        self.lost: list[str] = []  # nodes lost while measuring
        self.measured_on: collections.Counter = collections.Counter()  # node name -> results
        self._build = ray.remote(build_candidate).options(num_cpus=1, max_retries=BUILD_RETRIES)
        self._actor = ray.remote(NodeRunner)
        self._last_refresh = -1e9

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def n_parallel(self) -> int:
        """CPUs of the cluster's live nodes (how many builds can run at once)."""
        return max(1, int(ray.cluster_resources().get("CPU", 1)))

    def close(self):
        """End the node actors (each ends its runner child); leave the cluster."""
        for node in self.nodes.values():
            if not node.lost:
                try:
                    ray.kill(node.actor, no_restart=True)
                except (ray.exceptions.RayError, ValueError):
                    pass  # gone already
        self.nodes.clear()
        if self.own_session and ray.is_initialized():
            ray.shutdown()

    # ---- nodes

    def refresh(self) -> None:
        """Start an actor on every live node that may measure and has none yet, or whose
        actor died (``ACTOR_RESTARTS`` times at most); mark nodes that left the cluster
        as lost."""
        self._last_refresh = time.monotonic()
        alive = {}
        for n in ray.nodes():
            res = n.get("Resources", {})
            if n.get("Alive") and (res.get("CPU", 0) > 0 or res.get(MEASURE_RESOURCE, 0) > 0):
                alive[n["NodeID"]] = n.get("NodeManagerAddress", "?")
        for nid, node in self.nodes.items():
            if nid not in alive and not node.lost:
                self._lose(node, "it left the cluster")
        for nid, address in alive.items():
            old = self.nodes.get(nid)
            if old is not None and not (old.lost and old.restarts < ACTOR_RESTARTS):
                continue
            strategy = NodeAffinitySchedulingStrategy(node_id=nid, soft=False)
            actor = self._actor.options(
                num_cpus=0, max_restarts=0, scheduling_strategy=strategy
            ).remote(os.environ.get("OMP_NUM_THREADS"))
            node = self.nodes[nid] = _Node(nid, address, actor, actor.facts.remote())
            if old is not None:  # its actor died, the node did not
                with contextlib.suppress(ray.exceptions.RayError, ValueError):
                    ray.kill(old.actor, no_restart=True)  # should it linger, hung
                node.restarts = old.restarts + 1
                n = f"{node.restarts} of {ACTOR_RESTARTS}"
                self.say(f"restarting the measuring actor of node {node.name} ({n})")

    def _lose(self, node: _Node, why: str) -> None:
        node.lost, node.busy = True, False
        msg = f"lost node {node.name}: {why}"
        self.lost.append(msg)
        self.say(f"warning: {msg}; its candidates are measured elsewhere")

    def _refuse(self, node: _Node, why: str) -> None:
        node.refused = why
        msg = f"refused node {node.name}: {why}"
        self.refusals.append(msg)
        self.say(f"warning: {msg}")

    def _take_facts(self, node: _Node) -> None:
        ref, node.facts_ref = node.facts_ref, None
        try:
            node.facts = ray.get(ref)
        except ray.exceptions.RayError as e:
            self._lose(node, f"its actor did not start ({short_error(e)[:200]})")
            return
        f, mine = node.facts, self.facts
        if f["compiler"] is None:
            self._refuse(node, f"it has no working C compiler ({' '.join(compiler())})")
            return
        if mine["compiler"] is None:  # the driver compiles nothing: the first node decides
            mine["compiler"] = f["compiler"]
        if f["compiler"] != mine["compiler"]:
            self._refuse(node, f"its C compiler is {f['compiler']!r} on {f['host']}, the "
                         f"driver's {mine['compiler']!r}")  # fmt: skip
        elif f["pypto"] != mine["pypto"]:
            self._refuse(node, f"it runs pypto {f['pypto']}, the driver {mine['pypto']}")

    def _usable(self, target: str) -> list[_Node]:
        """Nodes that may measure ``target`` now; each node of another target is refused
        once, by name."""
        out = []
        for node in self.nodes.values():
            if node.lost or node.facts is None or node.refused:
                continue
            if node.facts["target"] != target:
                self._refuse(node, f"its target is {node.facts['target']}, the task's {target}")
                continue
            out.append(node)
        return out

    def usable_nodes(self, target) -> list[str]:
        """Names of the nodes that measure ``target`` (after reading the cluster)."""
        self.refresh()
        pending = {n.facts_ref: n for n in self.nodes.values() if n.facts_ref is not None}
        if pending:  # a node's actor starts in seconds; one that does not is asked later
            ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=60)
            for ref in ready:
                self._take_facts(pending[ref])
        return [n.name for n in self._usable(Target(target).name)]

    def describe(self, target) -> str:
        """A line for the user: the nodes that measure ``target``, and how many are refused."""
        usable = self.usable_nodes(target)
        refused = sum(1 for n in self.nodes.values() if n.refused)
        return (
            f"{len(usable)} Ray node(s) of {Target(target).name}"
            + (f": {', '.join(usable)}" if usable else " (waiting for one to join)")
            + (f"; {refused} refused" if refused else "")
        )

    # ---- measuring

    def measure(self, task, configs) -> list[MeasureResult]:
        """Build every candidate as a Ray task, run each on a free node of the task's
        target as soon as it is built; results in the order of ``configs``.
        ``EnvironmentFault`` (with the results of a leading run of configs) when builds
        fail for the environment's sake or no node can measure the task."""
        option = self.option_for(task)
        self._await_node(task.target.name)
        specs = candidate_specs(task, configs, option)
        results: list = [None] * len(specs)
        builds = {self._build.remote(s): k for k, s in enumerate(specs)}
        queue: collections.deque = collections.deque()  # (index, build reply) to run
        running: dict = {}  # object ref -> (index, build reply, node)
        waiting_since = None  # when the queue last had no node to go to
        try:
            while builds or queue or running:
                if time.monotonic() - self._last_refresh > REFRESH_S:
                    self.refresh()
                for node in self._usable(task.target.name):
                    if queue and not node.busy:
                        k, b = queue.popleft()
                        spec = {**specs[k], **loadable(b)}
                        ref = node.actor.run.remote(spec, option, b.get("object"))
                        running[ref] = (k, b, node)
                        node.busy = True
                waiting_since = self._check_stranded(task, queue, running, waiting_since)
                facts = {n.facts_ref: n for n in self.nodes.values() if n.facts_ref is not None}
                ready, _ = ray.wait(
                    [*builds, *running, *facts], num_returns=1, timeout=REFRESH_S / 2
                )
                for ref in ready:
                    if ref in facts:
                        self._take_facts(facts[ref])
                    elif ref in builds:
                        self._built(builds.pop(ref), ref, results, queue)
                    else:
                        self._ran(ref, running.pop(ref), results, queue)
        except EnvironmentFault as e:
            for ref in [*builds, *running]:
                try:
                    ray.cancel(ref)
                except (ray.exceptions.RayError, ValueError, TypeError):
                    pass  # finished meanwhile, or not cancellable: its result is dropped
            done = []
            for r in results:
                if r is None:
                    break
                done.append(r)
            e.done = done
            raise
        return results

    def _await_node(self, target: str) -> None:
        """Return once a node may measure ``target`` (none may: wait ``node_wait`` seconds
        for one to join, then ``EnvironmentFault``): nothing is built for no one."""
        since = time.monotonic()
        while not self.usable_nodes(target):
            if time.monotonic() - since > self.node_wait:
                raise self._no_node(target)
            time.sleep(min(REFRESH_S, self.node_wait))

    def _check_stranded(self, task, queue, running, since):
        """When candidates wait and no node can take them, wait ``node_wait`` seconds for
        one to join, then give up."""
        if not queue or running or self._usable(task.target.name):
            return None
        if any(n.facts_ref is not None for n in self.nodes.values()):
            return since  # a node is still telling what it is
        now = time.monotonic()
        if since is None:
            return now
        if now - since > self.node_wait:
            raise self._no_node(task.target.name)
        return since

    def _no_node(self, target: str) -> EnvironmentFault:
        said = self.refusals[-5:] + self.lost[-5:]
        refused = "; ".join(said) or f"no node offers CPUs or {MEASURE_RESOURCE}"
        return EnvironmentFault(
            f"no node of the cluster can measure {target} (waited {self.node_wait:g} s): {refused}"
        )

    def _built(self, k: int, ref, results, queue) -> None:
        try:
            b = ray.get(ref)
        except ray.exceptions.RayError as e:
            b = {
                "error": ErrorKind.INSTANTIATION.value,
                "msg": f"the build task died {BUILD_RETRIES + 1} times: {short_error(e)[:500]}",
            }
        if "fault" in b:
            raise EnvironmentFault(f"cannot build candidates: {b['fault']}")
        if "error" in b:
            results[k] = MeasureResult(error=ErrorKind(b["error"]), error_msg=b["msg"])
        else:
            queue.append((k, b))

    def _ran(self, ref, slot, results, queue) -> None:
        k, b, node = slot
        node.busy = False
        try:
            r = ray.get(ref)
        except ray.exceptions.RayError as e:  # the actor or its node died: not the candidate's
            if not node.lost:
                self._lose(node, short_error(e).splitlines()[0][:200])
            queue.appendleft((k, b))
            return
        if "fault" in r:  # this node cannot measure at all: the others may
            self._refuse(node, r["fault"])
            queue.appendleft((k, b))
            return
        results[k] = result_of(b, r)
        self.measured_on[node.name] += 1
