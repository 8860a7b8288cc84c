/* The cache of measured provider choices: lookup, replacement, the bound,
 * and the file's text (round trip, checksum, version, damage). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "choice_cache.h"
#include "mfma_dtype.h"

static struct backend_choice_key key(const char *dev, uint32_t m, uint32_t n_max, uint32_t out)
{
	struct backend_choice_key k;
	memset(&k, 0, sizeof(k));
	snprintf(k.device, sizeof(k.device), "%s", dev);
	k.m = m;
	k.k = 4096;
	k.dtype = MFMA_DT_F16;
	k.sparse = 1;
	k.n_max = n_max;
	k.out = out;
	return k;
}

static void test_put_get(void **state)
{
	(void)state;
	struct choice_cache c;
	assert_int_equal(choice_cache_init(&c, 0), 0);
	assert_int_equal(c.max, CHOICE_CACHE_MAX);
	struct backend_choice_key a = key("NVIDIA H200 sm_90 driver 12080: wgmma ours", 14336, 16,
					  MFMA_DT_F16);
	struct backend_choice_key b = a;
	b.n_max = 32;
	assert_null(choice_cache_get(&c, &a));
	assert_int_equal(choice_cache_put(&c, &a, "cusparselt,wgmma,ours"), 0);
	assert_int_equal(choice_cache_put(&c, &b, "wgmma,cusparselt,ours"), 0);
	assert_string_equal(choice_cache_get(&c, &a), "cusparselt,wgmma,ours");
	assert_string_equal(choice_cache_get(&c, &b), "wgmma,cusparselt,ours");
	/* Every field of the key tells choices apart. */
	struct backend_choice_key o = a;
	o.out = MFMA_DT_F32;
	assert_null(choice_cache_get(&c, &o));
	o = a;
	o.sparse = 0;
	assert_null(choice_cache_get(&c, &o));
	o = a;
	o.device[0] = 'X';
	assert_null(choice_cache_get(&c, &o));
	/* A new measurement replaces the old one. */
	assert_int_equal(choice_cache_put(&c, &a, "wgmma,ours"), 0);
	assert_string_equal(choice_cache_get(&c, &a), "wgmma,ours");
	assert_int_equal(c.n, 2);
	/* What the file could not hold is refused. */
	assert_int_equal(choice_cache_put(&c, &a, ""), -EINVAL);
	assert_int_equal(choice_cache_put(&c, &a, "a\tb"), -EINVAL);
	o = a;
	snprintf(o.device, sizeof(o.device), "line\nbreak");
	assert_int_equal(choice_cache_put(&c, &o, "ours"), -EINVAL);
	char longer[CHOICE_ORDER_MAX + 8];
	memset(longer, 'x', sizeof(longer) - 1);
	longer[sizeof(longer) - 1] = '\0';
	assert_int_equal(choice_cache_put(&c, &a, longer), -EINVAL);
	choice_cache_free(&c);
	choice_cache_free(NULL);
}

/* Why a lookup missed: the newest choice for the same shape, N bucket
 * and output type kept under another device key (here: the same GPU with
 * another build of the kernels), never one of another shape, nor the key's
 * own device. */
