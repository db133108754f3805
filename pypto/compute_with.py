"""``compute_with``: several stages share their outer loops (Halide's ``compute_with``).

``s[B].update(0).compute_with(s[A].update(0), t)`` runs B's update inside A's loops
down to ``t``, after A's statement in each iteration of ``t``:

    for t:                                  for t:
      for i: A[i] = f(B[i-1], B[i+1])         for i: A[i] = f(B[i-1], B[i+1])
    for t:                          ->        for i: B[i] = g(A[i-1], A[i+1])
      for i: B[i] = g(A[i-1], A[i+1])

A chain (``C.compute_with(B, t)``, ``B.compute_with(A, t)``) orders A, B, C; a stage
sharing fewer loops with the one before it runs after that stage's inner loops, which
makes imperfect nests (a statement before or after an inner loop, as in trisolv):

    for i:                                  for i:
      for j in 0..i: x[i] -= L[i,j]*x[j]      for j in 0..i: x[i] -= L[i,j]*x[j]
    for i:                          ->        x[i] = x[i] / L[i,i]
      x[i] = x[i] / L[i,i]

A stage computed at one of the shared loops (``compute_at``) serves the stages that
run after it in the iterations of that loop too (its buffer then holds for all of
them; the shared loops must count alike): a norm's backward computes a row's
statistics once, for its dx and for its share of the column sums:

    for i:                                  for i:
      mean[i] = ..                            mean.local = sum(X[i, :]) / n
      for j: DX[i, j] = f(mean[i])    ->      for j: DX[i, j] = f(mean.local)
    for i: for j: S[j] += g(mean[i])          for j: S[j] += g(mean.local)

When the fused statements update one tensor (trisolv's subtract and divide) or their
tensors read each other (jacobi's A and B), the fused order at the root loops is the
program's order: there is no other. Otherwise the tensors keep their order, producers
first, and the fusion must keep its dependences (refused with a witness). Later
primitives (split, reorder, skew, parallel, ...) must keep the program's dependences;
``legality`` checks all of it with isl (``poly_cluster.fixes_order``, ``ClusterModel``).
This module holds what the schedule and the order of the root statements need to know
about groups; ``fused_nests`` merges their loop nests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from .errors import ScheduleError
from .tensor import IterVar


@dataclass(frozen=True, eq=False)
class Cluster:
    """Stages sharing outer loops, in execution order; ``depths[k]`` is the number of
    loops member ``k`` shares with member ``k - 1`` (``depths[0]`` is 0), ``orders[k]``
    the number of root loops it shares in the program's order (``order=``)."""

    members: tuple
    depths: tuple
    orders: tuple = ()

    @property
    def name(self) -> str:
        return " + ".join(f"'{m.name}'" for m in self.members)

    def positions(self, k: int, order: bool = False) -> list[int]:
        """Member ``k``'s position after each loop it shares (its time vector's extra
        dims): members split into runs at each depth, the run's index in its parent;
        ``order``: in the program's order instead of the schedule's."""
        d = self.orders if order else self.depths
        m = max(d[k], d[k + 1] if k + 1 < len(d) else 0)
        out = []
        for level in range(1, m + 1):
            start = max(j for j in range(k + 1) if d[j] < level)
            out.append(sum(1 for j in range(start + 1, k + 1) if d[j] == level))
        return out

    def shared(self, k: int) -> int:
        """How many outer loops of member ``k`` are shared with a neighbour."""
        return len(self.positions(k))


class FusedWith(NamedTuple):
    """What ``compute_with`` made of a stage: it runs in ``stage``'s loops down to ``loop``;
    ``order``: the root loops it shares in the program's order (None: the same loops)."""

    stage: Any
    loop: Any
    order: int | None = None


def order_depth(stage, other, order):
    """``compute_with``'s ``order=`` as a number of root loops: a root loop of either
    stage counts itself and the loops outside it; a number stays as it is."""
    if not isinstance(order, IterVar):
        return order
    for st in (stage, other):
        if order in getattr(st, "root_iter_vars", ()):
            return list(st.root_iter_vars).index(order) + 1
    raise ScheduleError(
        f"compute_with on stage '{stage.name}': order: {order.name} is a root loop of neither stage"
    )


