"""Cost model: IR features, the XGBoost ranker, saving and schema checks."""

import json

import numpy as np
import pytest

import cost_models as cm
import pypto as pt
from pypto.expr import Load, walk

TARGET = pt.Target("x86-avx2")  # features need no machine: any named target


def _matmul(tile_i, tile_j, vec=True, par=False, n=64):
    A = pt.placeholder((n, n), "float32", name="A")
    B = pt.placeholder((n, n), "float32", name="B")
    k = pt.reduce_axis((0, n), name="k")
    C = pt.compute((n, n), lambda i, j: pt.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = pt.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], tile_i, tile_j)
    s[C].reorder(io, jo, k, ii, ji)
    if vec:
        s[C].vectorize(ji)
    if par:
        s[C].parallel(io)
    return pt.lower(s, [A, B, C])


def test_features_are_fixed_length_deterministic_and_named():
    f = _matmul(4, 16)
    x1, x2 = cm.featurize(f, TARGET), cm.featurize(f, TARGET)
    assert x1.shape == (cm.N_FEATURES,) and x1.dtype == np.float32
    assert len(cm.FEATURE_NAMES) == cm.N_FEATURES == len(set(cm.FEATURE_NAMES))
    np.testing.assert_array_equal(x1, x2)
    assert np.all(np.isfinite(x1))
    names = dict(zip(cm.FEATURE_NAMES, x1))
    assert names["l0_kind_vectorized"] == 1.0
    assert names["l0_log_extent"] == pytest.approx(np.log2(17))
    assert names["vector_lanes"] == TARGET.vector_lanes(4)


def test_features_carry_the_target_parameters():
    """The same kernel on two targets: only the target's parameters differ, so one
    model can learn from several targets' records."""
    f = _matmul(4, 16)
    a, b = cm.featurize(f, pt.Target("x86-avx2")), cm.featurize(f, pt.Target("x86-avx512"))
    differ = {n for n, x, y in zip(cm.FEATURE_NAMES, a, b) if x != y}
    assert {"vector_lanes", "vector_registers", "log_l1", "log_l2", "log_l3"} <= differ
    assert differ <= {
        "vector_lanes", "vector_registers", "log_l1", "log_l2", "log_l3",
        "vector_extent_per_lane",
    }  # fmt: skip
    names = dict(zip(cm.FEATURE_NAMES, b))
    assert (names["vector_lanes"], names["vector_registers"]) == (16, 32)


def test_features_see_the_schedule():
    base = cm.featurize(_matmul(4, 16), TARGET)
    names = list(cm.FEATURE_NAMES)
    par = cm.featurize(_matmul(4, 16, par=True), TARGET)
    assert par[names.index("log_parallel_extent")] > base[names.index("log_parallel_extent")]
    novec = cm.featurize(_matmul(4, 16, vec=False), TARGET)
    assert novec[names.index("l0_kind_vectorized")] == 0.0
    other = cm.featurize(_matmul(8, 8), TARGET)
    assert not np.array_equal(base, other)


@pytest.mark.parametrize(
    "name, args, knob, values, feature",
    [  # the exp / erf implementations, and B packed or read in place
        ("softmax", (64, 256), "exp_impl", ("libm", "poly"), "log_scalar_calls"),
        ("dense_bias_gelu", (32, 64, 64), "erf_impl", ("libm", "rational"), "log_scalar_calls"),
        ("matmul", (64, 64, 64), "pack_b", (1, 0), "log_other_store_bytes"),
    ],
)
def test_features_see_scalar_math_calls_and_packing(name, args, knob, values, feature):
    """Each pair's C differed, its feature vectors did not: the shipped model ranked a
    softmax of libm's expf (29 ms in the records) with the polynomial one's (4 ms)."""
    import autotune as at

    task = at.Task(name, args, target="x86-avx512")
    base = task.config_space.default_config().to_json()
    more, less = (task.featurize({**base, knob: v}) for v in values)
    i = list(cm.FEATURE_NAMES).index(feature)
    assert more[i] > less[i]


def test_features_see_inside_tensor_intrinsics():
    """A micro-kernel's call counts as the loops it computes: attention's register tile
    rows (``mr_s``) changed the C, not the features (209 records of one x86-amx log had
    41 distinct vectors), and its products were no flops at all."""
    import autotune as at
    from cost_models.features import intrin_nest
    from pypto.loop_ir import For, IntrinCall, walk_stmts

    task = at.Task("attention", (1, 1, 256, 64), target="x86-avx512")
    base = task.config_space.default_config().to_json()
    assert base["ukernel"] == 1
    names = list(cm.FEATURE_NAMES)
    a, b = (task.featurize({**base, "mr_s": m}) for m in (2, 8))
    i = names.index("l1_log_extent")  # the unrolled rows, inside the vectorized columns
    assert (a[i], b[i]) == (pytest.approx(np.log2(3)), pytest.approx(np.log2(9)))
    flops = names.index("log_flops")
    plain = task.featurize({**base, "ukernel": 0})  # the same products as plain loops
    assert b[flops] == pytest.approx(plain[flops], abs=0.01)
    s, args = task.instantiate(task.config_space.config({**base, "mr_s": 8}))
    call = next(x for x in walk_stmts(pt.lower(s, args).body) if isinstance(x, IntrinCall))
    nest, loops = intrin_nest(call), []
    while isinstance(nest, For):
        loops.append((nest.extent.value, nest.kind))
        nest = nest.body
    assert loops == [(64, "serial"), (8, "unrolled"), (32, "vectorized")]  # k, i, j
    out = call.operands[-1].buffer
    assert nest.buffer is out and {x.buffer.name for x in walk(nest.value)
                                   if isinstance(x, Load)} == {out.name, "Q", "KT"}  # fmt: skip


