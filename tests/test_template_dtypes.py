"""The ``dtype`` argument of the GEMM-like templates (API.md 9): int8 inputs give exact
int32 outputs (bit-exact against numpy in int64), 16-bit floats accumulate in float32,
``dense_requant``'s epilogue equals its numpy reference bit for bit (ties, saturation),
and the dtype is part of the workload (records, the command line)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import autotune as at
import pypto as pt
from autotune.templates.dense import requantize_reference
from autotune.templates.dot_ukernels import dot_isa
from autotune.workers import Runner, _random_inputs
from pypto.dtypes import numpy_dtype
from pypto.target import as_target, can_run

try:
    import ml_dtypes
except ImportError:
    ml_dtypes = None


def _build(name, args, target="host"):
    """The template's default config built for ``target``: a module, or its C source
    where this machine cannot run the target's ISA."""
    task = at.Task(name, args, target=target)
    s, tensors = task.instantiate(task.config_space.default_config())
    t = pt.Target(target)
    emit_only = not t.can_run() and t.compiler_prefix is None
    return task, pt.build(s, tensors, target=target, name=name, emit_only=emit_only), tensors


def _float32_tiles_target(dtype):
    """A target whose ``dtype`` GEMMs widen into float32 tiles: the host's for float16;
    for bfloat16 ``x86-avx512`` (AVX-512 without ``vdpbf16ps``) where this machine runs
    it, else the host's when it has no bfloat16 dot kernel (AVX2), else ``x86-avx512``
    (emitted only)."""
    if dtype == "float16":
        return "host"
    for name in ("x86-avx512", "host"):
        t = pt.Target(name)
        if t.can_run() and dot_isa(t, dtype) is None:
            return name
    return "x86-avx512"


