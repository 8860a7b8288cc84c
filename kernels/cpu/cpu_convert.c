/* Element conversions for the CPU GEMMs.
 *
 * They run on every packed block of B, every block of 2:4 values and
 * every element of D, so f16 uses the F16C instructions where the CPU
 * has them.  Results are bit for bit those of the scalar converters in
 * mfma_dtype.h: widening is exact either way (only the payload of a
 * signalling NaN may differ, which no GEMM result depends on), and
 * narrowing rounds to nearest even either way, with NaN lanes redone by
 * the scalar converter so that even NaN patterns match. */
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

__attribute__((target("avx,f16c"))) static void f32_to_f16_f16c(const float *src, size_t count,
								 uint16_t *dst)
{
	size_t i = 0;
	for (; i + 8 <= count; i += 8) {
		__m256 x = _mm256_loadu_ps(src + i);
		__m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
		_mm_storeu_si128((__m128i *)(void *)(dst + i), h);
		if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)))
			for (size_t j = i; j < i + 8; j++)
				dst[j] = mfma_f32_to_f16(src[j]);
	}
	for (; i < count; i++)
		dst[i] = mfma_f32_to_f16(src[i]);
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

static void f32_to_f16(const float *src, size_t count, uint16_t *dst)
{
#if defined(__x86_64__) && defined(__GNUC__)
	if (have_f16c()) {
		f32_to_f16_f16c(src, count, dst);
		return;
	}
#endif
	for (size_t i = 0; i < count; i++)
		dst[i] = mfma_f32_to_f16(src[i]);
}

/* The same rounding as mfma_f32_to_bf16, branch-free for non-NaN inputs
 * so the fixed-length inner loop vectorises; NaN lanes are redone. */
static void f32_to_bf16(const float *src, size_t count, uint16_t *dst)
{
	size_t i = 0;
	for (; i + 16 <= count; i += 16) {
		uint32_t x[16];
		int nan = 0;
		memcpy(x, src + i, sizeof(x));
		for (int j = 0; j < 16; j++) {
			nan |= (x[j] & 0x7fffffffu) > 0x7f800000u;
			dst[i + j] = (uint16_t)((x[j] + 0x7fffu + ((x[j] >> 16) & 1u)) >> 16);
		}
		if (nan)
			for (size_t j = i; j < i + 16; j++)
				dst[j] = mfma_f32_to_bf16(src[j]);
	}
	for (; i < count; i++)
		dst[i] = mfma_f32_to_bf16(src[i]);
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
	case MFMA_DT_F16:
		f32_to_f16(src, count, dst);
		break;
	case MFMA_DT_BF16:
		f32_to_bf16(src, count, dst);
		break;
	default:
		break;
	}
}
