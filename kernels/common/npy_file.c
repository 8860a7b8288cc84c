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

/* Reads bytes [from, to) of the file into b; 0, or -errno with a
 * sentence ("the file shrank" when it ends early). */
static int read_full(int fd, const char *path, uint8_t *b, size_t from, size_t to, size_t n,
		     char *err, size_t errlen)
{
	size_t got = from;
	while (got < to) {
		ssize_t r = read(fd, b + got, to - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			int e = r < 0 ? errno : EIO;
			snprintf(err, errlen, "%s: read error after %zu of %zu bytes: %s", path, got,
				 n, r < 0 ? strerror(e) : "the file shrank");
			return -e;
		}
		got += (size_t)r;
	}
	return 0;
}

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
	/* The header first, judged with the file's size: a file that is not
	 * a .npy, or not the shape it says, is refused before its data is
	 * read (a 64 GiB file given by mistake was read whole first). */
	uint8_t pre[12];
	size_t got = n < sizeof(pre) ? n : sizeof(pre), hend = got;
	struct npy_info info;
	int rc = read_full(fd, path, pre, 0, got, n, err, errlen);
	if (rc == 0 && got >= 10 && pre[6] == 1)
		hend = 10 + ((size_t)pre[8] | (size_t)pre[9] << 8);
	else if (rc == 0 && got >= 12 && (pre[6] == 2 || pre[6] == 3))
		hend = 12 + ((size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 |
			     (size_t)pre[11] << 24);
	if (hend > n)
		hend = n;
	if (hend < got)
		hend = got; /* a header shorter than pre: pre is read already */
	uint8_t *b = rc == 0 ? malloc(hend ? hend : 1) : NULL;
	if (rc == 0 && !b) {
		close(fd);
		snprintf(err, errlen, "%s: out of memory reading %zu bytes", path, hend);
		return -ENOMEM;
	}
	if (rc == 0) {
		memcpy(b, pre, got);
		rc = read_full(fd, path, b, got, hend, n, err, errlen);
	}
	if (rc == 0 && (rc = npy_parse_head(b, hend, n, &info, perr, sizeof(perr))) < 0)
		snprintf(err, errlen, "%s: %s", path, perr);
	if (rc < 0) {
		close(fd);
		free(b);
		return rc;
	}
	uint8_t *whole = realloc(b, n ? n : 1);
	if (!whole) {
		close(fd);
		free(b);
		snprintf(err, errlen, "%s: out of memory reading %zu bytes", path, n);
		return -ENOMEM;
	}
	b = whole;
	if ((rc = read_full(fd, path, b, hend, n, n, err, errlen)) < 0) {
		close(fd);
		free(b);
		return rc;
	}
	close(fd);
	rc = npy_decode(b, n, want, convert, m, perr, sizeof(perr));
	if (rc < 0)
		snprintf(err, errlen, "%s: %s", path, perr);
	return rc;
}