def _ints(rng, shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def _shape(t):
    return tuple(int(d.value) for d in t.shape)


@pytest.mark.parametrize(
    "name, args",
    [
        ("matmul", (37, 50, 300, "int8")),
        ("matmul", (16, 64, 64, "uint8")),
        ("batch_matmul", (2, 9, 40, 70, "int8")),
        ("dense", (33, 40, 70, "int8")),
        ("conv2d_nchw", (1, 8, 10, 10, 32, 3, 3, 1, 1, "int8")),  # channels vectorized
        ("conv2d_nchw", (2, 5, 9, 9, 6, 3, 3, 2, 1, "int8")),  # columns vectorized
        # it took int8 and summed in 8 bits (wrong on almost every output)
        ("depthwise_conv2d_nchw", (1, 16, 9, 9, 3, 3, 2, 1, "int8")),
        ("depthwise_conv2d_nchw", (2, 5, 7, 13, 3, 3, 1, 0, "uint8")),
    ],
)
def test_int8_templates_are_exact_in_int32(name, args):
    task, mod, tensors = _build(name, args)
    rng = np.random.default_rng(1)
    inputs = [_ints(rng, _shape(t), t.dtype) for t in tensors[:-1]]
    inputs[0].reshape(-1)[:64] = np.iinfo(tensors[0].dtype).min  # the extremes
    inputs[1].reshape(-1)[:64] = np.iinfo(tensors[1].dtype).min
    out = mod(*inputs)
    assert out.dtype == np.int32
    (ref,) = task.template.reference_output(inputs, args)
    w = [x.astype(np.int64) for x in inputs]
    direct = {
        "matmul": lambda: w[0] @ w[1],
        "batch_matmul": lambda: np.matmul(w[0], w[1]),
        "dense": lambda: w[0] @ w[1].T,
    }
    if name in direct:  # the reference is the product in int64
        np.testing.assert_array_equal(ref, direct[name]())
    np.testing.assert_array_equal(out, ref)


NO_BF16 = pytest.mark.skipif(ml_dtypes is None, reason="needs ml_dtypes")


@pytest.mark.parametrize("dtype", ["float16", pytest.param("bfloat16", marks=NO_BF16)])
def test_16_bit_matmul_template_within_1e_2_at_k_4096(dtype):
    M, N, K = 8, 32, 4096
    task, mod, _ = _build("matmul", (M, N, K, dtype))
    rng = np.random.default_rng(2)
    a = rng.uniform(0, 1, (M, K)).astype(numpy_dtype(dtype))
    b = rng.uniform(0, 1, (K, N)).astype(numpy_dtype(dtype))
    out = mod(a, b)
    assert out.dtype == numpy_dtype(dtype)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.max(np.abs(out.astype(np.float64) - ref) / ref) < 1e-2


@pytest.mark.parametrize("dtype", ["float16", pytest.param("bfloat16", marks=NO_BF16)])
@pytest.mark.parametrize(
    "name, args, kernel",
    [
        ("conv2d_nchw", (1, 8, 12, 12, 32, 3, 3, 1, 1), "conv_tile_"),  # padded: micro-kernel
        ("conv2d_nchw", (1, 8, 12, 12, 32, 3, 3, 2, 0), None),  # unpadded: widened where read
        ("batch_matmul", (2, 24, 48, 40), None),
        ("matmul", (30, 50, 70), None),
        ("dense", (30, 50, 70), None),
        ("dense_bias_gelu", (30, 50, 70), None),
    ],
)
def test_16_bit_floats_are_widened_once_into_float32_tiles(name, args, kernel, dtype):
    """float16 (and bfloat16 on a target without its dot kernel) multiply in float32
    tiles, the operands widened once (``_f32`` stages, ``pt_f16_load`` vectorized) and
    the output rounded once: within 16-bit rounding of float64."""
    target = _float32_tiles_target(dtype)
    assert dot_isa(pt.Target(target), dtype) is None
    task, mod, tensors = _build(name, (*args, dtype), target=target)
    nd = numpy_dtype(dtype)
    src = mod if isinstance(mod, str) else mod.source
    assert "float* restrict" in src  # a float32 tile or stage between 16-bit in and out
    if kernel and pt.Target(target).has("avx512f"):
        assert kernel in src  # float32's micro-kernel, on the widened padded input
    if not pt.Target(target).can_run():
        return
    rng = np.random.default_rng(5)
    inputs = [rng.uniform(-1, 1, _shape(t)).astype(nd) for t in tensors[:-1]]
    out = mod(*inputs)
    assert out.dtype == nd
    (ref,) = task.template.reference_output([x.astype(np.float64) for x in inputs], task.args)
    ref = np.asarray(ref, np.float64)
    got = out.astype(np.float64)
    np.testing.assert_allclose(got, ref, rtol=1e-2, atol=1e-2 * np.abs(ref).max())


def test_requantized_dense_is_bit_exact_with_ties_and_saturation():
    M, N, K = 12, 48, 40
    task, mod, tensors = _build("dense_requant", (M, N, K))
    assert [t.dtype for t in tensors] == ["int8", "int8", "float32", "int8"]
    rng = np.random.default_rng(3)
    x, w = _ints(rng, (M, K), np.int8), _ints(rng, (N, K), np.int8)
    # rows 1..: small values; columns 0-15: weights in -1..1 and scale 1/2 or 1/4 (exact
    # products: every odd sum is a tie, .25/.75 not); 16-31: scale 1 (most saturate);
    # the rest: random small scales
    x[1:] = rng.integers(-8, 9, (M - 1, K))
    w[:16] = rng.integers(-1, 2, (16, K))
    scale = rng.uniform(1e-4, 4e-3, N).astype(np.float32)
    scale[0:8], scale[8:16], scale[16:32] = 0.5, 0.25, 1.0
    x[0, :], w[16, :] = 127, 127  # the largest positive sum: saturates at 127
    out = mod(x, w, scale)
    acc = (x.astype(np.int64) @ w.astype(np.int64).T).astype(np.int32)
    ref = requantize_reference(acc, scale)
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(ref, task.template.reference_output([x, w, scale], task.args)[0])
    y = acc[1:, :8].astype(np.float64) * 0.5  # rows 1..: inside the int8 range
    ties = np.abs(y - np.floor(y)) == 0.5
    assert ties.sum() > 10 and (out[1:, :8][ties] % 2 == 0).all()  # ties went to even
    assert (np.abs(out[1:, :8] - y) <= 0.5).all()
    assert (out[:, 16:32] == 127).any() and (out[:, 16:32] == -128).any()
    assert out[0, 16] == 127


def test_requantize_reference_rounds_ties_to_even_and_saturates():
    acc = np.array([[1, 3, 5, -1, -3, 255, 256, -257, -300]], np.int32)
    scale = np.array([0.5] * 9, np.float32)
    assert requantize_reference(acc, scale).tolist() == [[0, 2, 2, 0, -2, 127, 127, -128, -128]]


def test_dtype_is_part_of_the_workload(tmp_path):
    f32 = at.Task("matmul", (32, 32, 32))
    i8 = at.Task("matmul", (32, 32, 32, "int8"))
    assert f32.workload_key != i8.workload_key
    assert at.get_template("matmul")(32, 32, 32, "int8")[1][-1].dtype == "int32"
    with pytest.raises(ValueError, match="matmul: dtype 'int4' is not one of float32, .*int8"):
        at.Task("matmul", (32, 32, 32, "int4")).instantiate(None)
    log = tmp_path / "mm.jsonl"
    r = subprocess.run(
        [sys.executable, "-m", "autotune", "matmul", "--args", "32,32,32", "--dtype", "int8",
         "--trials", "2", "--log", str(log), "--no-progress", "--confirm", "0"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    recs = [json.loads(x) for x in log.read_text().splitlines()]
    assert recs and all(rec["workload"] == ["matmul", [32, 32, 32, "int8"]] for rec in recs)
    assert any(rec["error"] is None for rec in recs)
    with at.apply_history_best(str(log)):
        s, tensors = at.get_template("matmul")(32, 32, 32, "int8")
    assert tensors[-1].dtype == "int32"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["softmax", "--args", "8,8", "--dtype", "int8"], "template 'softmax' takes no dtype"),
        (["matmul", "--args", "8,8,8,int8", "--dtype", "int8"], "--args already gives dtype"),
        (["conv2d_nchw", "--args", "1,2,3", "--dtype", "int8"], "--args lacks W, K, R, S"),
    ],
)
def test_bad_dtype_arguments_are_refused(argv, message):
    r = subprocess.run(
        [sys.executable, "-m", "autotune", "show", *argv], capture_output=True, text=True
    )
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_conv2d_dtype_fills_stride_and_padding_defaults():
    from autotune.commands.common import with_dtype

    assert with_dtype("conv2d_nchw", [1, 8, 10, 10, 32, 3, 3], "int8") == [
        1, 8, 10, 10, 32, 3, 3, 1, 0, "int8"
    ]  # fmt: skip


