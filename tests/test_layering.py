"""Imports point one way: pypto <- cost_models <- autotune."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
FORBIDDEN = {"pypto": {"autotune", "cost_models"}, "cost_models": {"autotune"}}


def _imports(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0]


def test_no_upward_imports():
    bad = []
    for pkg, banned in FORBIDDEN.items():
        for f in (ROOT / pkg).rglob("*.py") if (ROOT / pkg).exists() else []:
            for mod in _imports(f):
                if mod in banned:
                    bad.append(f"{f.relative_to(ROOT)} imports {mod}")
    assert not bad, "layering violated: " + "; ".join(bad)
