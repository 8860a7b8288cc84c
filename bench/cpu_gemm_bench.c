/* CPU 2:4 GEMM against OpenBLAS dense sgemm, on the same data, in the
 * same process.
 *
 * Shapes are M x K x N: A is M x K (the weight), B is K x N, D is M x N.
 * For each shape and input type the dense row runs cpu_gemm_run with a
 * dense A (the OpenBLAS path: one cblas_sgemm for f32, widened blocks for
 * f16) and the sparse row runs cpu_gemm_run with the same A pruned to 2:4
 * (our packed loop).  Both get every core.  GFLOP/s are dense-equivalent
 * (2*M*N*K over the time), so the ratio is the speed-up a caller sees.
 *
 *   cpu_gemm_bench [-r reps] [-t threads] [M K N] ...
 *
 * Without shapes it runs the standard table. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_gemm.h"
#include "mfma_clock.h"
#include "sparse24.h"

struct shape {
	unsigned m, k, n;
};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Uniform in [-1, 1), never zero, in dtype t. */
static void fill(void *p, enum mfma_dtype t, size_t count, unsigned *seed)
{
	for (size_t i = 0; i < count; i++) {
		float f;
		do
			f = (float)rand_r(seed) / ((float)RAND_MAX + 1.0f) * 2.0f - 1.0f;
		while (f == 0.0f);
		if (t == MFMA_DT_F32)
			((float *)p)[i] = f;
		else if (t == MFMA_DT_F16)
			((uint16_t *)p)[i] = mfma_f32_to_f16(f);
		else
			((uint16_t *)p)[i] = mfma_f32_to_bf16(f);
	}
}

/* Runs g reps times after one warm-up; writes best and median ms. */
static int time_gemm(const struct mfma_gemm *g, int threads, int reps, double *best,
		     double *median, const char **variant)
{
	double t[64];
	if (reps > 64)
		reps = 64;
	int rc = cpu_gemm_run(g, threads, variant);
	if (rc < 0)
		return rc;
	for (int i = 0; i < reps; i++) {
		uint64_t t0 = mfma_clock_ns();
		rc = cpu_gemm_run(g, threads, NULL);
		t[i] = (double)(mfma_clock_ns() - t0) * 1e-6;
		if (rc < 0)
			return rc;
	}
	qsort(t, (size_t)reps, sizeof(t[0]), cmp_double);
	*best = t[0];
	*median = t[reps / 2];
	return 0;
}

static int bench_one(struct shape s, enum mfma_dtype dt, int threads, int reps)
{
	size_t m = s.m, k = s.k, n = s.n, es = mfma_dtype_size(dt);
	unsigned seed = 12345u + s.m + 7u * s.n;
	void *a = malloc(m * k * es), *b = malloc(k * n * es), *d = malloc(m * n * es);
	void *vals = malloc(sparse24_values_bytes(m, k, es));
	uint32_t *meta = malloc(sparse24_meta_bytes(m, k));
	int rc = -ENOMEM;
	if (!a || !b || !d || !vals || !meta)
		goto out;
	fill(a, dt, m * k, &seed);
	fill(b, dt, k * n, &seed);
	rc = sparse24_prune(a, dt, m, k, vals, meta);
	if (rc < 0)
		goto out;
	struct mfma_gemm g = {
		.m = s.m, .n = s.n, .k = s.k, .in_dtype = dt, .out_dtype = dt,
		.alpha = 1.0f, .beta = 0.0f, .a = a, .b = b, .d = d,
	};
	double db, dm, sb, sm;
	const char *dv, *sv;
	rc = time_gemm(&g, threads, reps, &db, &dm, &dv);
	if (rc < 0)
		goto out;
	g.a_sparse = true;
	g.a = vals;
	g.a_meta = meta;
	rc = time_gemm(&g, threads, reps, &sb, &sm, &sv);
	if (rc < 0)
		goto out;
	double gf = mfma_gemm_flops(&g) * 1e-6;
	printf("| %u x %u x %u | %s | %s | %.2f | %.2f | %.1f | %s | %.2f | %.2f | %.1f | %.2fx |\n",
	       s.m, s.k, s.n, mfma_dtype_name(dt), dv, db, dm, gf / db, sv, sb, sm, gf / sb,
	       db / sb);
	fflush(stdout);
out:
	free(a);
	free(b);
	free(d);
	free(vals);
	free(meta);
	return rc;
}

int main(int argc, char **argv)
{
	int reps = 5, threads = 0;
	struct shape shapes[16];
	size_t ns = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-r") == 0 && i + 1 < argc) {
			reps = atoi(argv[++i]);
		} else if (strcmp(argv[i], "-t") == 0 && i + 1 < argc) {
			threads = atoi(argv[++i]);
		} else if (i + 2 < argc && ns < 16) {
			shapes[ns++] = (struct shape){ (unsigned)strtoul(argv[i], NULL, 10),
						       (unsigned)strtoul(argv[i + 1], NULL, 10),
						       (unsigned)strtoul(argv[i + 2], NULL, 10) };
			i += 2;
		} else {
			fprintf(stderr, "usage: %s [-r reps] [-t threads] [M K N] ...\n", argv[0]);
			return 2;
		}
	}
	if (reps < 1) {
		fprintf(stderr, "-r %d: reps must be at least 1\n", reps);
		return 2;
	}
	for (size_t i = 0; i < ns; i++)
		if (shapes[i].k % 4 != 0 || !shapes[i].m || !shapes[i].n || !shapes[i].k) {
			fprintf(stderr, "shape %u x %u x %u: K must be a non-zero multiple of 4\n",
				shapes[i].m, shapes[i].k, shapes[i].n);
			return 2;
		}
	static const struct shape standard[] = {
		{ 4096, 4096, 4096 },
		{ 4096, 4096, 64 },
		{ 4096, 4096, 16 },
	};
	if (ns == 0) {
		memcpy(shapes, standard, sizeof(standard));
		ns = sizeof(standard) / sizeof(standard[0]);
	}
	printf("reps %d (after one warm-up), threads %d (0: all cores); times in ms (best, "
	       "median); GFLOP/s dense-equivalent 2*M*N*K/best; ratio = dense best / sparse best\n\n",
	       reps, threads);
	printf("| M x K x N | type | dense path | dense ms | (median) | dense GFLOP/s | sparse path "
	       "| sparse ms | (median) | sparse GFLOP/s | ratio |\n");
	printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
	static const enum mfma_dtype types[] = { MFMA_DT_F32, MFMA_DT_F16 };
	for (size_t t = 0; t < 2; t++)
		for (size_t i = 0; i < ns; i++) {
			int rc = bench_one(shapes[i], types[t], threads, reps);
			if (rc < 0) {
				fprintf(stderr, "%u x %u x %u %s: %s\n", shapes[i].m, shapes[i].k,
					shapes[i].n, mfma_dtype_name(types[t]), strerror(-rc));
				return 1;
			}
		}
	return 0;
}