@pytest.mark.parametrize("dtype", ["float16", pytest.param("bfloat16", marks=NO_BF16)])
def test_dense_bias_gelu_in_16_bit_floats(dtype):
    task, mod, tensors = _build("dense_bias_gelu", (33, 40, 300, dtype))
    assert all(t.dtype == dtype for t in tensors)
    rng = np.random.default_rng(6)
    inputs = [rng.uniform(-1, 1, _shape(t)).astype(numpy_dtype(dtype)) for t in tensors[:-1]]
    out = mod(*inputs).astype(np.float64)
    (ref,) = task.template.reference_output(inputs, task.args)
    # the sum is rounded to the dtype (D is a 16-bit tensor), then the result: 2 ulps
    ulp = 2.0 ** (-10 if dtype == "float16" else -7)  # relative spacing of the dtype
    err = np.abs(out - ref.astype(np.float64))
    assert np.all(err <= 2 * ulp * np.maximum(np.abs(ref.astype(np.float64)), 1))
    with pytest.raises(ValueError, match="dense_bias_gelu: dtype must be float32, float16"):
        at.Task("dense_bias_gelu", (4, 4, 4, "int8"))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_16_bit_copy_keeps_every_bit(dtype):
    """A bfloat16/float16 element copied is its bits (no widening and rounding back):
    -0, infinities, NaNs (a signalling one too) and subnormals survive, and the C has no
    conversion."""
    A = pt.placeholder((8,), dtype, name="A")
    B = pt.compute((8,), lambda i: A[i], name="B")
    mod = pt.build(pt.create_schedule(B.op), [A, B], name="copy")
    assert "B[i] = A[i];" in mod.source
    raw = np.array([0x8000, 0x7F80, 0xFF80, 0x7FC1, 0x7F81, 0x0001, 0x3F80, 0x7E01], np.uint16)
    out = mod(raw.view(numpy_dtype(dtype)))
    np.testing.assert_array_equal(out.view(np.uint16), raw)


def _default_matches_reference(name, args, target="host", seeds=3, values=None):
    """Build the default config (with knob ``values`` set) and compare with the template's
    reference, as the tuner's own check does (its inputs and tolerances)."""
    task = at.Task(name, args, target=target)
    space = task.config_space
    s, ts = task.instantiate(space.config({**space.default_config().to_json(), **(values or {})}))
    mod = pt.build(s, ts, target=task.target)
    for seed in range(seeds):
        arrays, outs = _random_inputs(ts, np.random.default_rng(seed))
        mod(*arrays)
        ref = task.template.reference_output([arrays[i] for i in range(len(ts)) if i not in outs],
                                             task.args)  # fmt: skip
        assert (
            Runner._compare(arrays, outs, ref, [t.name for t in ts], {"rtol": 1e-3, "atol": 1e-3})
            is None
        )
    return task


