"""Function-level temporaries of a constant size are kept from one call to the next
(one block per buffer, owned by one call at a time): no page faults for a big
intermediate in every call; a call running beside another gets blocks of its own;
``release_workspace`` (and a collected module) frees them."""

from __future__ import annotations

import threading

import numpy as np

import pypto as pt


def _two_stages(n):
    A = pt.placeholder((n, 256), "float32", name="A")
    T = pt.compute((n, 256), lambda i, j: A[i, j] * 2.0, name="T")  # n KiB: the heap
    k = pt.reduce_axis((0, 256), name="k")
    B = pt.compute((n,), lambda i: pt.sum(T[i, k] + 1.0, axis=k), name="B")
    s = pt.create_schedule(B.op)
    s[T].parallel(T.op.axis[0])
    s[B].parallel(B.op.axis[0])
    return pt.build(s, [A, B])


def test_a_constant_size_temporary_is_kept_and_a_symbolic_one_freed():
    kept = _two_stages(1024).source
    assert "T = (float*)(pt_ws_own ? pt_workspace(0, (size_t)1048576) : pt_alloc(" in kept
    assert "if (pt_ws_own) {" in kept and "  } else {\n    free(T);\n  }" in kept
    freed = _two_stages(pt.var("n")).source
    assert "pt_workspace" not in freed and "free(T);" in freed


def test_calls_from_several_threads_at_once_each_get_the_right_answer():
    mod = _two_stages(1024)
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(30):
            a = rng.standard_normal((1024, 256)).astype("float32")
            out = np.zeros(1024, "float32")
            mod(a, out)
            want = (a.astype("float64") * 2 + 1).sum(axis=1)
            if not np.allclose(out, want, rtol=1e-4, atol=1e-3):
                errors.append(seed)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_released_blocks_come_back_at_the_next_call():
    mod = _two_stages(512)
    a = np.arange(512 * 256, dtype="float32").reshape(512, 256) / 1e4
    want = (a.astype("float64") * 2 + 1).sum(axis=1)
    for _ in range(2):
        out = np.zeros(512, "float32")
        mod(a, out)
        np.testing.assert_allclose(out, want, rtol=1e-5)
        assert mod.release_workspace() is True


def test_a_parallel_loops_heap_scratch_is_allocated_once_per_thread():
    """A row buffer past the stack limit inside a parallel loop (here 16 KiB, computed
    at the row) is one block per thread around the loop, not a malloc and a free per
    iteration; every thread's rows still come out right."""
    n, m = 37, 4096
    A = pt.placeholder((n, m), "float32", name="A")
    T = pt.compute((n, m), lambda i, j: A[i, j] * 3.0, name="T")
    k = pt.reduce_axis((0, m), name="k")
    B = pt.compute((n,), lambda i: pt.sum(T[i, k] * T[i, k], axis=k), name="B")
    s = pt.create_schedule(B.op)
    s[B].parallel(B.op.axis[0])
    s[T].compute_at(s[B], B.op.axis[0])
    mod = pt.build(s, [A, B])
    src = mod.source
    head = "  #pragma omp parallel\n  {\n    float* restrict T = (float*)pt_alloc_or_die(16384);"
    assert head in src and "    #pragma omp for schedule(static)" in src
    assert src.count("pt_alloc_or_die(16384)") == 1 and src.count("free(T);") == 1
    a = np.random.default_rng(0).standard_normal((n, m)).astype(np.float32)
    b = np.full(n, np.nan, np.float32)
    for threads in (1, 2):  # as test_runtime's threads test, the last setting stays 2
        pt.set_num_threads(threads)
        mod(a, b)
        np.testing.assert_allclose(b, ((3 * a.astype(np.float64)) ** 2).sum(1), rtol=1e-4)
