"""A decoder's attention steps (``autotune.torch_decode``): one module for every number
of keys, its results SDPA's; causal and masked calls keep their per-shape modules."""

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import autotune.torch  # noqa: E402, F401  (registers the operators)
import autotune.torch_decode as torch_decode  # noqa: E402
from autotune.templates import attention_decode  # noqa: E402

ops = torch.ops.pypto


def _sdpa(q, k, v, **kw):
    """SDPA in float64 (the grouped heads repeated), rounded to q's dtype."""
    g = q.shape[1] // k.shape[1]
    k64, v64 = (t.double().repeat_interleave(g, dim=1) for t in (k, v))
    return F.scaled_dot_product_attention(q.double(), k64, v64, **kw).to(q.dtype)


TOL = {torch.float32: 2e-6, torch.float64: 1e-12, torch.bfloat16: 2e-2, torch.float16: 2e-3}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_every_cache_length_runs_one_module(kernels, dtype):
    """Steps of 1 to 70 keys (below, at and past a vector's lanes), grouped-query heads
    and a value dim of its own, two batch elements and two queries per head: one
    module, built once, runs them all; each result is SDPA's."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 2, 16, generator=g).to(dtype)
    for L in (1, 3, 16, 17, 40, 70, 17):
        k = (3 * torch.randn(2, 2, L, 16, generator=g)).to(dtype)
        v = torch.randn(2, 2, L, 8, generator=g).to(dtype)
        got = ops.attention(q, k, v, False, None, True)
        want = _sdpa(q, k, v, enable_gqa=False)
        assert got.shape == want.shape and got.dtype == dtype
        torch.testing.assert_close(got, want, rtol=TOL[dtype], atol=TOL[dtype])
    assert len(kernels) == 7 and len({id(m) for m in kernels}) == 1
    assert kernels[0].name == "attention_decode"
    assert [str(v) for v in kernels[0].signature.size_vars] == ["kv_len"]


def test_a_scale_and_a_strided_cache(kernels):
    """A given scale; K and V as a [B, L, H, D] cache's transposes (copied contiguous):
    SDPA's results, from the same module."""
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 4, 1, 32, generator=g)
    cache = torch.randn(1, 50, 4, 32, generator=g)
    for L in (9, 50):
        kv = cache[:, :L].transpose(1, 2)
        got = ops.attention(q, kv, kv, False, 0.3)
        torch.testing.assert_close(got, _sdpa(q, kv, kv, scale=0.3), rtol=2e-6, atol=2e-6)
    assert len({id(m) for m in kernels}) == 1 and kernels[0].name == "attention_decode"


def test_causal_masked_and_long_calls_keep_their_modules(kernels):
    """is_causal, a mask, or more queries than the decode form takes: the per-shape
    template ``attention``, SDPA's results."""
    g = torch.Generator().manual_seed(2)
    q = torch.randn(1, 2, 1, 16, generator=g)
    k, v = torch.randn(1, 2, 9, 16, generator=g), torch.randn(1, 2, 9, 16, generator=g)
    mask = torch.rand(1, 1, 1, 9, generator=g) > 0.3
    torch.testing.assert_close(ops.attention(q, k, v, True), _sdpa(q, k, v, is_causal=True))
    got = ops.attention(q, k, v, False, None, False, mask)
    torch.testing.assert_close(got, _sdpa(q, k, v, attn_mask=mask))
    q6 = torch.randn(1, 2, attention_decode.DECODE_QUERIES + 1, 16, generator=g)
    torch.testing.assert_close(ops.attention(q6, k, v), _sdpa(q6, k, v))
    assert [m.name for m in kernels] == ["attention"] * 3


def test_a_config_of_another_form_builds_per_shape(kernels, monkeypatch):
    """Where the config for the nominal key count is not the decode form (a record may
    choose another), each shape gets the template's own module, as before."""
    monkeypatch.setattr(attention_decode, "chosen", lambda cfg: False)
    monkeypatch.setattr(torch_decode, "NOMINAL_KEYS", torch_decode.NOMINAL_KEYS + 1)
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, 2, 1, 16, generator=g)
    for L in (5, 6):
        k, v = torch.randn(1, 2, L, 16, generator=g), torch.randn(1, 2, L, 16, generator=g)
        torch.testing.assert_close(ops.attention(q, k, v), _sdpa(q, k, v))
    assert [m.name for m in kernels] == ["attention"] * 2
    assert kernels[0] is not kernels[1]
