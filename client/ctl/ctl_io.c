/* mfmactl: .npy files in and out, on top of kernels/common/npy.h. */
#include "ctl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "npy.h"

void ctl_matrix_free(struct ctl_matrix *m)
{
	if (!m)
		return;
	free(m->alloc);
	memset(m, 0, sizeof(*m));
}

/* The bytes of a rows x cols matrix of t; false when they do not fit a
 * size_t (rows and cols of 2^31 each: 2^64 bytes of f32 wrapped to 0). */
static bool matrix_bytes(enum mfma_dtype t, uint32_t rows, uint32_t cols, size_t *bytes)
{
	const size_t es = mfma_dtype_size(t);
	if (cols && ((size_t)rows > SIZE_MAX / cols || (size_t)rows * cols > SIZE_MAX / es))
		return false;
	*bytes = (size_t)rows * cols * es;
	return true;
}

int ctl_matrix_alloc(struct ctl_matrix *m, enum mfma_dtype t, uint32_t rows, uint32_t cols)
{
	memset(m, 0, sizeof(*m));
	size_t bytes;
	if (!matrix_bytes(t, rows, cols, &bytes))
		return -ENOMEM;
	/* calloc(0) may return NULL; ask for at least one byte. */
	m->alloc = calloc(1, bytes ? bytes : 1);
	if (!m->alloc)
		return -ENOMEM;
	m->rows = rows;
	m->cols = cols;
	m->dtype = t;
	m->data = m->alloc;
	m->bytes = bytes;
	return 0;
}

int ctl_read_matrix(const char *path, enum mfma_dtype want, bool convert, struct ctl_matrix *m,
		    char *err, size_t errlen)
{
	struct npy_matrix x;
	memset(m, 0, sizeof(*m));
	int rc = npy_read(path, want, convert, 0, &x, err, errlen);
	if (rc < 0)
		return rc;
	m->rows = x.rows;
	m->cols = x.cols;
	m->dtype = x.dtype;
	m->data = x.data;
	m->bytes = x.bytes;
	m->alloc = x.alloc;
	return 0;
}

/* Whether path names something other than a regular file (a device, a
 * pipe: /dev/stdout, /dev/null; a symbolic link), written in place, never
 * replaced or removed. */
static bool special_file(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0 && !S_ISREG(st.st_mode);
}

/* Writes the header and the data to f and closes it: 0, or an errno. */
static int write_npy_to(FILE *f, const uint8_t *hdr, size_t hlen, const void *data, size_t bytes)
{
	errno = 0;
	bool ok = fwrite(hdr, 1, hlen, f) == hlen && fwrite(data, 1, bytes, f) == bytes &&
		  fflush(f) == 0;
	int e = ok ? 0 : (errno ? errno : EIO);
	if (fclose(f) != 0 && !e)
		e = errno ? errno : EIO;
	return e;
}

int ctl_write_matrix(const char *path, enum mfma_dtype t, uint32_t rows, uint32_t cols,
		     const void *data, char *err, size_t errlen)
{
	uint8_t hdr[NPY_HEADER_MAX];
	size_t hlen = npy_write_header(npy_type_of(t), rows, cols, hdr);
	size_t bytes;
	if (hlen == 0 || !matrix_bytes(t, rows, cols, &bytes)) {
		snprintf(err, errlen, "%s: cannot store a %ux%u matrix of dtype %d", path, rows, cols,
			 (int)t);
		return -EINVAL;
	}
	if (special_file(path)) {
		FILE *f = fopen(path, "wb");
		int e = f ? write_npy_to(f, hdr, hlen, data, bytes) : errno;
		if (e) {
			snprintf(err, errlen, "%s: %s%s", path, f ? "write error: " : "", strerror(e));
			return -e;
		}
		return 0;
	}
	/* A file: written whole beside it, then renamed over it, so that a
	 * failure or a kill part-way leaves the old file (or none) as it was,
	 * never half a matrix. */
	char tmp[4096];
	if (snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid()) >= (int)sizeof(tmp)) {
		snprintf(err, errlen, "%s: the path is too long", path);
		return -ENAMETOOLONG;
	}
	/* A new file's mode is 0666 less the umask, as fopen's; one replaced
	 * keeps its own. */
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
	if (fd < 0) {
		/* The path the user gave first: the temporary name alone
		 * ("D.npy.4711.tmp: No such file or directory") reads as a
		 * file of ours gone missing, not as their -o being wrong. */
		int e = errno;
		snprintf(err, errlen, "%s: %s (creating %s to rename over it)", path, strerror(e),
			 tmp);
		return -e;
	}
	struct stat old;
	if (stat(path, &old) == 0)
		(void)fchmod(fd, old.st_mode & 07777);
	FILE *f = fdopen(fd, "wb");
	int e = f ? write_npy_to(f, hdr, hlen, data, bytes) : errno;
	if (!f)
		close(fd);
	if (!e && rename(tmp, path) != 0)
		e = errno;
	if (e) {
		unlink(tmp);
		snprintf(err, errlen, "%s: write error: %s", path, strerror(e));
		return -e;
	}
	return 0;
}
