/* Peak of the dot-product instructions the int8 and bfloat16 kernels use.
 *
 *   double peak_dot_gops(int kind, long iters)   all OpenMP threads; -1 if not built in
 *     kind 0: vpdpbusd zmm (64 u8 x s8 products into 16 int32: 128 ops)
 *     kind 1: vdpbf16ps zmm (32 bf16 pairs into 16 float32: 64 flops)
 *     kind 2: vfmadd231ps zmm (16 lanes: 32 flops), the float32 reference
 *
 * Each thread keeps 24 independent accumulators (more than latency x throughput
 * on current x86 cores: 12 were too few on Zen 5 for vpdpbusd), written as
 * inline assembly so every accumulator stays in its register.
 */
#include <omp.h>

#define REP24(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) \
    X(12) X(13) X(14) X(15) X(16) X(17) X(18) X(19) X(20) X(21) X(22) X(23)

#if defined(__AVX512F__)
#include <immintrin.h>
#define DECL(k) __m512i acc##k = _mm512_set1_epi32(0x3f800000 + k); /* 1.0f and up */
#define SINK(k) s += _mm512_reduce_add_epi32(acc##k);
#define LOOP(INSN)                                                              \
    for (long it = 0; it < iters; ++it) {                                       \
        REP24(STEP_##INSN)                                                      \
    }
#define STEP_DPBUSD(k) __asm__ volatile("vpdpbusd %2, %1, %0" : "+v"(acc##k) : "v"(x), "v"(y));
#define STEP_DPBF16(k) __asm__ volatile("vdpbf16ps %2, %1, %0" : "+v"(acc##k) : "v"(x), "v"(y));
#define STEP_FMA(k) __asm__ volatile("vfmadd231ps %2, %1, %0" : "+v"(acc##k) : "v"(x), "v"(y));

double peak_dot_gops(int kind, long iters) {
#if !defined(__AVX512VNNI__)
    if (kind == 0) return -1.0;
#endif
#if !defined(__AVX512BF16__)
    if (kind == 1) return -1.0;
#endif
    static const double ops[3] = {128.0, 64.0, 32.0};
    if (kind < 0 || kind > 2) return -1.0;
    double t0 = 0.0, t1 = 0.0;
    long sink = 0;
#pragma omp parallel reduction(+ : sink)
    {
        const __m512i x = _mm512_set1_epi8(1), y = _mm512_set1_epi8(0);
        REP24(DECL)
#pragma omp barrier
#pragma omp master
        t0 = omp_get_wtime();
        if (kind == 0) {
#if defined(__AVX512VNNI__)
            LOOP(DPBUSD)
#endif
        } else if (kind == 1) {
#if defined(__AVX512BF16__)
            LOOP(DPBF16)
#endif
        } else {
            LOOP(FMA)
        }
#pragma omp barrier
#pragma omp master
        t1 = omp_get_wtime();
        long s = 0;
        REP24(SINK)
        sink += s;
    }
    volatile long keep = sink;
    (void)keep;
    return ops[kind] * 24.0 * (double)iters * omp_get_max_threads() / (t1 - t0) / 1e9;
}
#else
double peak_dot_gops(int kind, long iters) {
    (void)kind;
    (void)iters;
    return -1.0;
}
#endif
