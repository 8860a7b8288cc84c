/* mfmad built with the HIP backend, on a machine without an AMD GPU:
 * with hip left on auto it starts, says it found no HIP device, and
 * serves on the CPU; with hip required it refuses to start and says why.
 * On a machine that has an AMD GPU these checks do not apply and are
 * skipped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "mfma.h"
#include "mfma_dtype.h"

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	static char buf[65536];
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static void test_auto_without_device(void **state)
{
	(void)state;
	struct mfmad_proc d;
	assert_int_equal(harness_start(&d, NULL, NULL), 0);
	const char *log = read_file(d.log);
	assert_non_null(log);
	if (!strstr(log, "hip backend: no device")) {
		assert_int_equal(harness_stop(&d), 0);
		print_message("  this machine has a HIP device; the no-device checks do not apply\n");
		skip();
	}
	mfma_client *c;
	struct mfma_error err;
	assert_int_equal(mfma_connect(d.endpoint, &c, &err), 0);
	struct mfma_status st;
	assert_int_equal(mfma_status(c, &st, &err), 0);
	assert_true(st.n_devices >= 1);
	for (size_t i = 0; i < st.n_devices; i++)
		assert_string_equal(st.devices[i].backend, "cpu");
	mfma_status_free(&st);

	/* And it serves: an f16 GEMM runs on the CPU. */
	uint16_t a[2 * 3], b[3 * 2];
	for (int i = 0; i < 6; i++) {
		a[i] = mfma_f32_to_f16((float)(i + 1));
		b[i] = mfma_f32_to_f16((float)(2 - i));
	}
	struct mfma_gemm_args ga;
	mfma_gemm_args_init(&ga);
	ga.a.kind = MFMA_OPERAND_DENSE;
	ga.a.dense = (struct mfma_matrix){ 2, 3, MFMA_TYPE_F16, a, sizeof(a) };
	ga.b = (struct mfma_matrix){ 3, 2, MFMA_TYPE_F16, b, sizeof(b) };
	struct mfma_gemm_result r;
	assert_int_equal(mfma_gemm(c, &ga, &r, &err), 0);
	assert_string_equal(r.device.backend, "cpu");
	/* Row 0 of A is 1 2 3; column 0 of B is 2 0 -2: 2 - 6 = -4. */
	assert_float_equal(((const float *)r.d.data)[0], -4.0f, 0.0f);
	mfma_gemm_result_free(&r);
	mfma_close(c);
	assert_int_equal(harness_stop(&d), 0);
}

static void test_required_without_device(void **state)
{
	(void)state;
	struct mfmad_proc d;
	const char *args[] = { "--backends", "hip", NULL };
	int rc = harness_start(&d, NULL, args);
	if (rc == 0) {
		assert_int_equal(harness_stop(&d), 0);
		print_message("  this machine has a HIP device; the no-device checks do not apply\n");
		skip();
	}
	/* It exited during start-up; its log says why. */
	const char *log = read_file(d.log);
	assert_non_null(log);
	assert_non_null(strstr(log, "hip backend is enabled but found no device"));
	unlink(d.log);
	unlink(d.conf);
	rmdir(d.dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_auto_without_device),
		cmocka_unit_test(test_required_without_device),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
