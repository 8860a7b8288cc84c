/* Kernel providers in the configuration and the cache of measured choices
 * (issue 11), against the real daemon on the CPU backend, which has no
 * providers: an unknown provider name is refused at start with the known
 * ones listed, a valid cuda.providers / hip.providers is accepted and
 * printed by --check-config, a change on SIGHUP is said to need a
 * restart, status lists no providers for the CPU device, and the choices
 * file in the state directory is read at start (a good one counted, a
 * damaged one ignored with the reason).
 *
 * What this cannot reach here: a GPU device's providers in status, an
 * exclusion or a pin in force, a choice written after it is measured;
 * tests/nvidia/test_cuda_backend.c checks those on the H200. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "choice_cache.h"
#include "harness.h"
#include "mfma_dtype.h"

/* The daemon's log so far into buf. */
static void read_log(const struct mfmad_proc *p, char *buf, size_t len)
{
	FILE *f = fopen(p->log, "r");
	assert_non_null(f);
	size_t n = fread(buf, 1, len - 1, f);
	buf[n] = '\0';
	fclose(f);
}

/* Waits up to 10 s for the log to say s. */
static int log_says(const struct mfmad_proc *p, const char *s)
{
	static char buf[1 << 16];
	for (int i = 0; i < 200; i++) {
		read_log(p, buf, sizeof(buf));
		if (strstr(buf, s))
			return 1;
		usleep(50 * 1000);
	}
	fprintf(stderr, "the log does not say \"%s\":\n%s\n", s, buf);
	return 0;
}

/* What harness_start leaves behind when the daemon did not start. */
static void cleanup_failed(struct mfmad_proc *p)
{
	unlink(p->conf);
	unlink(p->log);
	rmdir(p->dir);
}

static void refused(const char *conf, const char *why)
{
	struct mfmad_proc d;
	assert_int_equal(harness_start(&d, conf, NULL), -1);
	assert_true(log_says(&d, why));
	cleanup_failed(&d);
}

static void test_unknown_name_refused_at_start(void **state)
{
	(void)state;
	refused("cuda = { providers = { exclude = [\"cusparse\"]; }; };",
		"cuda.providers.exclude[0] = \"cusparse\" is not a cuda provider (known: wgmma, "
		"ours, cublaslt, cusparselt)");
	refused("hip = { providers = { prefer = \"hipsparselt\"; }; };",
		"hip.providers.prefer = \"hipsparselt\" is not a hip provider (known: ours)");
	refused("cuda = { providers = { prefer = \"wgmma\"; exclude = [\"wgmma\"]; }; };",
		"cuda.providers.prefer = \"wgmma\" is also in cuda.providers.exclude");
	refused("cuda = { served_trial = 65; };", "cuda.served_trial = 65 is out of range 0..64");
	refused("cuda = { served_trial = -1; };", "cuda.served_trial = -1 is out of range 0..64");
}

static const char good[] =
	"cuda = { providers = { exclude = [\"cusparselt\", \"cublaslt\"]; prefer = \"wgmma\"; };\n"
	"         graphs = false; served_trial = 0; pinned_answers_mb = 16; copy_stream = true;\n"
	"         dma_parts_kb = 64; region_copies = false; gate = false; tile_out = false;\n"
	"         out_stream = false; };\n"
	"hip = { providers = { prefer = \"ours\"; }; };\n";

static int ctl(const struct mfmad_proc *p, char *out, size_t len, const char *a, const char *b)
{
	const char *argv[] = { getenv("MFMACTL_BIN"), "-e", p->endpoint, a, b, NULL };
	assert_non_null(argv[0]);
	return harness_run(argv, out, len);
}

