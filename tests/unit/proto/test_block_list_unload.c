/* A library holding block_list.c unloaded (dlclose, as an application may
 * do with the client library) while a thread that kept blocks on one of
 * its lists still runs: the thread's exit must not call into the unmapped
 * module.  The module is block_list.c on its own (block_list_module.c);
 * without the key deleted at unload (block_list.c's drop_exit_key) the
 * thread's exit jumps to the module's old address and the test dies. */
#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

static const char *module_path;

struct holder {
	int (*keep_one)(void);
	int kept;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int stage; /* 1: kept; 2: the module is unloaded, exit */
};

static void *hold(void *arg)
{
	struct holder *h = arg;
	const int kept = h->keep_one();
	pthread_mutex_lock(&h->mu);
	h->kept = kept;
	h->stage = 1;
	pthread_cond_broadcast(&h->cv);
	while (h->stage != 2)
		pthread_cond_wait(&h->cv, &h->mu);
	pthread_mutex_unlock(&h->mu);
	return NULL; /* the thread's exit: the keys' destructors run here */
}

static void test_exit_after_unload(void **state)
{
	(void)state;
	void *m = dlopen(module_path, RTLD_NOW | RTLD_LOCAL);
	if (!m)
		fail_msg("dlopen %s: %s", module_path, dlerror());
	struct holder h = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	*(void **)&h.keep_one = dlsym(m, "module_keep_one");
	assert_non_null(h.keep_one);
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, hold, &h), 0);
	pthread_mutex_lock(&h.mu);
	while (h.stage != 1)
		pthread_cond_wait(&h.cv, &h.mu);
	pthread_mutex_unlock(&h.mu);
	if (!h.kept)
		printf("  (this build keeps nothing: the unload is checked all the same)\n");
	assert_int_equal(dlclose(m), 0);
	/* The module is gone: a second dlopen with RTLD_NOLOAD finds it
	 * only if dlclose left it mapped, which would prove nothing. */
	void *again = dlopen(module_path, RTLD_NOW | RTLD_NOLOAD);
	if (again) {
		dlclose(again);
		fail_msg("%s stayed loaded after dlclose: the test proves nothing", module_path);
	}
	pthread_mutex_lock(&h.mu);
	h.stage = 2;
	pthread_cond_broadcast(&h.cv);
	pthread_mutex_unlock(&h.mu);
	assert_int_equal(pthread_join(t, NULL), 0);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s MODULE.so\n", argv[0]);
		return 2;
	}
	module_path = argv[1];
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exit_after_unload),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
