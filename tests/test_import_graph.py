"""pypto's own modules import each other in one direction: the graph of their
module-level imports is acyclic, and no import hides inside a function.

Imports under ``if TYPE_CHECKING:`` name types for annotations only and never run,
so they are not edges. The only imports allowed below module level are the
optional dependencies listed in OPTIONAL (each guarded where it is used).
"""

import ast
import pathlib

import pytest

PKG = pathlib.Path(__file__).resolve().parents[1] / "pypto"

# module -> optional third-party modules it may import inside a try/function
OPTIONAL = {"dtypes": {"ml_dtypes"}}


def _module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(PKG).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(parts) or "__init__"


def _is_type_checking(node) -> bool:
    return isinstance(node, ast.If) and (
        (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
        or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")
    )


def _top_level(tree) -> list:
    """Import statements that run when the module is imported (try/except included)."""
    out, todo = [], list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        elif isinstance(node, ast.Try):
            todo += node.body + node.orelse + node.finalbody
            todo += [s for h in node.handlers for s in h.body]
        elif isinstance(node, ast.If) and not _is_type_checking(node):
            todo += node.body + node.orelse
    return out


def _pypto_targets(node, module: str, known: set) -> set:
    """The pypto modules an import statement of ``module`` loads."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names if a.name.startswith("pypto.")]
        return {n[len("pypto.") :] for n in names} & known
    if node.level == 0:
        if not (node.module or "").startswith("pypto"):
            return set()
        base = node.module[len("pypto") :].lstrip(".")
    else:
        pkg = module.split(".")[: -node.level] if module != "__init__" else []
        if _is_package(module):
            pkg = module.split(".")[: len(module.split(".")) - node.level + 1]
        base = ".".join([*pkg, *([node.module] if node.module else [])])
    out = set()
    if base in known:
        out.add(base)
    for a in node.names:  # from . import passes: the submodule itself
        sub = f"{base}.{a.name}" if base else a.name
        if sub in known:
            out.add(sub)
    return out


def _is_package(module: str) -> bool:
    return (PKG / module.replace(".", "/") / "__init__.py").exists()


def _graph() -> dict:
    files = {_module_name(f): f for f in PKG.rglob("*.py")}
    known = set(files)
    graph = {}
    for mod, f in files.items():
        tree = ast.parse(f.read_text())
        graph[mod] = set()
        for node in _top_level(tree):
            graph[mod] |= _pypto_targets(node, mod, known) - {mod}
    return graph


def _cycle(graph: dict) -> list | None:
    state: dict = {}
    for start in sorted(graph):
        if start in state:
            continue
        stack, path = [(start, iter(sorted(graph[start])))], [start]
        state[start] = "open"
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = "done"
                stack.pop()
                path.pop()
            elif state.get(nxt) == "open":
                return path[path.index(nxt) :] + [nxt]
            elif nxt not in state:
                state[nxt] = "open"
                path.append(nxt)
                stack.append((nxt, iter(sorted(graph[nxt]))))
    return None


def test_pypto_import_graph_is_acyclic():
    graph = _graph()
    assert graph["lowering"] >= {"bounds", "legality", "schedule"}  # the graph is really read
    cycle = _cycle(graph)
    assert cycle is None, "pypto's modules import each other in a cycle: " + " -> ".join(cycle)


def test_no_function_local_imports():
    bad = []
    for f in PKG.rglob("*.py"):
        mod = _module_name(f)
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import):
                    names = {a.name.split(".")[0] for a in inner.names}
                elif isinstance(inner, ast.ImportFrom):
                    names = {"." if inner.level else (inner.module or "").split(".")[0]}
                else:
                    continue
                if not names <= OPTIONAL.get(mod, set()):
                    bad.append(f"pypto/{f.relative_to(PKG)}:{inner.lineno} imports {names}")
    assert not bad, "imports inside functions: " + "; ".join(bad)


def test_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize(
    "src,mod,expect",
    [
        ("from .expr import Var", "bounds", {"expr"}),
        ("from . import domain, passes", "lowering", {"domain", "passes"}),
        ("from .schedule import Schedule", "__init__", {"schedule"}),
        ("import pypto.torch as ptt", "runtime", {"torch"}),
    ],
)
def test_import_edges(src, mod, expect):
    node = ast.parse(src).body[0]
    known = {"expr", "domain", "passes", "schedule", "torch", "bounds", "lowering"}
    assert _pypto_targets(node, mod, known) == expect
