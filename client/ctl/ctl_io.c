/* mfmactl: .npy files in and out, on top of the pure npy.c. */
#include "ctl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

static int read_file(const char *path, uint8_t **buf, size_t *len, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	struct stat st;
	if (!f) {
		int e = errno;
		snprintf(err, errlen, "%s: %s", path, strerror(e));
		return -e;
	}
	if (fstat(fileno(f), &st) < 0 || !S_ISREG(st.st_mode)) {
		fclose(f);
		snprintf(err, errlen, "%s: not a regular file", path);
		return -EINVAL;
	}
	size_t n = (size_t)st.st_size;
	uint8_t *b = malloc(n ? n : 1);
	if (!b) {
		fclose(f);
		snprintf(err, errlen, "%s: out of memory reading %zu bytes", path, n);
		return -ENOMEM;
	}
	if (fread(b, 1, n, f) != n) {
		fclose(f);
		free(b);
		snprintf(err, errlen, "%s: read error", path);
		return -EIO;
	}
	fclose(f);
	*buf = b;
	*len = n;
	return 0;
}

int ctl_read_matrix(const char *path, enum mfma_dtype want, bool convert, struct ctl_matrix *m,
		    char *err, size_t errlen)
{
	struct npy_info info;
	uint8_t *buf = NULL;
	size_t len = 0;
	char perr[256];
	enum mfma_dtype have;

	memset(m, 0, sizeof(*m));
	int rc = read_file(path, &buf, &len, err, errlen);
	if (rc < 0)
		return rc;
	rc = npy_parse(buf, len, &info, perr, sizeof(perr));
	if (rc == 0)
		rc = npy_resolve(info.type, want, &have, perr, sizeof(perr));
	if (rc < 0) {
		snprintf(err, errlen, "%s: %s", path, perr);
		free(buf);
		return rc;
	}
	size_t count = (size_t)info.rows * info.cols;
	m->rows = info.rows;
	m->cols = info.cols;
	if (want == MFMA_DT_NONE || want == have) {
		/* Keep the file's buffer; move the data to its start when the
		 * header leaves it misaligned for the element type. */
		memmove(buf, buf + info.data_offset, info.data_bytes);
		m->alloc = buf;
		m->data = buf;
		m->bytes = info.data_bytes;
		m->dtype = have;
		return 0;
	}
	if (!convert || have != MFMA_DT_F32 || (want != MFMA_DT_F16 && want != MFMA_DT_BF16)) {
		snprintf(err, errlen, "%s holds %s data (%s), which cannot be used as %s%s", path,
			 mfma_dtype_name(have), npy_type_descr(info.type), mfma_dtype_name(want),
			 have == MFMA_DT_F32 && !convert ? " (use --dtype to convert)" : "");
		free(buf);
		return -EINVAL;
	}
	uint16_t *out = malloc(count * 2 + 1);
	if (!out) {
		free(buf);
		snprintf(err, errlen, "%s: out of memory", path);
		return -ENOMEM;
	}
	for (size_t i = 0; i < count; i++) {
		float f;
		memcpy(&f, buf + info.data_offset + 4 * i, sizeof(f));
		out[i] = want == MFMA_DT_F16 ? mfma_f32_to_f16(f) : mfma_f32_to_bf16(f);
	}
	free(buf);
	m->alloc = out;
	m->data = out;
	m->bytes = count * 2;
	m->dtype = want;
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
