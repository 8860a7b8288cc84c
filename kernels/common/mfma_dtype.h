/* Element types shared by the host code, the CPU kernels and the device
 * backends.  The numeric values match mfma.v1.DType on the wire so a
 * validated wire value can be cast directly. */
#ifndef MFMA_DTYPE_H
#define MFMA_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

enum mfma_dtype {
	MFMA_DT_NONE = 0,
	MFMA_DT_F32 = 1,
	MFMA_DT_F16 = 2,
	MFMA_DT_BF16 = 3,
	MFMA_DT_I8 = 4,
	MFMA_DT_I32 = 5,
};

static inline size_t mfma_dtype_size(enum mfma_dtype t)
{
	switch (t) {
	case MFMA_DT_F32: return 4;
	case MFMA_DT_F16: return 2;
	case MFMA_DT_BF16: return 2;
	case MFMA_DT_I8: return 1;
	case MFMA_DT_I32: return 4;
	default: return 0;
	}
}

static inline const char *mfma_dtype_name(enum mfma_dtype t)
{
	switch (t) {
	case MFMA_DT_F32: return "f32";
	case MFMA_DT_F16: return "f16";
	case MFMA_DT_BF16: return "bf16";
	case MFMA_DT_I8: return "i8";
	case MFMA_DT_I32: return "i32";
	default: return "none";
	}
}

/* Returns MFMA_DT_NONE for an unknown name. */
static inline enum mfma_dtype mfma_dtype_parse(const char *s)
{
	static const enum mfma_dtype all[] = { MFMA_DT_F32, MFMA_DT_F16, MFMA_DT_BF16,
					       MFMA_DT_I8, MFMA_DT_I32 };
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		if (strcmp(s, mfma_dtype_name(all[i])) == 0)
			return all[i];
	return MFMA_DT_NONE;
}

/* The output dtypes a GEMM may produce from its input dtype: i8 gives
 * i32; f32 gives f32; f16 and bf16 give f32 or their own type.  This is
 * the one statement of the rule: the daemon checks it when it validates a
 * request, and every backend runs every pair it allows. */
static inline enum mfma_dtype mfma_out_dtype_default(enum mfma_dtype in)
{
	return in == MFMA_DT_I8 ? MFMA_DT_I32 : MFMA_DT_F32;
}

static inline int mfma_out_dtype_ok(enum mfma_dtype in, enum mfma_dtype out)
{
	switch (in) {
	case MFMA_DT_I8: return out == MFMA_DT_I32;
	case MFMA_DT_F32: return out == MFMA_DT_F32;
	case MFMA_DT_F16:
	case MFMA_DT_BF16: return out == MFMA_DT_F32 || out == in;
	default: return 0;
	}
}

static inline int mfma_dtype_is_float(enum mfma_dtype t)
{
	return t == MFMA_DT_F32 || t == MFMA_DT_F16 || t == MFMA_DT_BF16;
}

/* IEEE binary16 <-> binary32, round to nearest even, with subnormals,
 * infinities and NaN.  Plain bit arithmetic so it builds anywhere. */
static inline float mfma_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t man = h & 0x3ffu;
	uint32_t bits;
	if (exp == 0) {
		if (man == 0) {
			bits = sign;
		} else {
			/* Subnormal: normalise the mantissa. */
			exp = 127 - 15 + 1;
			while ((man & 0x400u) == 0) {
				man <<= 1;
				exp--;
			}
			man &= 0x3ffu;
			bits = sign | (exp << 23) | (man << 13);
		}
	} else if (exp == 0x1f) {
		bits = sign | 0x7f800000u | (man << 13);
	} else {
		bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
	}
	float f;
	memcpy(&f, &bits, sizeof(f));
	return f;
}

static inline uint16_t mfma_f32_to_f16(float f)
{
	uint32_t x;
	memcpy(&x, &f, sizeof(x));
	uint32_t sign = (x >> 16) & 0x8000u;
	uint32_t exp = (x >> 23) & 0xffu;
	uint32_t man = x & 0x7fffffu;
	if (exp == 0xff) /* inf or NaN (keep NaN quiet and non-zero) */
		return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0));
	int e = (int)exp - 127 + 15;
	if (e >= 0x1f)
		return (uint16_t)(sign | 0x7c00u);
	if (e <= 0) {
		if (e < -10)
			return (uint16_t)sign;
		man |= 0x800000u;
		uint32_t shift = (uint32_t)(14 - e);
		uint32_t half = man >> shift;
		uint32_t rem = man & ((1u << shift) - 1);
		uint32_t mid = 1u << (shift - 1);
		if (rem > mid || (rem == mid && (half & 1)))
			half++;
		return (uint16_t)(sign | half);
	}
	uint32_t half = ((uint32_t)e << 10) | (man >> 13);
	uint32_t rem = man & 0x1fffu;
	if (rem > 0x1000u || (rem == 0x1000u && (half & 1)))
		half++; /* may carry into the exponent, which is the right result */
	return (uint16_t)(sign | half);
}

static inline float mfma_bf16_to_f32(uint16_t h)
{
	uint32_t bits = (uint32_t)h << 16;
	float f;
	memcpy(&f, &bits, sizeof(f));
	return f;
}

static inline uint16_t mfma_f32_to_bf16(float f)
{
	uint32_t x;
	memcpy(&x, &f, sizeof(x));
	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
	x += 0x7fffu + ((x >> 16) & 1u);
	return (uint16_t)(x >> 16);
}

/* Element i of a buffer of type t, as a double.  For references and
 * tests; hot loops convert in blocks instead. */
static inline double mfma_load_f64(const void *p, enum mfma_dtype t, size_t i)
{
	switch (t) {
	case MFMA_DT_F32: return ((const float *)p)[i];
	case MFMA_DT_F16: return mfma_f16_to_f32(((const uint16_t *)p)[i]);
	case MFMA_DT_BF16: return mfma_bf16_to_f32(((const uint16_t *)p)[i]);
	case MFMA_DT_I8: return ((const int8_t *)p)[i];
	case MFMA_DT_I32: return ((const int32_t *)p)[i];
	default: return 0.0;
	}
}

#ifdef __cplusplus
}
#endif

#endif
