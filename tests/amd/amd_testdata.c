/* See amd_testdata.h. */
#include "amd_testdata.h"

#include <stdint.h>
#include <string.h>

unsigned td_rand(unsigned *seed)
{
	*seed = *seed * 1103515245u + 12345u;
	return (*seed >> 8) & 0xffffffu;
}

void td_put_random(void *p, enum mfma_dtype t, size_t i, unsigned *seed)
{
	for (;;) {
		float f = (float)((int)(td_rand(seed) % 2001) - 1000) / 1000.0f;
		switch (t) {
		case MFMA_DT_F16: ((uint16_t *)p)[i] = mfma_f32_to_f16(f); break;
		case MFMA_DT_BF16: ((uint16_t *)p)[i] = mfma_f32_to_bf16(f); break;
		case MFMA_DT_F32: ((float *)p)[i] = f; break;
		case MFMA_DT_I32: ((int32_t *)p)[i] = (int32_t)(td_rand(seed) % 20001) - 10000; break;
		default: ((int8_t *)p)[i] = (int8_t)(td_rand(seed) & 0xffu); break;
		}
		if (mfma_load_f64(p, t, i) != 0.0)
			return;
	}
}

void td_random_24(void *d, enum mfma_dtype t, size_t rows, size_t k, unsigned *seed)
{
	memset(d, 0, rows * k * mfma_dtype_size(t));
	for (size_t r = 0; r < rows; r++)
		for (size_t g = 0; g < k / 4; g++) {
			unsigned u = td_rand(seed) % 10, keep = u < 8 ? 2 : u < 9 ? 1 : 0;
			unsigned p0 = td_rand(seed) % 4, p1 = (p0 + 1 + td_rand(seed) % 3) % 4;
			if (keep >= 1)
				td_put_random(d, t, r * k + 4 * g + p0, seed);
			if (keep == 2)
				td_put_random(d, t, r * k + 4 * g + p1, seed);
		}
}
