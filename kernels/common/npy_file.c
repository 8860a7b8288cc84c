/* The one .npy file reader of mfmactl and mfmad: the I/O around the pure
 * npy_decode.  The size is checked against the caller's limit from
 * fstat, before a byte is read, so a declared weight file cannot make the
 * daemon allocate past its memory limits. */
#include "npy.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int npy_read(const char *path, enum mfma_dtype want, bool convert, uint64_t max_bytes,
	     struct npy_matrix *m, char *err, size_t errlen)
{
	struct stat st;
	char perr[256];
	memset(m, 0, sizeof(*m));
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		snprintf(err, errlen, "%s: %s", path, strerror(e));
		return -e;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		snprintf(err, errlen, "%s: not a regular file", path);
		return -EINVAL;
	}
	uint64_t size = (uint64_t)st.st_size;
	if ((max_bytes && size > max_bytes) || size > SIZE_MAX - 1) {
		close(fd);
		snprintf(err, errlen, "%s: the file has %" PRIu64 " bytes, over the limit of %" PRIu64,
			 path, size, max_bytes);
		return -EFBIG;
	}
	size_t n = (size_t)size;
	uint8_t *b = malloc(n ? n : 1);
	if (!b) {
		close(fd);
		snprintf(err, errlen, "%s: out of memory reading %zu bytes", path, n);
		return -ENOMEM;
	}
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, b + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			int e = r < 0 ? errno : EIO;
			close(fd);
			free(b);
			snprintf(err, errlen, "%s: read error after %zu of %zu bytes: %s", path, got,
				 n, r < 0 ? strerror(e) : "the file shrank");
			return -e;
		}
		got += (size_t)r;
	}
	close(fd);
	int rc = npy_decode(b, n, want, convert, m, perr, sizeof(perr));
	if (rc < 0)
		snprintf(err, errlen, "%s: %s", path, perr);
	return rc;
}
