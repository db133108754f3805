"""The generated C of the golden kernels and of every built-in template's default config,
for every named target, against the stored snapshot (tests/golden/c_snapshot.json).

After an intended change of the C: ``python tests/snapshot_c.py --diff`` shows it,
``python tests/snapshot_c.py --update`` records it (say why in the commit).
"""

import json

import snapshot_c


def test_c_matches_snapshot():
    stored = json.loads(snapshot_c.SNAPSHOT.read_text())
    differ = snapshot_c.compare(snapshot_c.current_c(), stored)
    assert not differ, (
        f"the C of {len(differ)} kernel(s) changed: {', '.join(differ[:8])}; "
        "see python tests/snapshot_c.py --diff, then --update if intended"
    )


def test_compare_notices_a_changed_a_new_and_a_gone_kernel():
    stored = {"a": snapshot_c.digest("int a;"), "b": snapshot_c.digest("int b;")}
    sources = {"a": "int a; ", "c": "int c;"}
    assert snapshot_c.compare(sources, stored) == ["a", "b", "c"]
    assert snapshot_c.compare({"b": "int b;"}, {"b": snapshot_c.digest("int b;")}) == []
