/* mfmactl: .npy files in and out, on top of kernels/common/npy.h. */
#include "ctl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"

void ctl_matrix_free(struct ctl_matrix *m)
{
	if (!m)
		return;
	free(m->alloc);
	memset(m, 0, sizeof(*m));
}

int ctl_matrix_alloc(struct ctl_matrix *m, enum mfma_dtype t, uint32_t rows, uint32_t cols)
{
	memset(m, 0, sizeof(*m));
	size_t bytes = (size_t)rows * cols * mfma_dtype_size(t);
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

int ctl_write_matrix(const char *path, enum mfma_dtype t, uint32_t rows, uint32_t cols,
		     const void *data, char *err, size_t errlen)
{
	uint8_t hdr[NPY_HEADER_MAX];
	size_t hlen = npy_write_header(npy_type_of(t), rows, cols, hdr);
	size_t bytes = (size_t)rows * cols * mfma_dtype_size(t);
	if (hlen == 0) {
		snprintf(err, errlen, "%s: cannot store dtype %d", path, (int)t);
		return -EINVAL;
	}
	FILE *f = fopen(path, "wb");
	if (!f) {
		int e = errno;
		snprintf(err, errlen, "%s: %s", path, strerror(e));
		return -e;
	}
	bool ok = fwrite(hdr, 1, hlen, f) == hlen && fwrite(data, 1, bytes, f) == bytes;
	if (fclose(f) != 0)
		ok = false;
	if (!ok) {
		int e = errno ? errno : EIO;
		snprintf(err, errlen, "%s: write error: %s", path, strerror(e));
		remove(path);
		return -e;
	}
	return 0;
}
