"""Attention at new prompt lengths (``autotune.torch_prefill``): after a layer shape's
first two lengths, a length without a module of its own runs its bucket's module; the
results are SDPA's."""

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import numpy as np  # noqa: E402

import autotune as at  # noqa: E402
import autotune.torch  # noqa: E402, F401  (registers the operators)
import pypto as pt  # noqa: E402
from autotune import torch_prefill  # noqa: E402
from autotune.space import Config  # noqa: E402
from autotune.templates.attention import _attention_ref, sdpa_parts  # noqa: E402
from autotune.torch_prefill import bucket  # noqa: E402

attention = torch.ops.pypto.attention


def rows_of(mod) -> int:
    """The queries a module of the attention template computes (its Q's rows)."""
    (q,) = [p for p in mod.signature.params if p.name == "Q"]
    return q.shape[2]


def has_mask(mod) -> bool:
    return any(p.name == "M" for p in mod.signature.params)


def keys_bound_at_call(mod) -> bool:
    return [v.name for v in mod.signature.size_vars] == ["kv_len"]


def qkv(S, Sk=None, *, B=1, H=2, Hk=None, D=16, Dv=None, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    Sk, Hk, Dv = Sk or S, Hk or H, Dv or D
    shapes = ((B, H, S, D), (B, Hk, Sk, D), (B, Hk, Sk, Dv))
    return [torch.randn(s, generator=g).to(dtype) for s in shapes]


def sdpa(q, k, v, causal):
    gqa = q.shape[1] != k.shape[1]
    want = F.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), is_causal=causal, enable_gqa=gqa
    )
    return want.to(q.dtype)


def test_bucket_sizes():
    """Multiples of 16 up to 128, then eight sizes an octave: at most an eighth
    longer than the length, never shorter, each bucket its own bucket."""
    assert [bucket(n) for n in (1, 16, 17, 77, 128, 129, 197, 256, 257, 1000, 1024, 1025)] == [
        16, 16, 32, 80, 128, 144, 208, 256, 288, 1024, 1024, 1152,
    ]  # fmt: skip
    for n in range(1, 5000):
        b = bucket(n)
        assert n <= b and b % 16 == 0 and bucket(b) == b
        assert n <= 128 or b <= n * 9 / 8


@pytest.mark.parametrize("causal", [True, False])
def test_new_lengths_run_their_buckets_module(kernels, causal):
    """The first two lengths (40, 50) are built as they are; 23 then runs the module of
    32 rows (not causal: the keys' count a size up to 32), three times with new data;
    40 keeps its module; 32, a bucket size, is built as it is. Every result is SDPA's."""
    seen = []
    for n, seed in ((40, 0), (50, 6), (23, 1), (40, 2), (23, 3), (23, 4), (32, 5)):
        q, k, v = qkv(n, seed=seed)
        torch.testing.assert_close(attention(q, k, v, causal), sdpa(q, k, v, causal))
        seen.append(kernels[-1])
    assert [rows_of(m) for m in seen] == [40, 50, 32, 40, 32, 32, 32]
    assert seen[0] is seen[3] and seen[2] is seen[4] is seen[5]
    dynamic = [keys_bound_at_call(m) for m in seen]
    assert dynamic == [False, False, not causal, False, not causal, not causal, False]
    assert not any(has_mask(m) for m in seen)
    assert (seen[6] is seen[2]) == causal  # causal: 32 is 23's bucket


@pytest.mark.parametrize(
    "case",
    [
        dict(H=4, Hk=2, Dv=24),  # grouped-query heads, a value dim of its own
        dict(B=2, dtype=torch.float64),
        dict(dtype=torch.bfloat16),  # (a bfloat16 dot's tiles where the target has one)
        dict(strided=True),  # k and v views of a longer cache, transposed
        dict(Sk=53),  # more keys than queries
    ],
    ids=["gqa-dv", "float64-B2", "bfloat16", "strided", "cross"],
)
@pytest.mark.parametrize("causal", [True, False])
def test_bucketed_calls_take_every_argument_form(kernels, monkeypatch, case, causal):
    """A bucketed call (here from the first length on) of every form the operator
    takes: SDPA's result from the bucket's module."""
    monkeypatch.setattr(torch_prefill, "AS_THEY_ARE", 0)
    case = dict(case)
    strided, Sk = case.pop("strided", False), case.pop("Sk", None)
    tol = dict(rtol=2e-2, atol=2e-2) if case.get("dtype") == torch.bfloat16 else {}
    q, k, v = qkv(21, None if Sk is None else Sk + 21, **case)
    if strided:  # [B, H, S, D] views of [B, S + 5, H, D] caches
        caches = [torch.cat([t, t[:, :, :5]], 2).transpose(1, 2).contiguous() for t in (k, v)]
        k, v = (c.transpose(1, 2)[:, :, :21] for c in caches)
    got = attention(q, k, v, causal, None, q.shape[1] != k.shape[1])
    torch.testing.assert_close(got, sdpa(q, k, v, causal), **tol)
    assert rows_of(kernels[-1]) == 32 and keys_bound_at_call(kernels[-1]) == (not causal)


