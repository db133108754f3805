/* Machine peak: FMA throughput and STREAM-style triad bandwidth.
 *
 *   double peak_fma_gflops(long iters)        fp32 GFLOP/s of all OpenMP threads
 *   double peak_triad_gbps(long n, int reps)  a[i] = b[i] + s * c[i], GB/s
 *
 * The FMA loop keeps 12 independent vector accumulators per thread (enough
 * to cover 2 FMA pipes x 4 cycles of latency on current x86 cores); each
 * step is 12 fused multiply-adds of LANES floats (gcc vector extensions,
 * fused by -ffp-contract=fast). The triad counts 3 arrays x 4 bytes per
 * element (the STREAM convention: no write-allocate traffic counted);
 * arrays are far larger than the last-level cache.
 */
#include <omp.h>
#include <stdlib.h>

#define NACC 12
#ifdef __AVX512F__
#define VBYTES 64
#else
#define VBYTES 32
#endif
#define LANES (VBYTES / 4)
typedef float vf __attribute__((vector_size(VBYTES)));

static double now(void) { return omp_get_wtime(); }

double peak_fma_gflops(long iters) {
    double t0 = 0.0, t1 = 0.0;
    float sink = 0.0f;
#pragma omp parallel reduction(+ : sink)
    {
        vf acc[NACC];
        const vf a = (vf){0} + 0.999999f, b = (vf){0} + 1e-7f;
        for (int k = 0; k < NACC; ++k) acc[k] = (vf){0} + (float)k;
#pragma omp barrier
#pragma omp master
        t0 = now();
        for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 12
            for (int k = 0; k < NACC; ++k) acc[k] = acc[k] * a + b;
        }
#pragma omp barrier
#pragma omp master
        t1 = now();
        for (int k = 1; k < NACC; ++k) acc[0] += acc[k];
        for (int l = 0; l < LANES; ++l) sink += acc[0][l];
    }
    volatile float keep = sink;
    (void)keep;
    return 2.0 * LANES * NACC * (double)iters * omp_get_max_threads() / (t1 - t0) / 1e9;
}

double peak_triad_gbps(long n, int reps) {
    float *a = aligned_alloc(64, n * sizeof(float));
    float *b = aligned_alloc(64, n * sizeof(float));
    float *c = aligned_alloc(64, n * sizeof(float));
    if (!a || !b || !c) return -1.0;
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; ++i) {
        a[i] = 0.0f;
        b[i] = 1.0f;
        c[i] = 2.0f;
    }
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        double t0 = now();
#pragma omp parallel for simd schedule(static)
        for (long i = 0; i < n; ++i) a[i] = b[i] + 3.0f * c[i];
        double t = now() - t0;
        if (t < best) best = t;
    }
    volatile float keep = a[n / 2];
    (void)keep;
    free(a);
    free(b);
    free(c);
    return 3.0 * sizeof(float) * (double)n / best / 1e9;
}
