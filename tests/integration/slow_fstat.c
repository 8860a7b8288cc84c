/* Preloaded into a daemon by test_regions and test_declare (LD_PRELOAD)
 * to widen a race a client could otherwise win only now and then: fstat
 * of a file whose name holds mfma-slow-fstat (a memfd of that name, a
 * declared weight's .npy) returns, then sleeps 300 ms, so that the test's
 * client can act between the daemon's fstat and whatever the daemon does
 * next (shrink and seal a memfd; load a weight while a declared one is
 * read).  Every other fstat is untouched.  Built without
 * sanitizers: it only forwards to the next fstat.  Both names are
 * defined, fstat and fstat64, whichever the daemon's build calls. */
#undef _FILE_OFFSET_BITS
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int is_slow(int fd)
{
	char path[64], target[128];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(path, target, sizeof(target) - 1);
	if (n <= 0)
		return 0;
	target[n] = '\0';
	return strstr(target, "mfma-slow-fstat") != NULL;
}

static void slow_down(int fd)
{
	if (is_slow(fd)) {
		struct timespec ts = { 0, 300 * 1000000L };
		nanosleep(&ts, NULL);
	}
}

int fstat64(int fd, struct stat64 *st)
{
	static int (*next)(int, struct stat64 *);
	if (!next)
		*(void **)&next = dlsym(RTLD_NEXT, "fstat64");
	int rc = next(fd, st);
	if (rc == 0)
		slow_down(fd);
	return rc;
}

int fstat(int fd, struct stat *st)
{
	static int (*next)(int, struct stat *);
	if (!next)
		*(void **)&next = dlsym(RTLD_NEXT, "fstat");
	int rc = next(fd, st);
	if (rc == 0)
		slow_down(fd);
	return rc;
}