def test_recorded_and_masked_lengths_keep_their_own_modules(kernels):
    """A record of the exact workload builds that length as it is; a mask of its own
    per query is built per shape; both give SDPA's results."""
    for n in (40, 50):
        q, k, v = qkv(n, seed=n)
        attention(q, k, v, True)
    q, k, v = qkv(27, seed=1)
    ((_, _, args),) = sdpa_parts(1, 2, 27, 16, 2, 27, 16, True, None, "float32")
    task = at.Task("attention", args)
    rec = at.Record(task.workload_key, task.target.key, task.config_space.default_config().values,
                    [1e-4])  # fmt: skip
    with at.apply_history_best([rec]):
        torch.testing.assert_close(attention(q, k, v, True), sdpa(q, k, v, True))
    assert rows_of(kernels[-1]) == 27
    for n in (40, 50, 27):
        q, k, v = qkv(n, seed=n)
        m = torch.rand(1, 1, n, n, generator=torch.Generator().manual_seed(2)) > 0.3
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
        torch.testing.assert_close(attention(q, k, v, False, None, False, m), want)
    assert rows_of(kernels[-1]) == 27 and has_mask(kernels[-1])


@pytest.mark.parametrize("kind", ["bool", "float", "expanded"])
def test_masks_the_queries_share_are_read_in_place(kernels, monkeypatch, kind):
    """A padding mask ([B, 1, 1, S_kv] bool, [1, 1, 1, S_kv] added, or [B, 1, S,
    S_kv] expanded from [B, 1, 1, S_kv]) takes a bucket's module as K and V do, its
    keys a size bound at call: SDPA's results, a row of no keys zero as PyTorch's."""
    monkeypatch.setattr(torch_prefill, "AS_THEY_ARE", 0)
    g = torch.Generator().manual_seed(4)
    q, k, v = qkv(21, 27, B=2)
    if kind == "float":
        m = torch.randn(1, 1, 1, 27, generator=g)
    else:
        m = torch.rand(2, 1, 1, 27, generator=g) > 0.4
        m[1] = False  # the second sequence: no key at all
        m = m.expand(2, 1, 21, 27) if kind == "expanded" else m
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=m).nan_to_num(0.0)
    torch.testing.assert_close(attention(q, k, v, False, None, False, m), want)
    mod = kernels[-1]
    assert rows_of(mod) == 32 and has_mask(mod) and keys_bound_at_call(mod)


TARGETS = ["host", "generic", "x86-avx2", "x86-avx512", "x86-amx", "aarch64-neon"]


@pytest.mark.parametrize("mask", [None, "bool:b11k"])
@pytest.mark.parametrize("target", TARGETS)
def test_key_count_bound_at_call_on_every_target(target, mask):
    """The template with its key count a size (``_any_keys``), in each form the target
    offers, bfloat16 on AMX's tiles, with a padding mask or none: where the machine
    runs it, 1, 9 and 32 keys of a 32-key bound against the reference; elsewhere its
    C takes the size."""
    t = pt.Target(target)
    dtype = "bfloat16" if target == "x86-amx" else "float32"
    args = (1, 2, 24, 32, False, None, dtype, 32, None, False, None, None, mask)
    task = at.Task("attention", args, target=t)
    knob = task.config_space.knobs.get("form")
    for form in knob.values if knob else [None]:
        cfg = task.config_space.default_config()
        cfg = Config(cfg.space, {**cfg.values, **({"form": form} if form else {})})
        mod = torch_prefill._any_keys(task.template, cfg, args, t) if t.can_run() else None
        if mod is None:
            s, tensors = task.template.func(cfg, *args[:7], pt.var("kv_len"), 32, *args[9:])
            assert "int64_t kv_len" in pt.build(s, tensors, target=t, emit_only=True)
            continue
        assert [v.name for v in mod.signature.size_vars] == ["kv_len"]
        g = np.random.default_rng(3)
        q = g.standard_normal((1, 2, 24, 32)).astype(np.float32)
        for n in (1, 9, 32):
            k, v = (g.standard_normal((1, 2, n, 32)).astype(np.float32) for _ in range(2))
            m = [g.random((1, 1, 1, n)) > 0.3] if mask else []
            got = mod(q, k, v, *m)
            want = _attention_ref(q, k, v, *m, causal=False, scale=None)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6, err_msg=f"{form} {n}")
