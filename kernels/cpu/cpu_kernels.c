/* The micro-kernel families: cpu_kernel_body.h compiled for AVX-512, for
 * AVX2+FMA and for portable C, and the choice among them at run time.
 *
 * Each family lists its tile shapes widest panel first.  The shapes keep
 * MR x NV accumulators at 8 to 16 vectors: enough independent FMA chains
 * to cover the FMA latency, with room left for the B loads and the two
 * broadcasts of each row. */
#include <stdbool.h>
#include <string.h>

#include "cpu_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define CPU_HAVE_X86 1
#include <immintrin.h>
#else
#define CPU_HAVE_X86 0
#endif

#if CPU_HAVE_X86

/* --- AVX-512 (16 lanes) ------------------------------------------------ */
#define KFAM avx512
#define KTARGET __attribute__((target("avx512f,avx2,fma")))
#define KVL 16
typedef __m512 avx512_vf;
typedef __m512i avx512_vi;
#define kvf avx512_vf
#define kvi avx512_vi
#define VF_ZERO() _mm512_setzero_ps()
#define VF_SET1(x) _mm512_set1_ps(x)
#define VF_LOAD(p) _mm512_loadu_ps(p)
#define VF_STORE(p, v) _mm512_storeu_ps((p), (v))
#define VF_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define VF_MUL(a, b) _mm512_mul_ps((a), (b))
#define VF_ADD(a, b) _mm512_add_ps((a), (b))
#define VI_ZERO() _mm512_setzero_si512()
#define VI_SET1(x) _mm512_set1_epi32(x)
#define VI_LOAD(p) _mm512_loadu_si512((const void *)(p))
#define VI_STORE(p, v) _mm512_storeu_si512((void *)(p), (v))
#define VI_MADD(a, b, c) _mm512_add_epi32(_mm512_mullo_epi32((a), (b)), (c))
#define VI_ADD(a, b) _mm512_add_epi32((a), (b))
#define KSHAPES(X) X(4, 4) X(6, 2) X(8, 1)
#include "cpu_kernel_body.h"

/* --- AVX2 + FMA (8 lanes, 16 registers) -------------------------------- */
#define KFAM avx2
#define KTARGET __attribute__((target("avx2,fma")))
#define KVL 8
typedef __m256 avx2_vf;
typedef __m256i avx2_vi;
#define kvf avx2_vf
#define kvi avx2_vi
#define VF_ZERO() _mm256_setzero_ps()
#define VF_SET1(x) _mm256_set1_ps(x)
#define VF_LOAD(p) _mm256_loadu_ps(p)
#define VF_STORE(p, v) _mm256_storeu_ps((p), (v))
#define VF_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define VF_MUL(a, b) _mm256_mul_ps((a), (b))
#define VF_ADD(a, b) _mm256_add_ps((a), (b))
#define VI_ZERO() _mm256_setzero_si256()
#define VI_SET1(x) _mm256_set1_epi32(x)
#define VI_LOAD(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define VI_STORE(p, v) _mm256_storeu_si256((__m256i *)(void *)(p), (v))
#define VI_MADD(a, b, c) _mm256_add_epi32(_mm256_mullo_epi32((a), (b)), (c))
#define VI_ADD(a, b) _mm256_add_epi32((a), (b))
#define KSHAPES(X) X(3, 4) X(4, 2) X(8, 1)
#include "cpu_kernel_body.h"

#endif /* CPU_HAVE_X86 */

/* --- Portable C (GCC vector extensions, 4 lanes) ----------------------- */
#define KFAM generic
#define KTARGET
#define KVL 4
typedef float generic_vf __attribute__((vector_size(16)));
/* Unsigned so that wrapping sums are defined behaviour. */
typedef uint32_t generic_vi __attribute__((vector_size(16)));
#define kvf generic_vf
#define kvi generic_vi

static inline generic_vf generic_loadf(const float *p)
{
	generic_vf v;
	memcpy(&v, p, sizeof(v));
	return v;
}

static inline generic_vi generic_loadi(const int32_t *p)
{
	generic_vi v;
	memcpy(&v, p, sizeof(v));
	return v;
}

#define VF_ZERO() ((generic_vf){ 0, 0, 0, 0 })
#define VF_SET1(x) ((generic_vf){ (x), (x), (x), (x) })
#define VF_LOAD(p) generic_loadf(p)
#define VF_STORE(p, v)                                                                      \
	do {                                                                                \
		generic_vf v_ = (v);                                                        \
		memcpy((p), &v_, sizeof(v_));                                               \
	} while (0)
#define VF_FMA(a, b, c) ((a) * (b) + (c))
#define VF_MUL(a, b) ((a) * (b))
#define VF_ADD(a, b) ((a) + (b))
#define VI_ZERO() ((generic_vi){ 0, 0, 0, 0 })
#define VI_SET1(x) ((generic_vi){ (uint32_t)(x), (uint32_t)(x), (uint32_t)(x), (uint32_t)(x) })
#define VI_LOAD(p) generic_loadi(p)
#define VI_STORE(p, v)                                                                      \
	do {                                                                                \
		generic_vi v_ = (v);                                                        \
		memcpy((p), &v_, sizeof(v_));                                               \
	} while (0)
#define VI_MADD(a, b, c) ((a) * (b) + (c))
#define VI_ADD(a, b) ((a) + (b))
#define KSHAPES(X) X(2, 4) X(4, 2) X(8, 1)
#include "cpu_kernel_body.h"

static bool has_avx512(void)
{
#if CPU_HAVE_X86
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
	       __builtin_cpu_supports("fma");
#else
	return false;
#endif
}

static bool has_avx2(void)
{
#if CPU_HAVE_X86
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
	return false;
#endif
}

unsigned cpu_kfamily_all(const struct cpu_kfamily **out, unsigned max)
{
	unsigned n = 0;
#if CPU_HAVE_X86
	if (has_avx512() && n < max)
		out[n++] = &avx512_family;
	if (has_avx2() && n < max)
		out[n++] = &avx2_family;
#endif
	if (n < max)
		out[n++] = &generic_family;
	return n;
}

const struct cpu_kfamily *cpu_kfamily_best(void)
{
	const struct cpu_kfamily *f[1];
	cpu_kfamily_all(f, 1);
	return f[0];
}