def _synthetic(n=200, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.random((n, cm.N_FEATURES)).astype(np.float32)
    y = 3.0 * X[:, 5] + X[:, 17] ** 2 + 0.01 * rng.random(n)  # an obvious ranking
    return X, y


def _spearman(a, b):
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return np.corrcoef(ra, rb)[0, 1]


@pytest.mark.parametrize("objective", ["rank", "reg"])
def test_fit_predict_recovers_a_ranking(objective):
    X, y = _synthetic(400)
    model = cm.XGBoostCostModel(TARGET, objective=objective).fit(X[:300], y[:300])
    assert _spearman(model.predict(X[300:]), y[300:]) > 0.9


def test_save_load_round_trip_and_schema_refusal(tmp_path):
    X, y = _synthetic()
    model = cm.XGBoostCostModel(TARGET).fit(X, y)
    path = str(tmp_path / "m.json")
    model.save(path)
    again = cm.XGBoostCostModel.load(path)
    np.testing.assert_allclose(again.predict(X), model.predict(X), rtol=1e-6)
    meta = json.load(open(path))
    meta["schema"] = "pypto-features-v0"
    json.dump(meta, open(path, "w"))
    with pytest.raises(cm.SchemaError, match="trained on features 'pypto-features-v0'"):
        cm.XGBoostCostModel.load(path)
    with pytest.raises(cm.SchemaError, match=rf"expected features of shape \(n, {cm.N_FEATURES}\)"):
        model.predict(X[:, :10])


def test_a_booster_of_another_width_under_a_current_header_is_refused_at_load(tmp_path):
    """The header names this pypto's features, the booster inside was trained on fewer:
    refused when loaded, by name, not as an xgboost error at the first prediction."""
    import xgboost as xgb

    X, y = _synthetic()
    path = str(tmp_path / "m.json")
    cm.XGBoostCostModel(TARGET).fit(X, y).save(path)
    narrow = xgb.train({"objective": "reg:squarederror"}, xgb.DMatrix(X[:, :7], label=y), 2)
    meta = json.load(open(path))
    meta["booster"] = narrow.save_raw(raw_format="json").decode()
    json.dump(meta, open(path, "w"))
    with pytest.raises(cm.SchemaError, match=f"a booster of 7 features, not the {cm.N_FEATURES}"):
        cm.XGBoostCostModel.load(path)


def test_save_writes_through_a_fresh_name_not_a_planted_symlink(tmp_path):
    """In a shared directory another user could plant ``m.json.tmp`` as a symlink to one
    of ours: saving must not write through it."""
    X, y = _synthetic()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "m.json.tmp").symlink_to(victim)
    path = tmp_path / "m.json"
    cm.XGBoostCostModel(TARGET).fit(X, y).save(str(path))
    assert victim.read_text() == "precious" and not path.is_symlink()
    assert cm.XGBoostCostModel.load(str(path)).predict(X).shape == (len(X),)


def test_load_into_a_model_as_autotvm_and_bad_files_and_labels(tmp_path):
    """``model.load(path)`` (AutoTVM's instance form) fills that model; a file that is
    JSON but not a model, and labels that are not finite, are refused by name."""
    X, y = _synthetic()
    path = str(tmp_path / "m.json")
    cm.XGBoostCostModel(TARGET).fit(X, y).save(path)
    model = cm.XGBoostCostModel("host")
    assert model.target == pt.Target("host").key
    assert model.load(path) is model and model.trained and model.target == TARGET.key
    np.testing.assert_allclose(model.predict(X), cm.XGBoostCostModel.load(path).predict(X))
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(cm.SchemaError, match="list.json is not a saved pypto cost model"):
        cm.XGBoostCostModel.load(str(tmp_path / "list.json"))
    y[3] = np.nan
    with pytest.raises(ValueError, match="fit: label 3 is nan; labels must be finite"):
        model.fit(X, y)


def test_grouped_fit_ranks_within_each_workload():
    X, y = _synthetic(300, seed=1)
    y[100:] *= 1000.0  # a second workload on another scale
    model = cm.XGBoostCostModel(TARGET).fit(X, y, group=[100, 200])
    assert _spearman(model.predict(X), y / np.where(np.arange(300) < 100, 1, 1000)) > 0.9
    with pytest.raises(ValueError, match="group sizes add up to 10"):
        model.fit(X, y, group=[5, 5])


def test_untrained_model_refuses_to_predict():
    with pytest.raises(RuntimeError, match="not trained"):
        cm.XGBoostCostModel(TARGET).predict(np.zeros((1, cm.N_FEATURES)))
