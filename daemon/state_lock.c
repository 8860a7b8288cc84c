#include "state_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

/* The pid a holder wrote, 0 when the file holds none. */
static pid_t read_holder(int fd)
{
	char buf[24];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	char *end;
	long v = strtol(buf, &end, 10);
	return v > 0 && (*end == '\n' || *end == '\0') ? (pid_t)v : 0;
}

int state_lock_take(const char *dir, pid_t *holder)
{
	*holder = 0;
	char path[512];
	if (snprintf(path, sizeof(path), "%s/lock", dir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	int rc;
	while ((rc = flock(fd, LOCK_EX | LOCK_NB)) < 0 && errno == EINTR)
		;
	if (rc < 0) {
		rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
		if (rc == -EBUSY)
			*holder = read_holder(fd);
		close(fd);
		return rc;
	}
	char pid[24];
	int n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
	/* The pid only names the holder in the next one's error. */
	if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
		/* nothing: the lock holds without it */
	}
	return fd;
}
