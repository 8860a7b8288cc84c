/* The shell of the cache of choices (choices.c) on a real loop and a real
 * state directory: a choice handed over by a worker thread is written to
 * STATE/choices off the loop, read back by the next start and answered by
 * get; a start without a state directory keeps nothing.  This is the path
 * a GPU backend takes after it measures (tests/nvidia checks the backend's
 * side). */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
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
#include "choices.h"
#include "config.h"
#include "daemon.h"
#include "mfma_dtype.h"

static const struct backend_choice_key key = {
	.device = "NVIDIA H200 sm_90 driver 12080 mfmad 0.1.0: wgmma ours cublaslt cusparselt",
	.m = 14336, .k = 4096, .dtype = MFMA_DT_F16, .sparse = 1, .n_max = 16, .out = MFMA_DT_F16,
};

static void *worker(void *arg)
{
	const struct backend_choices *h = arg;
	h->put(h->arg, &key, "cusparselt,wgmma,ours");
	return NULL;
}

static void close_cb(uv_handle_t *h, void *arg)
{
	(void)arg;
	if (!uv_is_closing(h))
		uv_close(h, NULL);
}

/* Starts d on a fresh loop with state directory dir ("" for none). */
static void start(struct daemon *d, uv_loop_t *loop, const char *dir)
{
	memset(d, 0, sizeof(*d));
	config_defaults(&d->cfg);
	snprintf(d->cfg.weights_state_dir, sizeof(d->cfg.weights_state_dir), "%s", dir);
	assert_int_equal(uv_loop_init(loop), 0);
	loop->data = d;
	d->loop = loop;
	assert_int_equal(choices_start(d), 0);
}

static void stop(struct daemon *d, uv_loop_t *loop)
{
	uv_walk(loop, close_cb, NULL);
	uv_run(loop, UV_RUN_DEFAULT);
	choices_free(d);
	assert_int_equal(uv_loop_close(loop), 0);
}

static void test_written_and_read_back(void **state)
{
	(void)state;
	char dir[] = "/tmp/mfmad-choices-unit-XXXXXX", file[128];
	assert_non_null(mkdtemp(dir));
	snprintf(file, sizeof(file), "%s/choices", dir);
	unsetenv("STATE_DIRECTORY");

	struct daemon d;
	uv_loop_t loop;
	start(&d, &loop, dir);
	const struct backend_choices *h = choices_hook(&d);
	assert_non_null(h);
	char order[128];
	assert_int_equal(h->get(h->arg, &key, order, sizeof(order)), -ENOENT);
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, worker, (void *)h), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	/* The loop writes it: wait for the file, 5 s at most. */
	struct stat st;
	for (int i = 0; i < 500 && stat(file, &st) != 0; i++) {
		uv_run(&loop, UV_RUN_NOWAIT);
		usleep(10 * 1000);
	}
	assert_int_equal(stat(file, &st), 0);
	assert_int_equal(h->get(h->arg, &key, order, sizeof(order)), 0);
	assert_string_equal(order, "cusparselt,wgmma,ours");
	stop(&d, &loop);

	/* The file is the cache's text, and the next start reads it. */
	FILE *f = fopen(file, "r");
	assert_non_null(f);
	static char text[1 << 12];
	size_t n = fread(text, 1, sizeof(text), f);
	fclose(f);
	struct choice_cache c;
	char err[256];
	assert_int_equal(choice_cache_init(&c, 0), 0);
	assert_int_equal(choice_cache_parse(&c, text, n, err, sizeof(err)), 0);
	assert_string_equal(choice_cache_get(&c, &key), "cusparselt,wgmma,ours");
	choice_cache_free(&c);

	start(&d, &loop, dir);
	h = choices_hook(&d);
	assert_int_equal(h->get(h->arg, &key, order, sizeof(order)), 0);
	assert_string_equal(order, "cusparselt,wgmma,ours");
	/* A choice put just before the end is written at choices_free. */
	struct backend_choice_key k2 = key;
	k2.n_max = 32;
	h->put(h->arg, &k2, "wgmma,ours");
	stop(&d, &loop);
	start(&d, &loop, dir);
	h = choices_hook(&d);
	assert_int_equal(h->get(h->arg, &k2, order, sizeof(order)), 0);
	assert_string_equal(order, "wgmma,ours");
	stop(&d, &loop);

	/* A damaged file: ignored, the cache starts empty. */
	f = fopen(file, "r+");
	assert_non_null(f);
	fseek(f, -3, SEEK_END);
	fputc('#', f);
	fclose(f);
	start(&d, &loop, dir);
	h = choices_hook(&d);
	assert_int_equal(h->get(h->arg, &key, order, sizeof(order)), -ENOENT);
	stop(&d, &loop);

	unlink(file);
	rmdir(dir);
}

