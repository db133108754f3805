"""Skinny GEMMs (``autotune/templates/skinny.py``): matmul and the dense templates with
a few rows read B (W) in place, no packed copy, and match their references in every
dtype, at ragged shapes, for a spread of the skinny knobs' values and the defaults;
with a few columns (the narrow form) they read A (X) in place, rows in parallel."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

import autotune as at
import pypto as pt
from autotune.templates import skinny
from autotune.workers import Runner, _random_inputs

try:
    import ml_dtypes
except ImportError:
    ml_dtypes = None

DTYPES = ["float32", "float64", "float16", "int8", "uint8"] + (["bfloat16"] if ml_dtypes else [])


def _skinny_configs(task, limit: int = 2, form: str = "skinny") -> list:
    """Configs with ``form`` (``skinny`` or ``narrow``) on: every ``limit``-th combination
    of its knobs, and the default's."""
    space = task.config_space
    base = space.default_config().to_json()
    names = [k for k in space.knobs if k.startswith(form + "_")]
    combos = [
        dict(zip(names, v)) for v in itertools.product(*(space.knobs[k].values for k in names))
    ]
    picked = combos[:: max(1, len(combos) // limit)] + [{}]
    return [space.config({**base, **c, form: 1}) for c in picked]


def _check(task, cfg, seeds=1):
    s, ts = task.instantiate(cfg)
    mod = pt.build(s, ts, target=task.target)
    exact = str(ts[0].dtype) in ("int8", "uint8")
    for seed in range(seeds):
        arrays, outs = _random_inputs(ts, np.random.default_rng(seed))
        mod(*arrays)
        inputs = [arrays[i] for i in range(len(ts)) if i not in outs]
        ref = task.template.reference_output(inputs, task.args)
        if exact:
            np.testing.assert_array_equal(arrays[outs[0]], ref[0], err_msg=str(cfg.to_json()))
        else:
            names = [t.name for t in ts]
            why = Runner._compare(arrays, outs, ref, names, {"rtol": 1e-3, "atol": 1e-3})
            assert why is None, f"{task.args} {cfg.to_json()}: {why}"
    return mod


CASES = [
    ("matmul", (1, 37, 23), DTYPES),  # N and K ragged against every vector and block
    ("matmul", (3, 70, 300), DTYPES),
    ("matmul", (16, 33, 17), ["float32", "int8"]),  # the most rows the knobs exist for
    ("dense", (1, 37, 23), DTYPES),
    ("dense", (5, 70, 300), DTYPES),  # K: whole vectors and a tail
    ("dense", (16, 9, 7), ["float32", "float16"]),  # K shorter than a vector: one plain sum
    ("matmul", (1, 300, 40), DTYPES),  # blocks narrower than N (256 and a ragged 44)
    ("matmul", (2, 300, 40), ["float32", "int8"]),  # ... their accumulator in memory
    ("batch_matmul", (3, 1, 37, 23), DTYPES),  # a batch of them: (batch, M, N, K)
    ("batch_matmul", (2, 5, 70, 300), ["float32", "bfloat16" if ml_dtypes else "float16", "int8"]),
]


@pytest.mark.parametrize(
    "name, shape, dtype", [(n, s, d) for n, s, dts in CASES for d in dts]
)  # fmt: skip
def test_skinny_configs_match_the_reference(name, shape, dtype):
    task = at.Task(name, (*shape, dtype))
    for cfg in _skinny_configs(task):
        _check(task, cfg)


@pytest.mark.parametrize(
    "name, args",
    [
        ("dense_bias_gelu", (2, 37, 65)),
        ("dense_bias_gelu", (1, 5, 3)),
        ("dense_requant", (3, 40, 70, "int8")),
    ],
)
def test_skinny_epilogues_match_the_reference(name, args):
    task = at.Task(name, args)
    for cfg in _skinny_configs(task):
        _check(task, cfg)


@pytest.mark.parametrize("name", ["matmul", "dense", "dense_bias_gelu"])
def test_few_rows_default_to_the_skinny_form_and_read_the_weights_in_place(name):
    """The GEMM's default packed B (W) at every call: at 1 x 4096 x 4096 on one thread of a
    Zen 4 that made matmul 3.6x and dense_bias_gelu 12x slower than reading it in place."""
    task = at.Task(name, (1, 300, 200))
    cfg = task.config_space.default_config()
    assert cfg["skinny"].val == 1
    src = _check(task, cfg).source
    assert "WP" not in src and "B_local" not in src  # no packed panel of B (W)


def test_the_knobs_exist_for_few_rows_only():
    assert skinny.has_knobs(at.Task("matmul", (skinny.MAX_ROWS, 64, 64)).config_space)
    assert not skinny.has_knobs(at.Task("matmul", (skinny.MAX_ROWS + 1, 64, 64)).config_space)
    assert at.Task("dense", (skinny.MAX_ROWS, 64, 64)).config_space.default_config()["skinny"].val


@pytest.mark.parametrize(
    "name, rows, target, on",
    [
        ("dense", 3, "generic", 1),  # no dot kernel: skinny up to MAX_ROWS
        ("dense", 3, "x86-avx512-bf16", 0),  # VNNI's kernel from 3 rows on
        ("dense", 2, "x86-avx512-bf16", 1),
        ("matmul", 4, "x86-avx2", 1),
        ("matmul", 5, "x86-avx2", 0),  # vpmaddwd's kernel from 5 rows on
        ("dense", 9, "x86-avx512-bf16", 1),  # no int8 kernel at K = 63
        ("dense", 16, "generic", 1),
    ],
)
def test_int8_takes_the_dot_kernel_from_a_few_rows_on(name, rows, target, on):
    K = 63 if rows == 9 else 64
    cfg = at.Task(name, (rows, 64, K, "int8"), target=target).config_space.default_config()
    assert cfg["skinny"].val == on


@pytest.mark.parametrize("dtype", ["float16"] + (["bfloat16"] if ml_dtypes else []))
@pytest.mark.parametrize("name", ["matmul", "dense"])
def test_16_bit_skinny_sums_in_float32(name, dtype):
    """At K = 4096 a 16-bit sum would be off by far more than 1e-2 (API.md 9)."""
    K = 4096
    task = at.Task(name, (1, 48, K, dtype))
    s, ts = task.instantiate(task.config_space.default_config())
    mod = pt.build(s, ts)
    rng = np.random.default_rng(3)
    a = rng.uniform(0.5, 1.0, (1, K)).astype(ts[0].dtype)
    b = rng.uniform(0.5, 1.0, (K, 48) if name == "matmul" else (48, K)).astype(ts[1].dtype)
    b64 = b.astype(np.float64)
    want = a.astype(np.float64) @ (b64 if name == "matmul" else b64.T)
    got = mod(a, b).astype(np.float64)
    assert np.max(np.abs(got - want) / want) < 1e-2


NARROW_CASES = [
    ("matmul", (37, 1, 29), DTYPES),  # a matrix-vector product; K ragged
    ("matmul", (40, 3, 70), DTYPES),  # B transposed once
    ("matmul", (17, 4, 7), ["float32", "float16"]),  # the fewest rows; K under a vector
    ("dense", (33, 2, 50), DTYPES),
    ("dense", (70, 1, 300), ["float32", "int8"]),
    ("batch_matmul", (3, 37, 1, 29), DTYPES),
    ("batch_matmul", (2, 40, 3, 70), ["float32", "float16", "int8"]),
]


@pytest.mark.parametrize(
    "name, shape, dtype", [(n, s, d) for n, s, dts in NARROW_CASES for d in dts]
)  # fmt: skip
def test_narrow_configs_match_the_reference(name, shape, dtype):
    task = at.Task(name, (*shape, dtype))
    for cfg in _skinny_configs(task, form="narrow"):
        _check(task, cfg, seeds=2)


@pytest.mark.parametrize(
    "name, args",
    [("dense_bias_gelu", (45, 3, 65)), ("dense_requant", (30, 4, 70, "int8"))],
)
def test_narrow_epilogues_match_the_reference(name, args):
    task = at.Task(name, args)
    for cfg in _skinny_configs(task, form="narrow"):
        _check(task, cfg)


@pytest.mark.parametrize("name", ["matmul", "dense"])
def test_a_matrix_vector_product_reads_the_matrix_in_place_rows_in_parallel(name):
    """One output column: the GEMM's tile computed a panel of columns of which one was
    used (matmul 512 x 1 x 1024: 5x behind numpy's GEMV)."""
    task = at.Task(name, (300, 1, 200))
    cfg = task.config_space.default_config()
    assert cfg["narrow"].val == 1
    src = _check(task, cfg).source
    assert "WP" not in src and "B_local" not in src and "A_f32" not in src
    assert "#pragma omp parallel" in src and "D_p" in src  # float partial sums per lane


@pytest.mark.parametrize(
    "name, shape", [("matmul", (300, 1, 200)), ("dense", (300, 2, 200)), ("dense", (2, 40, 200))]
)
def test_integer_dot_products_are_summed_as_they_stand(name, shape):
    """No partial sums per lane (``lane_partials``): the C compiler vectorizes an integer
    sum with its own dot-product instructions (int8 dense 2 x 4096 x 4096: 1.9 ms, 3.4
    with partials)."""
    task = at.Task(name, (*shape, "int8"))
    cfg = task.config_space.default_config()
    assert cfg["narrow" if shape[0] > skinny.MAX_ROWS else "skinny"].val == 1
    src = _check(task, cfg, seeds=2).source
    assert "#pragma omp parallel" in src and "D_p" not in src


def test_the_narrow_knobs_exist_for_few_columns_and_many_rows():
    def has(shape):
        return skinny.has_knobs(at.Task("matmul", shape).config_space, "narrow")

    assert has((skinny.MAX_ROWS + 1, skinny.NARROW_COLS, 64))
    assert not has((skinny.MAX_ROWS + 1, skinny.NARROW_COLS + 1, 64))
    assert not has((skinny.MAX_ROWS, 1, 64))  # the skinny form's


@pytest.mark.parametrize("shape", [(4, 1, 300, 200), (4, 300, 1, 200)])
def test_a_batch_of_skinny_products_takes_their_forms_batches_in_parallel(shape):
    """Few rows (or columns) per product: the GEMM's tile took 3-5x numpy's time (one
    thread of a Zen 4, 32 x 1 x 2048 x 128 and 32 x 2048 x 1 x 128)."""
    task = at.Task("batch_matmul", shape)
    cfg = task.config_space.default_config()
    assert cfg["skinny" if shape[1] == 1 else "narrow"].val == 1
    src = _check(task, cfg, seeds=2).source
    parallel = "b_j_outer_fused" if shape[1] == 1 else "b_i_outer_fused"  # batch, blocks
    assert "B_local" not in src and f"for (int64_t {parallel} = 0" in src


@pytest.mark.parametrize(
    "name, streamed, other",
    [("matmul", "narrow_rows", (300, 4)), ("dense", "narrow_rows", (300, 2)),
     ("dense", "skinny_cols", (1, 300)), ("dense", "skinny_cols", (4, 300))],
)  # fmt: skip
def test_a_small_operand_takes_one_streamed_row_at_a_time(name, streamed, other):
    """Where the operand that is not streamed fits in half of the target's L1, the tile
    takes one row of the streamed one (a single sequential stream); from there on, the
    widest tile (its reuse of that operand)."""
    M, N = other
    few = N if streamed.startswith("narrow") else M
    target = pt.Target("host")
    half_l1 = target.l1d_bytes // 2
    K = half_l1 // (4 * few)  # float32: exactly half of L1
    if (K - 16) // target.vector_lanes("float32") >= skinny.LONG_CHAIN:
        pytest.skip("rows this long take a tile of rows for their chains (the next test)")
    small = at.Task(name, (M, N, K - 16)).config_space.default_config()
    large = at.Task(name, (M, N, K)).config_space.default_config()
    assert small[streamed].val == 1
    assert large[streamed].val > 1
    _check(at.Task(name, (M, N, K - 16)), small)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize(
    "name, streamed, other",
    [("matmul", "narrow_rows", (300, 1)), ("dense", "skinny_cols", (1, 300))],
)  # fmt: skip
def test_long_rows_take_a_tile_of_rows(name, streamed, other, dtype):
    """A small other operand, but rows whose lane partials are ``LONG_CHAIN`` dependent
    multiply-adds or more: a tile of rows (independent chains), one row below that."""
    M, N = other
    target = pt.Target("host")
    lanes = target.vector_lanes("float32")
    K = skinny.LONG_CHAIN * lanes

    def fits(k):  # the other operand (one row of it) in half of L1
        return k * (2 if dtype == "float16" else 4) < target.l1d_bytes // 2

    assert fits(K) or dtype == "float32"  # float16: the chain alone decides
    short = at.Task(name, (M, N, K - lanes, dtype)).config_space.default_config()
    long = at.Task(name, (M, N, K, dtype)).config_space.default_config()
    if fits(K - lanes):
        assert short[streamed].val == 1
    assert long[streamed].val > 1
    _check(at.Task(name, (M, N, K + 3, dtype)), long)


@pytest.mark.parametrize("name, shape", [("matmul", (300, 1, 200)), ("dense", (300, 3, 200))])
def test_16_bit_narrow_forms_widen_the_few_columns_once(name, shape):
    """B's column (W's rows) in float32 once, before the rows in parallel, not again at
    each row of A (X): float16 4096 x 1 x 4096, one thread of a Zen 4, 11.1 -> 7.3 ms."""
    task = at.Task(name, (*shape, "float16"))
    src = _check(task, task.config_space.default_config(), seeds=2).source
    before, rows = src.split("#pragma omp parallel", 1)
    few = "B" if name == "matmul" else "W"
    assert f"pt_f16_load({few}[" in before and f"pt_f16_load({few}[" not in rows
    many = "A" if name == "matmul" else "X"  # read in place (or its rows converted there)
    assert f"pt_f16_load({many}[" in rows or re.search(rf"widen_\w+_f16_\d+\({many} ", rows)


def test_a_narrow_block_keeps_its_accumulator_in_registers():
    """A block of at most half the vector registers: its vectors unrolled, at constant
    offsets, which the C compiler keeps in registers (one thread of a Zen 4, 32 x 1 x 256
    x 1024: 3.4 -> 1.0 ms); one vector more, and the loop over the block stays."""
    target = pt.Target("host")
    lanes, vectors = target.vector_lanes("float32"), target.vector_registers // 2
    for n, unrolled in ((vectors * lanes, True), ((vectors + 1) * lanes, False)):
        task = at.Task("batch_matmul", (3, 1, n, 40))
        src = _check(task, task.config_space.default_config(), seeds=2).source
        assert (f"C_acc[j_inner + {n - lanes}]" in src) == unrolled, n