@pytest.mark.parametrize("target", ["host", "x86-avx2", "generic"])
def test_defaults_build_and_match_at_shapes_smaller_than_their_tiles(target):
    """int8/bfloat16 GEMMs whose default register tile is larger than M or N (a GEMV,
    in the GEMM's form: ``skinny`` off) turn the dot-product kernel off (it failed to
    tensorize); float64 convolutions whose K holds whole float64 vectors but not float32
    ones (IndexError)."""
    if not can_run(as_target(target)):
        pytest.skip(f"this CPU cannot run {target}")
    for name, args in [("matmul", (1, 16, 64, "int8")), ("matmul", (5, 3, 64, "int8")),
                       ("dense_requant", (2, 16, 64, "int8")), ("matmul", (1, 16, 64, "bfloat16")),
                       ("conv2d_nchw", (1, 4, 5, 5, 8, 5, 5, 3, 2, "float64"))]:  # fmt: skip
        _default_matches_reference(name, args, target, values={"skinny": 0}
                                   if name != "conv2d_nchw" else None)  # fmt: skip


def test_dense_bias_gelu_in_bfloat16_rounds_once_at_the_output():
    """The sum went to bfloat16 before the bias and GELU: where the bias nearly cancels
    it, the output was off by several percent (the tuner's check failed every config)."""
    _default_matches_reference("dense_bias_gelu", (33, 63, 65, "bfloat16"), seeds=6)


def test_moe_with_fewer_tokens_than_the_index_range_is_measured():
    """The tuner's inputs put token ids up to 8 whatever the tokens: with 5 the
    reference raised and tuning stopped as an environment fault."""
    task = at.Task("moe", (5, 3, 7, 2, 1), target="host")
    (r,) = at.measure(task, [task.config_space.default_config()],
                      at.MeasureOption(number=1, repeat=1, n_parallel=1))  # fmt: skip
    assert r.error is None, r.error_msg


@pytest.mark.parametrize("eps", [float("nan"), -1.0, float("inf"), "1e-5"])
@pytest.mark.parametrize(
    "name", ["rmsnorm", "layernorm", "rmsnorm_fwd", "layernorm_fwd", "rmsnorm_backward",
             "layernorm_backward"],
)  # fmt: skip
def test_a_norm_refuses_an_eps_that_makes_every_output_nan(name, eps):
    """A negative or NaN eps gives all-NaN rows, which a NaN reference would call right."""
    finite = r"workload arguments must be finite numbers"  # (any template's, NaN first)
    with pytest.raises(ValueError, match=rf"(eps must be a finite number >= 0|{finite}), got "):
        at.get_template(name)(4, 8, eps)
    if isinstance(eps, float) and eps != eps:  # records are JSON: no NaN in a workload
        with pytest.raises(ValueError, match=finite):
            at.Task(name, (4, 8, eps))


@pytest.mark.parametrize(
    "name, args",
    [
        ("matmul", (16, 16, 32, "int8")),
        ("dense", (17, 33, 64, "int8")),
        ("batch_matmul", (2, 5, 9, 64, "int8")),
    ],
)
def test_a_register_tile_wider_than_the_gemm_runs_the_plain_loops(name, args):
    """The space holds tiles wider than a small GEMM: with ``ukernel`` on they failed at
    build (tensorize), a trial lost; they run the plain loops instead."""
    task = at.Task(name, args)
    space = task.config_space
    base = space.default_config().to_json()
    if "ukernel" not in base:
        pytest.skip(f"no dot kernel for {args[-1]} on {task.target.name}")
    N = args[-3]
    widest = max(space.knobs["tile_j"].values, key=lambda v: v[-1])
    if widest[-1] <= N:
        pytest.skip(f"{task.target.name}'s space holds no tile wider than N={N}")
    s, tensors = task.instantiate(space.config({**base, "tile_j": widest, "ukernel": 1}))
    mod = pt.build(s, tensors)
    rng = np.random.default_rng(2)
    inputs = [_ints(rng, _shape(t), t.dtype) for t in tensors[:-1]]
    (ref,) = task.template.reference_output(inputs, args)
    np.testing.assert_array_equal(mod(*inputs), ref)


@pytest.mark.parametrize("name, args", [("matmul", (None, 16, 16)), ("softmax", (None, 8))])
def test_a_template_called_with_a_size_variable_says_what_to_do(name, args):
    """Templates are tuned and recorded per shape: a pt.var argument is refused by name
    (it reached the records' JSON encoder and failed there)."""
    import pypto as pt

    args = (pt.var("M"), *args[1:])
    want = r"workload arguments must be numbers or strings, got the expression M: .* pt.build"
    with pytest.raises(TypeError, match=want):
        at.get_template(name)(*args)
    with pytest.raises(TypeError, match=want):
        at.Task(name, args)