static void test_valid_policy_status_and_reload(void **state)
{
	(void)state;
	/* --check-config prints the effective policy. */
	char path[] = "/tmp/mfmad-prov-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, good, strlen(good)), (ssize_t)strlen(good));
	close(fd);
	const char *check[] = { getenv("MFMAD_BIN"), "--check-config", "--config", path, NULL };
	static char out[1 << 16];
	assert_int_equal(harness_run(check, out, sizeof(out)), 0);
	unlink(path);
	assert_non_null(strstr(out, "cuda = { enabled = \"auto\"; providers = { exclude = "
				    "[\"cublaslt\", \"cusparselt\"]; prefer = \"wgmma\"; }; "
				    "warmup = true; graphs = false; served_trial = 0; pinned_answers_mb = 16; "
				    "copy_stream = true; dma_parts_kb = 64; region_copies = false; gate = false; "
				    "tile_out = false; out_stream = false; };"));
	assert_non_null(strstr(out, "hip = { enabled = \"auto\"; providers = { exclude = []; "
				    "prefer = \"ours\"; }; };"));

	struct mfmad_proc d;
	assert_int_equal(harness_start(&d, good, NULL), 0);
	/* The CPU device has no providers: none listed, in text or JSON. */
	assert_int_equal(ctl(&d, out, sizeof(out), "status", NULL), 0);
	assert_non_null(strstr(out, "device 0 variants:"));
	assert_null(strstr(out, "providers:"));
	/* Its worker opened the device and has waited since: its phases. */
	assert_non_null(strstr(out, "device 0 worker: idle "));
	assert_int_equal(ctl(&d, out, sizeof(out), "status", "--json"), 0);
	assert_non_null(strstr(out, "\"backend\": \"cpu\""));
	assert_non_null(strstr(out, "\"providers\": []"));
	assert_non_null(strstr(out, "\"worker_ns\": {"));

	/* A new policy on SIGHUP takes a restart, and the log says so. */
	FILE *f = fopen(d.conf, "w");
	assert_non_null(f);
	fprintf(f, "cuda = { providers = { exclude = [\"cusparselt\"]; }; };\n"
		   "hip = { providers = { prefer = \"ours\"; }; };\n");
	fclose(f);
	kill(d.pid, SIGHUP);
	/* So do cuda.graphs, cuda.copy_stream, cuda.dma_parts_kb,
	 * cuda.region_copies, cuda.gate, cuda.tile_out, cuda.out_stream,
	 * cuda.served_trial and cuda.pinned_answers_mb (false, true, 64,
	 * false, false, false, false, 0 and 16 above; the defaults now): they
	 * are told to the devices when they open. */
	assert_true(log_says(&d, "reload: cuda.providers, cuda.graphs, cuda.copy_stream, "
				 "cuda.dma_parts_kb, cuda.region_copies, cuda.gate, cuda.tile_out, "
				 "cuda.out_stream, cuda.served_trial, "
				 "cuda.pinned_answers_mb changed; that needs a restart"));
	assert_int_equal(harness_stop(&d), 0);
}

/* A choices file made by the cache's own writer, as a GPU daemon leaves
 * it, is read at start; a damaged one is ignored with the reason and the
 * daemon serves anyway. */
static void test_choices_file_read_at_start(void **state)
{
	(void)state;
	char dir[] = "/tmp/mfmad-choices-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char conf[256], file[300];
	snprintf(conf, sizeof(conf), "weights = { state_dir = \"%s\"; };", dir);
	snprintf(file, sizeof(file), "%s/choices", dir);

	struct choice_cache c;
	assert_int_equal(choice_cache_init(&c, 0), 0);
	struct backend_choice_key k = { .device = "NVIDIA H200 sm_90 driver 12080 mfmad 0.1.0: "
						  "wgmma ours cublaslt cusparselt",
					.m = 14336, .k = 4096, .dtype = MFMA_DT_F16, .sparse = 1,
					.n_max = 16, .out = MFMA_DT_F16 };
	assert_int_equal(choice_cache_put(&c, &k, "cusparselt,wgmma,ours"), 0);
	k.n_max = 32;
	assert_int_equal(choice_cache_put(&c, &k, "wgmma,cusparselt,ours"), 0);
	size_t need = choice_cache_format(&c, NULL, 0);
	char *text = malloc(need + 1);
	assert_non_null(text);
	choice_cache_format(&c, text, need + 1);
	choice_cache_free(&c);

	FILE *f = fopen(file, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(text, 1, need, f), need);
	fclose(f);
	struct mfmad_proc d;
	assert_int_equal(harness_start(&d, conf, NULL), 0);
	char line[400];
	snprintf(line, sizeof(line), "choices: 2 measured choice(s) read from %s", file);
	assert_true(log_says(&d, line));
	assert_int_equal(harness_stop(&d), 0);
	/* Nothing was measured: the file is as it was. */
	static char back[1 << 12];
	f = fopen(file, "r");
	assert_non_null(f);
	size_t n = fread(back, 1, sizeof(back), f);
	fclose(f);
	assert_int_equal(n, need);
	assert_memory_equal(back, text, need);

	/* One byte changed: ignored, with the checksum named, and served. */
	text[need - 2] ^= 1;
	f = fopen(file, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(text, 1, need, f), need);
	fclose(f);
	assert_int_equal(harness_start(&d, conf, NULL), 0);
	snprintf(line, sizeof(line), "choices: %s is ignored (checksum ", file);
	assert_true(log_says(&d, line));
	char out[4096];
	assert_int_equal(ctl(&d, out, sizeof(out), "ping", NULL), 0);
	assert_int_equal(harness_stop(&d), 0);

	free(text);
	unlink(file);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unknown_name_refused_at_start),
		cmocka_unit_test(test_valid_policy_status_and_reload),
		cmocka_unit_test(test_choices_file_read_at_start),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