static void test_other_device(void **state)
{
	(void)state;
	struct choice_cache c;
	assert_int_equal(choice_cache_init(&c, 0), 0);
	const char *old1 = "NVIDIA H200 sm_90 driver 13000 mfmad 0.1.0 kernels 000000000001: wgmma ours";
	const char *old2 = "NVIDIA H200 sm_90 driver 13000 mfmad 0.1.0 kernels 000000000002: wgmma ours";
	const char *now = "NVIDIA H200 sm_90 driver 13000 mfmad 0.1.0 kernels 1af4d02318a5: wgmma ours";
	struct backend_choice_key k = key(now, 14336, 16, MFMA_DT_F16);
	assert_null(choice_cache_other_device(&c, &k));
	struct backend_choice_key o1 = key(old1, 14336, 16, MFMA_DT_F16), o2 = key(old2, 14336, 16, MFMA_DT_F16);
	struct backend_choice_key shape = key(old2, 14336, 32, MFMA_DT_F16);
	assert_int_equal(choice_cache_put(&c, &shape, "ours"), 0);
	assert_null(choice_cache_other_device(&c, &k)); /* another N bucket */
	assert_int_equal(choice_cache_put(&c, &o1, "cusparselt,wgmma"), 0);
	assert_string_equal(choice_cache_other_device(&c, &k), old1);
	assert_int_equal(choice_cache_put(&c, &o2, "cusparselt,wgmma"), 0);
	assert_string_equal(choice_cache_other_device(&c, &k), old2); /* the newest */
	assert_int_equal(choice_cache_put(&c, &k, "wgmma,cusparselt"), 0);
	assert_string_equal(choice_cache_other_device(&c, &k), old2); /* never its own */
	k.out = MFMA_DT_F32;
	assert_null(choice_cache_other_device(&c, &k)); /* another output type */
	choice_cache_free(&c);
}

/* Past the bound the oldest choice makes room. */
static void test_bound(void **state)
{
	(void)state;
	struct choice_cache c;
	assert_int_equal(choice_cache_init(&c, 3), 0);
	struct backend_choice_key k[4];
	for (int i = 0; i < 4; i++) {
		k[i] = key("dev", 100 + (uint32_t)i, 16, MFMA_DT_F16);
		assert_int_equal(choice_cache_put(&c, &k[i], "ours"), i == 3 ? 1 : 0);
	}
	assert_int_equal(c.n, 3);
	assert_null(choice_cache_get(&c, &k[0]));
	for (int i = 1; i < 4; i++)
		assert_non_null(choice_cache_get(&c, &k[i]));
	choice_cache_free(&c);
}

static char *text_of(const struct choice_cache *c, size_t *len)
{
	size_t need = choice_cache_format(c, NULL, 0);
	char *t = malloc(need + 1);
	assert_non_null(t);
	assert_int_equal(choice_cache_format(c, t, need + 1), need);
	assert_int_equal(strlen(t), need);
	*len = need;
	return t;
}

static void test_round_trip(void **state)
{
	(void)state;
	struct choice_cache c, r;
	char err[256] = "";
	assert_int_equal(choice_cache_init(&c, 0), 0);
	assert_int_equal(choice_cache_init(&r, 0), 0);
	struct backend_choice_key a = key("NVIDIA H200 sm_90 driver 12080 mfmad 0.1.0: wgmma ours",
					  14336, 16, MFMA_DT_F16);
	struct backend_choice_key b = key("NVIDIA H200", 4096, UINT32_MAX, MFMA_DT_NONE);
	b.dtype = MFMA_DT_BF16;
	b.sparse = 0;
	assert_int_equal(choice_cache_put(&c, &a, "cusparselt,wgmma,ours"), 0);
	assert_int_equal(choice_cache_put(&c, &b, "cublaslt,ours"), 0);
	size_t len;
	char *t = text_of(&c, &len);
	assert_memory_equal(t, "mfmad-choices 1 ", 16);
	assert_non_null(strstr(t, "\t14336\t4096\tf16\t1\t16\tf16\tcusparselt,wgmma,ours\n"));
	assert_non_null(strstr(t, "\t4096\t4096\tbf16\t0\t4294967295\tnone\tcublaslt,ours\n"));
	assert_int_equal(choice_cache_parse(&r, t, len, err, sizeof(err)), 0);
	assert_int_equal(r.n, 2);
	assert_string_equal(choice_cache_get(&r, &a), "cusparselt,wgmma,ours");
	assert_string_equal(choice_cache_get(&r, &b), "cublaslt,ours");

	/* A small buffer gets nothing half-written. */
	char small[8] = "zzzzzzz";
	assert_int_equal(choice_cache_format(&c, small, sizeof(small)), len);
	assert_string_equal(small, "");

	/* An empty cache is a header alone, and reads back empty. */
	struct choice_cache e;
	assert_int_equal(choice_cache_init(&e, 0), 0);
	size_t elen;
	char *et = text_of(&e, &elen);
	assert_int_equal(choice_cache_parse(&r, et, elen, err, sizeof(err)), 0);
	assert_int_equal(r.n, 0);
	free(et);
	choice_cache_free(&e);
	free(t);
	choice_cache_free(&c);
	choice_cache_free(&r);
}