def check_compute_with(stage, other, loop, order=None) -> None:
    """The refusals of ``stage.compute_with(other, loop, order)`` that need no dependence
    analysis."""

    def err(msg):
        return ScheduleError(f"compute_with on stage '{stage.name}': {msg}")

    if order is not None and (isinstance(order, bool) or not isinstance(order, int) or order < 1):
        raise err(f"order must be a positive int or a root loop, got {order!r}")

    if not hasattr(other, "leaf_iter_vars") or not hasattr(other, "schedule"):
        raise err(f"expected a stage (s[T] or s[T].update(k)), got {other!r}")
    if other is stage:
        raise err("a stage cannot be computed with itself")
    if other.schedule is not stage.schedule:
        raise err(f"stage '{other.name}' belongs to another schedule")
    for st in (stage, other):
        if st.is_placeholder:
            raise err(f"'{st.name}' is a placeholder and has no loops")
        if getattr(st.op, "extern", None) is not None:
            raise err(f"'{st.name}' is a pt.extern stage, one call without loops")
        if st.inline or st.attach is not None:
            raise err(
                f"'{st.name}' is inlined or attached (compute_at); both stages run at the root"
            )
    if stage.fused_with is not None:
        raise err(f"it is already computed with '{stage.fused_with[0].name}'")
    x = other
    while x is not None:
        if x is stage:
            raise err(f"'{other.name}' is already computed with it (a cycle)")
        x = x.fused_with[0] if x.fused_with is not None else None
    for st in (stage, other):
        if loop in st.leaf_iter_vars:
            depth = st.leaf_iter_vars.index(loop) + 1
            break
    else:
        raise err(
            f"loop {getattr(loop, 'name', loop)!r} is a loop of neither '{stage.name}' nor "
            f"'{other.name}'"
        )
    for st in (stage, other):
        if len(st.leaf_iter_vars) < depth:
            raise err(f"'{st.name}' has {len(st.leaf_iter_vars)} loop(s), {depth} would be shared")
        _check_outside_reduction(stage, st, depth)


def _check_outside_reduction(stage, st, depth: int) -> None:
    """A reduction (not an update definition) stores its initial value before its first
    reduce loop, so the loops it shares must all be outside that one::

        for jo: C[jo] = 0; for k: C[jo] += f(jo, k)     shares jo, never k
    """
    if st.is_update or not st.op.reduce_axis:
        return
    leaves = st.leaf_iter_vars
    first = next((p for p, iv in enumerate(leaves) if iv.kind == "reduce"), len(leaves))
    if depth > first:
        raise ScheduleError(
            f"compute_with on stage '{stage.name}': {depth} shared loop(s) would take in "
            f"{leaves[first].name}, a reduce loop of '{st.name}', whose initial value is "
            f"stored before that loop; share at most the {first} loop(s) outside it"
        )


def fused_depth(stage) -> int:
    """The number of loops ``stage`` shares with the stage it is computed with."""
    other, loop = stage.fused_with.stage, stage.fused_with.loop
    for st in (other, stage):
        if loop in st.leaf_iter_vars:
            d = st.leaf_iter_vars.index(loop) + 1
            short = min((stage, other), key=lambda x: len(x.leaf_iter_vars))
            for st_ in (stage, other):  # (a reorder after compute_with may move them)
                _check_outside_reduction(stage, st_, min(d, len(st_.leaf_iter_vars)))
            if d > len(short.leaf_iter_vars):  # a reorder moved loops inside the shared ones
                raise ScheduleError(
                    f"compute_with on stage '{stage.name}': it shares the loops of "
                    f"'{other.name}' down to {loop.name}, {d} of them, but '{short.name}' "
                    f"has only {len(short.leaf_iter_vars)}; keep the shared loops outermost "
                    "(reorder and skew every member alike before compute_with)"
                )
            return d
    raise ScheduleError(
        f"compute_with on stage '{stage.name}': loop {loop.name} is no longer a loop of "
        f"'{stage.name}' or '{other.name}' (it was split or fused after compute_with)"
    )


def clusters(sch) -> list[Cluster]:
    """The groups of stages made by ``compute_with``, in schedule order."""
    followers: dict = {}
    for st in sch.stages:
        if getattr(st, "fused_with", None) is not None:
            followers.setdefault(st.fused_with[0], []).append(st)
    out = []
    for lead in sch.stages:
        if lead in followers and lead.fused_with is None:
            members, depths = [], []
            _visit(lead, 0, followers, members, depths)
            orders = [d if m.fused_with is None or m.fused_with.order is None
                      else m.fused_with.order for m, d in zip(members, depths)]  # fmt: skip
            out.append(Cluster(tuple(members), tuple(depths), tuple(orders)))
    return out


def _visit(st, depth: int, followers: dict, members: list, depths: list):
    """Depth-first: a stage, then each stage computed with it (and theirs), in call order."""
    members.append(st)
    depths.append(depth)
    for f in followers.get(st, ()):
        d = fused_depth(f)
        between = min(depths[members.index(st) + 1 :], default=d)
        if between < d:
            raise ScheduleError(
                f"compute_with on stage '{f.name}': it cannot share {d} loops with "
                f"'{st.name}', a stage between them shares only {between}"
            )
        _visit(f, d, followers, members, depths)


