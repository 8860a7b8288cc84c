/* Prints, per arch and kernel, the launch facts the host decides (the
 * dynamic LDS the HIP backend passes, the stage depth, the size of the
 * argument struct it copies into the kernarg segment) and an estimate of
 * LDS bank conflicts.  The instruction check (check_code_objects.py)
 * prints them next to what the compiler reports.
 *
 * Bank conflicts, on paper: for one wave's LDS instruction, the number
 * of distinct dwords the busiest of the 32 banks must serve, divided by
 * the least any layout could need (the distinct dwords over 32).  1.0 is
 * conflict-free; lanes reading the same dword share it.  The addresses
 * come from the same amd_lanes.h functions the kernels use. */
#include <stdio.h>
#include <string.h>

#include "amd_kernels.h"

#define BANKS 32

struct acc {
	unsigned n;
	unsigned dw[AMD_WAVE * 4];
};

static void add(struct acc *a, unsigned byte, unsigned bytes)
{
	for (unsigned d = byte / 4; d < (byte + bytes + 3) / 4; d++) {
		unsigned j = 0;
		while (j < a->n && a->dw[j] != d)
			j++;
		if (j == a->n && a->n < AMD_WAVE * 4)
			a->dw[a->n++] = d;
	}
}

static double ratio(const struct acc *a)
{
	unsigned per[BANKS] = { 0 }, worst = 0;
	for (unsigned j = 0; j < a->n; j++)
		if (++per[a->dw[j] % BANKS] > worst)
			worst = per[a->dw[j] % BANKS];
	unsigned best = (a->n + BANKS - 1) / BANKS;
	return best ? (double)worst / best : 1.0;
}

/* Worst ratio over the LDS instructions of each kind, for wave 0. */
static void conflicts(const struct amd_cfg *c, double out[4])
{
	struct acc a;
	memset(out, 0, 4 * sizeof(double));
	unsigned a_row = amd_lds_a_row_bytes(c), b_row = amd_lds_b_row_bytes(c);
	/* A stores: one 16-byte chunk per lane (two when expanding). */
	for (unsigned i = 0; i < amd_a_chunks_per_thread(c); i++) {
		a.n = 0;
		for (unsigned lane = 0; lane < AMD_WAVE; lane++) {
			unsigned row, col;
			amd_a_chunk(c, lane, i, &row, &col);
			unsigned byte = c->expand ? 2 * col * c->es : col * c->es;
			add(&a, amd_lds_swizzle(row, byte, a_row), AMD_CHUNK);
		}
		if (ratio(&a) > out[0])
			out[0] = ratio(&a);
	}
	/* B stores: element e of every lane's chunk, one store each. */
	for (unsigned i = 0; i < amd_b_chunks_per_thread(c); i++)
		for (unsigned e = 0; e < AMD_CHUNK / c->es; e++) {
			a.n = 0;
			for (unsigned lane = 0; lane < AMD_WAVE; lane++) {
				unsigned k, col;
				amd_b_chunk(c, lane, i, &k, &col);
				add(&a, amd_lds_b_base(c) + amd_lds_swizzle(col + e, k * c->es, b_row), c->es);
			}
			if (ratio(&a) > out[1])
				out[1] = ratio(&a);
		}
	/* Operand reads of wave 0, tile 0, step 0. */
	a.n = 0;
	for (unsigned lane = 0; lane < AMD_WAVE; lane++) {
		unsigned row, col, n = amd_frag_a(c, lane, &row, &col);
		add(&a, amd_lds_swizzle(row, col * c->es, a_row), n * c->es);
	}
	out[2] = ratio(&a);
	for (unsigned j = 0; j < amd_frag_b_runs(c); j++) {
		a.n = 0;
		for (unsigned lane = 0; lane < AMD_WAVE; lane++) {
			unsigned k, col;
			amd_frag_b(c, lane, j, &k, &col);
			add(&a, amd_lds_swizzle(col, k * c->es, b_row), c->b_run * c->es);
		}
		if (ratio(&a) > out[3])
			out[3] = ratio(&a);
	}
}

int main(void)
{
	for (int a = 0; a < AMD_NARCH; a++)
		for (size_t i = 0; i < amd_variant_count(); i++) {
			struct amd_variant v;
			double cf[4];
			if (amd_variant_at((enum amd_arch)a, i, &v) < 0)
				return 1;
			conflicts(&v.cfg, cf);
			printf("%s %s lds=%u bk=%u ki=%u args=%zu a_store=%.1f b_store=%.1f a_read=%.1f "
			       "b_read=%.1f name=%s\n",
			       amd_arch_name((enum amd_arch)a), v.kernel, amd_lds_bytes(&v.cfg), v.cfg.bk,
			       v.cfg.ki, sizeof(struct amd_gemm_args), cf[0], cf[1], cf[2], cf[3], v.name);
		}
	return 0;
}
