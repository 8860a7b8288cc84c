/* The NumPy .npy format, as far as mfmactl and mfmad need it: pure
 * functions from bytes to a description and a matrix and back (npy.c), and
 * the one reader of a file that both use (npy_file.c: open, size check,
 * read, then the pure decode).
 *
 * Read: format versions 1.0, 2.0 and 3.0 (3.0 only differs by allowing a
 * UTF-8 header); C order only; element types <f4 (f32), <f2 (f16), |i1
 * (i8), <i4 (i32) and <u2 (bf16 bits: NumPy has no bfloat16, so bf16 is
 * stored as its raw 16-bit pattern and the reader must be told).
 * Shapes: 2-D (R, C); a 1-D array (N,) is read as one row, 1 x N, which
 * is what a single activation vector means to a GEMM.
 * Write: version 1.0, 2-D, the header padded to 64 bytes as NumPy does. */
#ifndef MFMA_NPY_H
#define MFMA_NPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mfma_dtype.h"

enum npy_type {
	NPY_NONE = 0,
	NPY_F4, /* <f4 */
	NPY_F2, /* <f2 */
	NPY_I1, /* |i1 */
	NPY_I4, /* <i4 */
	NPY_U2, /* <u2: bf16 bit patterns */
};

struct npy_info {
	enum npy_type type;
	int version;        /* major format version: 1, 2 or 3 */
	int ndim;           /* as written in the file: 1 or 2 */
	uint32_t rows, cols;
	size_t data_offset; /* bytes before the data */
	size_t data_bytes;  /* rows * cols * element size */
};

/* The longest header npy_write_header produces. */
#define NPY_HEADER_MAX 128

/* Parses a whole .npy file held in memory: header, shape and the number
 * of data bytes that follow.  0, or -EINVAL (unreadable header, a shape
 * that does not match the bytes), -ENOTSUP (Fortran order, a dtype or a
 * number of dimensions that is not supported) with a sentence in err. */
int npy_parse(const void *file, size_t len, struct npy_info *info, char *err, size_t errlen);

/* npy_parse from the start of a file of file_len bytes: the len bytes of
 * head (which hold the header, when the file has one whole) are all it
 * reads, so that a file can be judged before its data is read. */
int npy_parse_head(const void *head, size_t len, uint64_t file_len, struct npy_info *info,
		   char *err, size_t errlen);

/* "<f4" ... for a type, NULL for NPY_NONE. */
const char *npy_type_descr(enum npy_type t);
size_t npy_type_size(enum npy_type t);

/* The file type that holds a dtype (bf16 -> <u2). */
enum npy_type npy_type_of(enum mfma_dtype t);

/* The dtype a file's data is, given what the user said it is (`hint`,
 * MFMA_DT_NONE when nothing).  <u2 is only bf16, and only when the hint
 * says so; other types have one natural dtype and ignore the hint (the
 * caller decides whether to convert).  0 or -EINVAL with a sentence. */
int npy_resolve(enum npy_type t, enum mfma_dtype hint, enum mfma_dtype *out, char *err,
		size_t errlen);

/* Writes a version 1.0 header for a rows x cols C-order array of type t
 * into out (at least NPY_HEADER_MAX bytes); returns its length, a
 * multiple of 64, or 0 for NPY_NONE. */
size_t npy_write_header(enum npy_type t, uint32_t rows, uint32_t cols, uint8_t *out);

/* A matrix read from a .npy file: `data` (rows x cols of dtype, `bytes`
 * long) lies in `alloc`, which the holder frees (npy_matrix_free). */
struct npy_matrix {
	uint32_t rows, cols;
	enum mfma_dtype dtype;
	void *data;
	size_t bytes;
	void *alloc;
};

/* Decodes a whole file held in `file` (malloc'd, `len` bytes), taking it
 * over: on success it becomes m->alloc (or is freed when a conversion
 * made a new buffer), on failure it is freed.  `want` is the dtype the
 * caller needs (MFMA_DT_NONE: the file's own); f32 data becomes f16 or
 * bf16 when `convert` allows it, other differences are refused.  0, or
 * -EINVAL / -ENOTSUP / -ENOMEM with a sentence in err (without the file
 * name: the caller adds it). */
int npy_decode(void *file, size_t len, enum mfma_dtype want, bool convert, struct npy_matrix *m,
	       char *err, size_t errlen);
void npy_matrix_free(struct npy_matrix *m);

/* Reads and decodes the file at path (npy_file.c).  Files larger than
 * max_bytes (0: no limit) are refused before anything is read, with a
 * sentence naming the size and the limit (-EFBIG); the caller says which
 * setting the limit is.  Errors start with the path. */
int npy_read(const char *path, enum mfma_dtype want, bool convert, uint64_t max_bytes,
	     struct npy_matrix *m, char *err, size_t errlen);

#endif