/* A file of one body line with its right checksum (FNV-1a written out
 * here, not the daemon's helper, so that the test checks the format). */
static char *forge(const char *line)
{
	uint64_t sum = 0xcbf29ce484222325ull;
	for (const char *p = line; *p; p++)
		sum = (sum ^ (uint8_t)*p) * 0x100000001b3ull;
	size_t len = 64 + strlen(line);
	char *f = malloc(len);
	assert_non_null(f);
	snprintf(f, len, "mfmad-choices 1 %016llx\n%s", (unsigned long long)sum, line);
	return f;
}

/* A damaged, stale or malformed file is refused with the reason, and the
 * cache it was read into is left empty. */
static void test_damage(void **state)
{
	(void)state;
	struct choice_cache c, r;
	char err[256] = "";
	assert_int_equal(choice_cache_init(&c, 0), 0);
	assert_int_equal(choice_cache_init(&r, 0), 0);
	struct backend_choice_key a = key("dev", 64, 16, MFMA_DT_F16);
	assert_int_equal(choice_cache_put(&c, &a, "wgmma,ours"), 0);
	size_t len;
	char *t = text_of(&c, &len);

	/* One byte of the body changed: the checksum says so. */
	char *bad = strdup(t);
	bad[len - 3] = 'X';
	assert_int_equal(choice_cache_parse(&r, bad, len, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "checksum"));
	assert_int_equal(r.n, 0);
	/* Cut short. */
	assert_int_equal(choice_cache_parse(&r, t, len - 4, err, sizeof(err)), -EINVAL);
	assert_int_equal(r.n, 0);
	/* Another format version. */
	memcpy(bad, t, len);
	bad[14] = '9';
	assert_int_equal(choice_cache_parse(&r, bad, len, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "format version 9; this mfmad reads version 1");
	/* Not a choices file at all. */
	assert_int_equal(choice_cache_parse(&r, "hello\n", 6, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "no header line"));
	assert_int_equal(choice_cache_parse(&r, "", 0, err, sizeof(err)), -EINVAL);
	/* Too large to be one. */
	assert_int_equal(choice_cache_parse(&r, t, CHOICE_FILE_MAX + 1, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "larger than"));
	free(bad);

	/* Lines under a right checksum: a field missing, one too many, and
	 * the same line with its 8 fields, which reads. */
	char *forged = forge("dev\t64\t4096\tf16\t1\t16\twgmma,ours\n");
	assert_int_equal(choice_cache_parse(&r, forged, strlen(forged), err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "line 2 is not 8 fields (device, m, k, dtype, sparse, n_max, out, "
				 "order)");
	free(forged);
	forged = forge("dev\t64\t4096\tf16\t1\t16\tf16\twgmma,ours\textra\n");
	assert_int_equal(choice_cache_parse(&r, forged, strlen(forged), err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "line 2 is not 8 fields"));
	free(forged);
	forged = forge("dev\t64\t4096\tf16\t1\t16\tf16\twgmma,ours\n");
	assert_int_equal(choice_cache_parse(&r, forged, strlen(forged), err, sizeof(err)), 0);
	assert_string_equal(choice_cache_get(&r, &a), "wgmma,ours");
	free(forged);
	free(t);
	choice_cache_free(&c);
	choice_cache_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_put_get),
		cmocka_unit_test(test_other_device),
		cmocka_unit_test(test_bound),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_damage),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
