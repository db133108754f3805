"""The bfloat16 vector dot kernel (``vdpbf16ps``) with a float32 A (``a_float``): A's
rows rounded to bfloat16 inside the kernel, as attention's P V product reads its
float32 probabilities (``attention_amx``), without a pass of its own."""

from __future__ import annotations


def body(isa, mr: int, nr: int, K: int) -> list[str]:
    """``vdpbf16ps`` with a float32 A: 16 of a row's pairs rounded at a time
    (``vcvtne2ps2bf16``: to nearest even; an A below 2^-126 counts as 0) into one
    register, each pair broadcast from it by a lane permute::

        for kc in K step 32:
          pa[r] = bfloat16(A[r, kc : kc + 32])                  (mr registers)
          for q < 16:  acc[r][v] += dot(permute(pa[r], q), BP[kc / 2 + q, v])
    """
    L, nv = isa.lanes, nr // isa.lanes
    acc = {(r, v): f"c{r}_{v}" for r in range(mr) for v in range(nv)}
    lines = [f"  {isa.acc_type} " + ", ".join(f"{c} = {isa.zero}" for c in acc.values()) + ";"]
    lines.append(f"  for (int64_t kc = 0; kc < {K}; kc += {2 * L}) {{")
    lines += [
        f"    __m512i pa{r} = (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(a + {r} * a0 + kc"
        f" + {L}), _mm512_loadu_ps(a + {r} * a0 + kc));"
        for r in range(mr)
    ]
    for q in range(L):
        lines.append(f"    {{ const uint16_t* bp = b + (kc / 2 + {q}) * b0;")
        lines += [
            f"      __m512 vb{v} = {isa.load.format(p=f'bp + {v * L * 2}')};" for v in range(nv)
        ]
        lines.append(f"      const __m512i ix = _mm512_set1_epi32({q});")
        for r in range(mr):
            lines.append(
                f"      __m512 va{r} = _mm512_castsi512_ps(_mm512_permutexvar_epi32(ix, pa{r}));"
            )
            lines += [
                f"      {acc[r, v]} = {isa.dot.format(acc=acc[r, v], a=f'va{r}', b=f'vb{v}')};"
                for v in range(nv)
            ]
        lines.append("    }")
    lines.append("  }")
    for (r, v), c in acc.items():
        lines.append("  " + isa.store.format(p=f"out + {r} * o0 + {v * L}", v=c))
    return lines
