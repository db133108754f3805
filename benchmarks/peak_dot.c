/* Peak of the multiply-add instructions the int8, bfloat16 and float32 kernels use.
 *
 *   double peak_dot_gops(int kind, long iters)   all OpenMP threads; -1 if not built in
 *     kind 0: vpdpbusd zmm (64 u8 x s8 products into 16 int32: 128 ops)
 *     kind 1: vdpbf16ps zmm (32 bf16 pairs into 16 float32: 64 flops)
 *     kind 2: vfmadd231ps zmm (16 lanes: 32 flops), the float32 reference
 *     kind 3: vpmaddwd + vpaddd ymm (16 int16 products into 8 int32: 32 ops), AVX2's int8
 *     kind 4: vfmadd231ps ymm (8 lanes: 16 flops), AVX2's float32
 *
 * Each thread keeps 24 independent accumulators (more than latency x throughput
 * on current x86 cores: 12 were too few on Zen 5 for vpdpbusd), written as
 * inline assembly so every accumulator stays in its register (the ymm kinds, with
 * AVX2's 16 registers, keep 12).
 */
#include <omp.h>

#define REP24(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) \
    X(12) X(13) X(14) X(15) X(16) X(17) X(18) X(19) X(20) X(21) X(22) X(23)
#define REP12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

#if defined(__AVX2__)
#include <immintrin.h>

static const double OPS[5] = {128.0, 64.0, 32.0, 32.0, 16.0};

#define YMM_STEP_MADD(k) {                                                     \
    __m256i t;                                                                 \
    __asm__ volatile("vpmaddwd %2, %1, %0" : "=x"(t) : "x"(x), "x"(y));        \
    __asm__ volatile("vpaddd %1, %0, %0" : "+x"(acc##k) : "x"(t));             \
}
#define YMM_STEP_FMA(k) __asm__ volatile("vfmadd231ps %2, %1, %0" : "+x"(facc##k) : "x"(fx), "x"(fy));
#define YMM_DECL(k) __m256i acc##k = _mm256_set1_epi32(k); __m256 facc##k = _mm256_set1_ps(k);
#define YMM_SINK(k) s += _mm256_extract_epi32(acc##k, 0) + (long)_mm256_cvtss_f32(facc##k);

/* kinds 3 and 4: ymm, 12 accumulators per thread */
static long ymm_loop(int kind, long iters) {
    const __m256i x = _mm256_set1_epi16(1), y = _mm256_set1_epi16(0);
    const __m256 fx = _mm256_set1_ps(1.0f), fy = _mm256_set1_ps(0.0f);
    REP12(YMM_DECL)
    if (kind == 3) {
        for (long it = 0; it < iters; ++it) { REP12(YMM_STEP_MADD) }
    } else {
        for (long it = 0; it < iters; ++it) { REP12(YMM_STEP_FMA) }
    }
    long s = 0;
    REP12(YMM_SINK)
    return s;
}

#if defined(__AVX512F__)
#define DECL(k) __m512i acc##k = _mm512_set1_epi32(0x3f800000 + k); /* 1.0f and up */
#define SINK(k) s += _mm512_reduce_add_epi32(acc##k);
#define STEP_DPBUSD(k) __asm__ volatile("vpdpbusd %2, %1, %0" : "+v"(acc##k) : "v"(x), "v"(y));
#define STEP_DPBF16(k) __asm__ volatile("vdpbf16ps %2, %1, %0" : "+v"(acc##k) : "v"(x), "v"(y));
#define STEP_FMA(k) __asm__ volatile("vfmadd231ps %2, %1, %0" : "+v"(acc##k) : "v"(x), "v"(y));
#define LOOP(INSN)                                                              \
    for (long it = 0; it < iters; ++it) {                                       \
        REP24(STEP_##INSN)                                                      \
    }

/* kinds 0-2: zmm, 24 accumulators per thread */
static long zmm_loop(int kind, long iters) {
    const __m512i x = _mm512_set1_epi8(1), y = _mm512_set1_epi8(0);
    REP24(DECL)
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
    long s = 0;
    REP24(SINK)
    return s;
}
#endif

static int built(int kind) {
#if !defined(__AVX512VNNI__)
    if (kind == 0) return 0;
#endif
#if !defined(__AVX512BF16__)
    if (kind == 1) return 0;
#endif
#if !defined(__AVX512F__)
    if (kind < 3) return 0;
#endif
    return kind >= 0 && kind <= 4;
}

double peak_dot_gops(int kind, long iters) {
    if (!built(kind)) return -1.0;
    double t0 = 0.0, t1 = 0.0;
    long sink = 0;
    const int accs = kind >= 3 ? 12 : 24;
#pragma omp parallel reduction(+ : sink)
    {
#pragma omp barrier
#pragma omp master
        t0 = omp_get_wtime();
        long s = 0;
#if defined(__AVX512F__)
        if (kind < 3) s = zmm_loop(kind, iters);
#endif
        if (kind >= 3) s = ymm_loop(kind, iters);
#pragma omp barrier
#pragma omp master
        t1 = omp_get_wtime();
        sink += s;
    }
    volatile long keep = sink;
    (void)keep;
    return OPS[kind] * accs * (double)iters * omp_get_max_threads() / (t1 - t0) / 1e9;
}
#else
double peak_dot_gops(int kind, long iters) {
    (void)kind;
    (void)iters;
    return -1.0;
}
#endif
