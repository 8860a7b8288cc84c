/* Request validation: pure checks of what a client sent, before anything
 * is queued.  Each failure returns a negative code and a sentence naming
 * the field and the value ("b.rows=100 does not match a.cols=96").
 *
 * Shapes, dtypes, byte lengths and scalar arguments are checked here, on
 * the loop.  Content checks that cost O(M*K) (2:4 validity of a dense A,
 * the nibbles of a compressed meta) run on the device worker just before
 * the data is used (operand.h), so a large request never stalls the loop. */
#ifndef MFMAD_VALIDATE_H
#define MFMAD_VALIDATE_H

#include <stddef.h>
#include <stdint.h>

#include "mfma.pb-c.h"
#include "mfma_gemm.h"

/* The longest timeout a request may ask for: one day.  Deadlines are
 * arrival + timeout in nanoseconds, which this keeps far from wrapping. */
#define VALIDATE_MAX_TIMEOUT_US (86400ull * 1000 * 1000)

struct validate_limits {
	uint32_t max_dim;
	uint64_t max_out_bytes; /* D must fit in one response frame */
};

/* What A turned out to be. */
enum a_form {
	A_DENSE,        /* dense, used as is */
	A_DENSE_CHECK,  /* dense, must be 2:4 (VALIDATE_24): compress on the worker */
	A_DENSE_PRUNE,  /* dense, prune to 2:4 on the worker */
	A_SPARSE,       /* canonical 2:4 from the wire: check meta on the worker */
	A_WEIGHT,       /* a resident weight */
};

/* The shape of a resident weight, for checking a Gemm that names it. */
struct weight_shape {
	uint32_t m, k;
	enum mfma_dtype dtype;
	int sparse;
};

struct gemm_plan {
	enum a_form a_form;
	/* Operands in a client's region instead of the frame (NULL: in the
	 * frame); their pointers in g are NULL until the caller resolves
	 * them (regions_use), with b_bytes, c_bytes and d_bytes as the
	 * lengths to check. */
	const Mfma__V1__RegionRef *b_region, *c_region, *d_region;
	size_t b_bytes, c_bytes;
	struct mfma_gemm g; /* pointers into the request; a/a_meta NULL for A_WEIGHT */
	const char *weight; /* A_WEIGHT: the name */
	size_t d_bytes;
	size_t in_bytes; /* bytes the request holds, for the in-flight budget */
};

/* The A operand of a Gemm or LoadWeight (not a weight reference): shape,
 * dtype and byte lengths.  `what` prefixes field names ("a", "weight"). */
int validate_operand(const Mfma__V1__Operand *op, const struct validate_limits *lim,
		     const char *what, enum a_form *form, uint32_t *rows, uint32_t *cols,
		     enum mfma_dtype *dtype, char *err, size_t errlen);

/* A Gemm.  When a names a weight, w must be the shape of the weight of
 * that name (the caller looks it up and answers NOT_FOUND itself when it
 * does not exist), or NULL: the name's own error, else "not loaded". */
int validate_gemm(const Mfma__V1__Gemm *g, const struct validate_limits *lim,
		  const struct weight_shape *w, struct gemm_plan *plan, char *err, size_t errlen);

/* A region's bytes [off, off + need) named by a GEMM's field: inside the
 * region of region_len bytes (overflow included), and length, when the
 * client gave one (has_length), equal to need. */
int validate_region_span(uint64_t region_len, uint64_t off, int has_length, uint64_t length,
			 uint64_t need, const char *field, uint64_t id, char *err, size_t errlen);

/* A descriptor offered as a region, from fstat and F_GET_SEALS (seals < 0:
 * the call failed, not a memfd): a regular file of 1 byte or more, sealed
 * against shrinking and growing, of want bytes when want is not 0. */
int validate_region_fd(uint32_t mode, uint64_t size, int seals, uint64_t want, char *err,
		       size_t errlen);

/* A weight name: 1..127 bytes of [A-Za-z0-9._:-]. */
int validate_weight_name(const char *name, char *err, size_t errlen);

/* A LoadWeight: its name, its A operand and its device (-1 or
 * 0..ndev-1).  Whether the weight fits is the registry's question. */
int validate_load_weight(const Mfma__V1__LoadWeight *lw, const struct validate_limits *lim,
			 int ndev, enum a_form *form, uint32_t *rows, uint32_t *cols,
			 enum mfma_dtype *dtype, char *err, size_t errlen);

#endif
