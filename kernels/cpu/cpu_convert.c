/* Element conversions for the CPU GEMMs.
 *
 * Widening f16 runs on every packed block of B and every block of 2:4
 * values, so it uses the F16C instruction where the CPU has it; the
 * result is the same exact value mfma_f16_to_f32 gives (only the payload
 * of a signalling NaN may differ, which no GEMM result depends on).
 * Narrowing the output happens once per element of D, so it stays on the
 * shared round-to-nearest-even converters of mfma_dtype.h. */
#include <string.h>

#include "cpu_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

__attribute__((target("avx,f16c"))) static void f16_to_f32_f16c(const uint16_t *src,
								 size_t count, float *dst)
{
	size_t i = 0;
	for (; i + 8 <= count; i += 8) {
		__m128i h = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
		_mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
	}
	for (; i < count; i++)
		dst[i] = mfma_f16_to_f32(src[i]);
}

static int have_f16c(void)
{
	return __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
}
#endif

static void f16_to_f32(const uint16_t *src, size_t count, float *dst)
{
#if defined(__x86_64__) && defined(__GNUC__)
	if (have_f16c()) {
		f16_to_f32_f16c(src, count, dst);
		return;
	}
#endif
	for (size_t i = 0; i < count; i++)
		dst[i] = mfma_f16_to_f32(src[i]);
}

/* bf16 is the upper half of an f32, so widening is a shift; the fixed
 * inner trip count lets the compiler vectorise it. */
static void bf16_to_f32(const uint16_t *src, size_t count, float *dst)
{
	size_t i = 0;
	for (; i + 16 <= count; i += 16) {
		uint32_t w[16];
		for (int j = 0; j < 16; j++)
			w[j] = (uint32_t)src[i + j] << 16;
		memcpy(dst + i, w, sizeof(w));
	}
	for (; i < count; i++)
		dst[i] = mfma_bf16_to_f32(src[i]);
}

void cpu_cvt_to_f32(const void *src, enum mfma_dtype t, size_t count, float *dst)
{
	switch (t) {
	case MFMA_DT_F32:
		memcpy(dst, src, count * sizeof(float));
		break;
	case MFMA_DT_F16:
		f16_to_f32(src, count, dst);
		break;
	case MFMA_DT_BF16:
		bf16_to_f32(src, count, dst);
		break;
	default:
		/* Integer inputs never take a float path (cpu_gemm_run routes them). */
		memset(dst, 0, count * sizeof(float));
		break;
	}
}

void cpu_cvt_from_f32(const float *src, enum mfma_dtype t, size_t count, void *dst)
{
	switch (t) {
	case MFMA_DT_F32:
		memmove(dst, src, count * sizeof(float));
		break;
	case MFMA_DT_F16: {
		uint16_t *d = dst;
		for (size_t i = 0; i < count; i++)
			d[i] = mfma_f32_to_f16(src[i]);
		break;
	}
	case MFMA_DT_BF16: {
		uint16_t *d = dst;
		for (size_t i = 0; i < count; i++)
			d[i] = mfma_f32_to_bf16(src[i]);
		break;
	}
	default:
		break;
	}
}