/* A lookup that misses because the choice for that shape was measured
 * under another device key (here another build of the kernels) says so
 * in the log, once a run. */
static void test_other_device_said_once(void **state)
{
	(void)state;
	char dir[] = "/tmp/mfmad-choices-unit-XXXXXX";
	assert_non_null(mkdtemp(dir));
	unsetenv("STATE_DIRECTORY");
	struct backend_choice_key now = key, later = key;
	snprintf(now.device, sizeof(now.device), "%s", "NVIDIA H200 sm_90 driver 13000 mfmad 0.1.0 kernels 1af4d02318a5: wgmma ours");
	snprintf(later.device, sizeof(later.device), "%s", "NVIDIA H200 sm_90 driver 13010 mfmad 0.1.0 kernels 1af4d02318a5: wgmma ours");

	/* The log (stderr) into a file while the loop runs. */
	char logpath[] = "/tmp/mfmad-choices-log-XXXXXX";
	int lfd = mkstemp(logpath);
	assert_true(lfd >= 0);
	fflush(stderr);
	int saved = dup(2);
	assert_true(saved >= 0);
	assert_int_equal(dup2(lfd, 2), 2);

	struct daemon d;
	uv_loop_t loop;
	start(&d, &loop, dir);
	const struct backend_choices *h = choices_hook(&d);
	char order[128];
	h->put(h->arg, &key, "cusparselt,wgmma,ours");
	assert_int_equal(h->get(h->arg, &now, order, sizeof(order)), -ENOENT);
	assert_int_equal(h->get(h->arg, &later, order, sizeof(order)), -ENOENT);
	for (int i = 0; i < 20; i++) {
		uv_run(&loop, UV_RUN_NOWAIT);
		usleep(5 * 1000);
	}
	stop(&d, &loop);

	fflush(stderr);
	assert_int_equal(dup2(saved, 2), 2);
	close(saved);
	static char text[1 << 14];
	ssize_t n = pread(lfd, text, sizeof(text) - 1, 0);
	close(lfd);
	unlink(logpath);
	assert_true(n > 0);
	text[n] = '\0';
	char want[512];
	snprintf(want, sizeof(want), "measured on \"%s\", this device is \"%s\"", key.device, now.device);
	const char *at = strstr(text, want);
	if (!at)
		fail_msg("no note in the log:\n%s", text);
	assert_null(strstr(at + 1, "measured on \"")); /* once */

	char file[128];
	snprintf(file, sizeof(file), "%s/choices", dir);
	unlink(file);
	rmdir(dir);
}

static void test_no_state_dir(void **state)
{
	(void)state;
	unsetenv("STATE_DIRECTORY");
	struct daemon d;
	uv_loop_t loop;
	start(&d, &loop, "");
	assert_null(choices_hook(&d));
	stop(&d, &loop);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_written_and_read_back),
		cmocka_unit_test(test_other_device_said_once),
		cmocka_unit_test(test_no_state_dir),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
