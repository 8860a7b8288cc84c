/* The host memory the CPU backend's weight budget comes from
 * (host_memory.c), against control-group trees laid out in a temporary
 * directory as /proc and /sys/fs/cgroup are: cgroup v2 with a limit on
 * the process's group, on an ancestor, on none ("max"); a container's
 * namespaced root ("0::/"); cgroup v1's memory hierarchy, its "no limit"
 * number included; and no cgroup file at all. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "host_memory.h"

static char root[64];

/* Writes text to root/rel, making its directories. */
static void put(const char *rel, const char *text)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')); p++) {
		*p = '\0';
		mkdir(path, 0755);
		*p = '/';
	}
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static int fresh(void **state)
{
	(void)state;
	snprintf(root, sizeof(root), "/tmp/mfmad-hostmem-XXXXXX");
	assert_non_null(mkdtemp(root));
	return 0;
}

static int gone(void **state)
{
	(void)state;
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	return system(cmd) == 0 ? 0 : -1;
}

static void test_v2_own_group(void **state)
{
	(void)state;
	put("proc/self/cgroup", "0::/system.slice/mfmad.service\n");
	put("sys/fs/cgroup/system.slice/mfmad.service/memory.max", "12884901888\n");
	put("sys/fs/cgroup/system.slice/memory.max", "max\n");
	assert_int_equal(host_memory_cgroup_limit(root), 12884901888ull);
	assert_int_equal(host_memory_usable(25769803776ull, root), 12884901888ull);
	/* A machine smaller than the limit keeps its own size. */
	assert_int_equal(host_memory_usable(8589934592ull, root), 8589934592ull);
}

static void test_v2_ancestor(void **state)
{
	(void)state;
	put("proc/self/cgroup", "0::/system.slice/mfmad.service\n");
	put("sys/fs/cgroup/system.slice/mfmad.service/memory.max", "max\n");
	put("sys/fs/cgroup/system.slice/memory.max", "4294967296\n");
	assert_int_equal(host_memory_cgroup_limit(root), 4294967296ull);
}

static void test_v2_none(void **state)
{
	(void)state;
	put("proc/self/cgroup", "0::/user.slice/session-1.scope\n");
	put("sys/fs/cgroup/user.slice/session-1.scope/memory.max", "max\n");
	assert_int_equal(host_memory_cgroup_limit(root), UINT64_MAX);
	assert_int_equal(host_memory_usable(1000, root), 1000);
}

static void test_v2_container_root(void **state)
{
	(void)state;
	put("proc/self/cgroup", "0::/\n");
	put("sys/fs/cgroup/memory.max", "12884901888\n");
	assert_int_equal(host_memory_cgroup_limit(root), 12884901888ull);
}

static void test_v1(void **state)
{
	(void)state;
	put("proc/self/cgroup", "12:pids:/docker/abc\n9:memory:/docker/abc\n1:name=systemd:/\n");
	put("sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "2147483648\n");
	assert_int_equal(host_memory_cgroup_limit(root), 2147483648ull);
	put("sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "9223372036854771712\n");
	assert_int_equal(host_memory_cgroup_limit(root), UINT64_MAX);
}

static void test_no_cgroup(void **state)
{
	(void)state;
	assert_int_equal(host_memory_cgroup_limit(root), UINT64_MAX);
	put("proc/self/cgroup", "0::/a\n");
	put("sys/fs/cgroup/a/memory.max", "not a number\n");
	assert_int_equal(host_memory_cgroup_limit(root), UINT64_MAX);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_v2_own_group, fresh, gone),
		cmocka_unit_test_setup_teardown(test_v2_ancestor, fresh, gone),
		cmocka_unit_test_setup_teardown(test_v2_none, fresh, gone),
		cmocka_unit_test_setup_teardown(test_v2_container_root, fresh, gone),
		cmocka_unit_test_setup_teardown(test_v1, fresh, gone),
		cmocka_unit_test_setup_teardown(test_no_cgroup, fresh, gone),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