def cluster_map(sch) -> dict:
    """Stage -> its Cluster, for the stages in one."""
    return {m: c for c in clusters(sch) for m in c.members}


def _root_of(st):
    while st.attach is not None:
        st = st.attach[0]
    return st


def node_order(sch, low) -> list:
    """The root statements in the order they run: stages, and each cluster as one node.

    Producers first (a reader of a tensor after all its definitions), each tensor's
    definitions in sequence; a cycle between nodes is refused, naming the tensors."""
    cmap = cluster_map(sch)

    def node(st):
        st = _root_of(st)
        return cmap.get(st, st)

    def pure(st):
        return st.target_stage or st

    nodes, edges = [], {}
    for st in sch.stages:  # an inlined stage is a node too: it reads its definition's inputs
        if st.is_placeholder:
            continue
        n = node(st)
        if n not in edges:
            nodes.append(n)
            edges[n] = {}
        group = [pure(st), *pure(st).update_stages]
        k = group.index(st)
        if k > 0 and node(group[k - 1]) is not n:  # updates run in sequence
            edges[n].setdefault(node(group[k - 1]), (st, None))
        for read in st.definition_reads():
            p = low.stage_of(read.tensor)
            if p.is_placeholder or pure(p) is pure(st):
                continue
            for q in (pure(p), *pure(p).update_stages):
                if node(q) is not n:
                    edges[n].setdefault(node(q), (st, read.tensor))
                elif isinstance(n, Cluster) and st not in n.members and q in n.members:
                    raise _attached_read_error(st, q, read.tensor)
    order, done = [], set()
    while len(order) < len(nodes):
        ready = [n for n in nodes if n not in done and all(p in done for p in edges[n])]
        if not ready:
            raise _cycle_error([n for n in nodes if n not in done], edges)
        order.append(ready[0])
        done.add(ready[0])
    return order


def _attached_read_error(st, member, tensor) -> ScheduleError:
    return ScheduleError(
        f"stage '{st.name}' is computed inside the loops '{member.name}' shares with "
        f"compute_with, but reads {tensor.name}, which those loops are still computing "
        f"('{st.name}' reads its final values); read {tensor.name} in the statement "
        "itself instead (isl then checks which elements are final)"
    )


def _cycle_error(left: list, edges: dict) -> ScheduleError:
    path, n = [], left[0]
    while n not in path:
        path.append(n)
        n = next(p for p in edges[n] if p in left)
    path = path[path.index(n) :]
    reads, names = [], []
    for a, b in zip(path, path[1:] + path[:1]):
        st, t = edges[a][b]
        reads.append(f"'{st.name}' reads {t.name}" if t is not None else f"'{st.name}' follows")
        for m in a.members if isinstance(a, Cluster) else (a,):  # a group: all its tensors
            pure = m.target_stage or m
            if f"'{pure.name}'" not in names:
                names.append(f"'{pure.name}'")
    clusters = [a for a in path if isinstance(a, Cluster)]
    if clusters:  # the compute_with made the cycle: say so, and what is left outside
        shared = _names([f"'{m.name}'" for c in clusters for m in c.members])
        outside = [a for a in path if not isinstance(a, Cluster)]
        out = _names([f"'{m.name}'" for a in outside for m in getattr(a, "members", (a,))])
        return ScheduleError(
            f"compute_with shares loops among {shared}, and then no order of the "
            f"definitions computes every value before it is read ({', '.join(reads)}): "
            f"{out} would have to run both before and after those loops; share them with "
            f"{out} too, or leave the compute_with out"
        )
    return ScheduleError(
        f"tensors {_names(names)} read each other ({', '.join(reads)}): no order of their "
        "definitions computes every value before it is read; give their update definitions "
        "one loop order with compute_with, or compute one from a copy of the other"
    )


def _names(names: list) -> str:
    """``'A'``, ``'A' and 'B'``, ``'A', 'B' and 'C'``."""
    return " and ".join(names) if len(names) <= 2 else ", ".join(names[:-1]) + " and " + names[-1]


def shared_after(stage, later) -> int:
    """How many outer loops ``later`` shares with ``stage`` while running after it in
    each of their iterations (0: none, or ``later`` runs first): a stage computed at
    one of those loops of ``stage`` (``compute_at``) is ready for ``later`` too."""
    for c in clusters(stage.schedule):
        if stage in c.members and later in c.members:
            a, b = c.members.index(stage), c.members.index(later)
            return min(c.depths[a + 1 : b + 1]) if a < b else 0
    return 0


def shared_loops(stage) -> int:
    """How many outer loops ``stage`` shares with other stages (0 outside a cluster)."""
    for c in clusters(stage.schedule):
        if stage in c.members:
            return c.shared(c.members.index(stage))
    return 0
