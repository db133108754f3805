"""Every ```python block of the README runs as a script in a fresh process."""

import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GUARD = 'if __name__ == "__main__":'


def python_blocks() -> list[str]:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        return re.findall(r"^```python\n(.*?)^```", f.read(), re.M | re.S)


def _run(script: str, tmp_path, timeout: float = 120) -> subprocess.CompletedProcess:
    path = tmp_path / "block.py"
    path.write_text(script)
    env = dict(os.environ, PYTHONPATH=ROOT, PYPTO_HOME=str(tmp_path / "home"))
    return subprocess.run(
        [sys.executable, str(path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_readme_has_its_blocks():
    blocks = python_blocks()
    assert len(blocks) >= 3 and any(GUARD in b for b in blocks)


@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_readme_block_runs_as_a_script(index, tmp_path):
    block = python_blocks()[index]
    t0 = time.perf_counter()
    r = _run(block, tmp_path)
    assert r.returncode == 0, f"README block {index}:\n{block}\n--- stderr:\n{r.stderr[-3000:]}"
    assert time.perf_counter() - t0 < 60, f"README block {index} took over a minute"
    assert set(os.listdir(tmp_path)) <= {"block.py", "home"}  # nothing written beside it


def test_the_first_blocks_loop_nest_is_what_it_prints(tmp_path):
    """The README shows the loop nest its first block prints, up to its "..." line."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    shown = re.search(r"^```\n(func mm_relu.*?)^```", text, re.M | re.S).group(1)
    shown = shown[: shown.index("      ... the same nest")].splitlines()
    block = python_blocks()[0]
    r = _run(block[: block.index("mod = pt.build")], tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[: len(shown)] == shown


def test_tuning_without_the_main_guard_fails_at_once_saying_what_to_add(tmp_path):
    (block,) = [b for b in python_blocks() if GUARD in b]
    head, rest = block.split(GUARD, 1)
    unguarded = head + textwrap.dedent(rest.split("\n", 1)[1])  # its tuning at the top level
    assert GUARD not in unguarded and "tuner.tune(" in unguarded
    t0 = time.perf_counter()
    r = _run(unguarded, tmp_path)
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    line = unguarded.splitlines().index("tuner.tune(") + 1
    assert f"block.py, line {line}: tuning starts worker processes" in last
    assert f"must be under  {GUARD}" in last
    assert time.perf_counter() - t0 < 30  # at once: no trial was measured
    assert not (tmp_path / "home").exists()  # nor logged
