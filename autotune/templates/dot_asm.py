"""The dot instructions as inline assembly, for the kernels of ``dot_ukernels``: gcc's
``vpdpbusd`` builtins copy the accumulator around (and spill a full register tile);
the instruction written out keeps each accumulator in its register."""

ASM = {
    "pt_dpbusd512": """#ifndef PT_DPBUSD512
#define PT_DPBUSD512
static inline __m512i pt_dpbusd512(__m512i acc, __m512i a, __m512i b) {
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}
#endif""",
    "pt_dpbf16512": """#ifndef PT_DPBF16512
#define PT_DPBF16512
static inline __m512 pt_dpbf16512(__m512 acc, __m512 a, __m512 b) {  /* pairs of bf16 */
  __asm__("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}
#endif""",
    "pt_dpbusd256": """#ifndef PT_DPBUSD256
#define PT_DPBUSD256
static inline __m256i pt_dpbusd256(__m256i acc, __m256i a, __m256i b) {
  __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(a), "x"(b));
  return acc;
}
#endif""",
    "pt_madd256": """#ifndef PT_MADD256
#define PT_MADD256
static inline __m256i pt_madd256(__m256i acc, __m256i a, __m256i b) {  /* pairs of int16 */
  __m256i t;
  __asm__("vpmaddwd %3, %2, %1\\n\\tvpaddd %1, %0, %0" : "+x"(acc), "=x"(t) : "x"(a), "x"(b));
  return acc;
}
#endif""",
}
