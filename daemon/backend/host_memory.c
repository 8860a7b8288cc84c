#include "host_memory.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The number in the file at path ("max", a missing file or anything else
 * that is not a number: UINT64_MAX). */
static uint64_t read_limit(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return UINT64_MAX;
	char line[64] = "";
	const bool got = fgets(line, sizeof(line), f) != NULL;
	fclose(f);
	char *end;
	unsigned long long v = got ? strtoull(line, &end, 10) : 0;
	if (!got || end == line || (*end != '\n' && *end != '\0') || v == 0)
		return UINT64_MAX;
	return (uint64_t)v;
}

/* The cgroup path of this process for the hierarchy whose line in
 * /proc/self/cgroup starts with `prefix` ("0::" for v2, a v1 hierarchy
 * id and controllers for v1), into path; 0, or -1 when there is none. */
static int cgroup_path(const char *root, bool v2, char *path, size_t len)
{
	char file[512];
	snprintf(file, sizeof(file), "%s/proc/self/cgroup", root);
	FILE *f = fopen(file, "r");
	if (!f)
		return -1;
	char line[1024];
	int rc = -1;
	while (rc < 0 && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c1 = *c2 = '\0';
		const char *ctrls = c1 + 1;
		bool match = v2 ? strcmp(line, "0") == 0 && ctrls[0] == '\0' : false;
		if (!v2)
			for (char *s = (char *)ctrls, *t; (t = strtok_r(s, ",", &s)) && !match;)
				match = strcmp(t, "memory") == 0;
		if (match) {
			snprintf(path, len, "%s", c2 + 1);
			rc = 0;
		}
	}
	fclose(f);
	return rc;
}

/* The lowest limit in `file` of dir/<path> and each of its ancestors up
 * to dir itself. */
static uint64_t lowest_up(const char *dir, char *path, const char *file)
{
	uint64_t low = UINT64_MAX;
	for (;;) {
		char p[1536];
		snprintf(p, sizeof(p), "%s%s/%s", dir, strcmp(path, "/") == 0 ? "" : path, file);
		uint64_t v = read_limit(p);
		if (v < low)
			low = v;
		char *slash = strrchr(path, '/');
		if (!slash || slash == path) {
			if (strcmp(path, "/") == 0 || path[0] == '\0')
				break;
			strcpy(path, "/");
			continue;
		}
		*slash = '\0';
	}
	return low;
}

uint64_t host_memory_cgroup_limit(const char *root)
{
	char path[1024], dir[600];
	if (cgroup_path(root, true, path, sizeof(path)) == 0) {
		snprintf(dir, sizeof(dir), "%s/sys/fs/cgroup", root);
		return lowest_up(dir, path, "memory.max");
	}
	if (cgroup_path(root, false, path, sizeof(path)) == 0) {
		snprintf(dir, sizeof(dir), "%s/sys/fs/cgroup/memory", root);
		uint64_t v = lowest_up(dir, path, "memory.limit_in_bytes");
		/* v1 says "no limit" with a huge number (a page-rounded LONG_MAX). */
		return v >= (UINT64_C(1) << 62) ? UINT64_MAX : v;
	}
	return UINT64_MAX;
}

uint64_t host_memory_usable(uint64_t phys, const char *root)
{
	uint64_t cap = host_memory_cgroup_limit(root);
	return cap < phys ? cap : phys;
}
