/* A batched launch's operands on an NVIDIA GPU (cuda_batch.h).
 *
 * Each request's B, C and D move as one block (the parts one after the
 * other in the parts' buffer, mfma_gemm_parts_copy) and nv_batch_cols
 * joins or splits the columns on the device: the host makes a few large
 * copies, not one per request per row.  When every part of an operand lies
 * in host memory the device maps (registered regions), nv_copy_spans moves
 * all of them across the bus in one launch: not one DMA copy per part
 * (each costs microseconds to start: on the H200 123 single-column parts
 * of 16 KiB took 425 us one by one), and not through the staging pool (a
 * host copy of every byte on the device's worker, which bounded the
 * batched rate at N=8).  Other parts go through the pool. */
#include "cuda_batch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mfma_dtype.h"
#include "mfma_gemm.h"
#include "nv_gemm.h"
#include "nv_layout.h"
#include "nv_plan.h"

enum { OP_B, OP_C, OP_D, OP_COUNT };

struct cuda_batch {
	struct nv_util util;
	/* The parts' blocks one after the other; the tables (column table of
	 * nv_batch_cols, then the spans of each mapped operand); the joined
	 * B, C and D. */
	struct cuda_buf parts, tables, joined[OP_COUNT];
	size_t spans_at[OP_COUNT]; /* where an operand's spans start in tables; 0: not mapped */
	uint64_t most[OP_COUNT];   /* its largest part, bytes */
};

/* One operand of the batch: which part pointer, its rows, element size. */
struct parts_io {
	const struct mfma_gemm *g;
	char which;
	size_t rows, es;
};

bool cuda_batch_usable(int cc)
{
	return nv_image_find(nv_images, nv_image_count, nv_unit_name(NV_UNIT_UTIL), cc) != NULL;
}

int cuda_batch_open(struct cuda_dev *dev, struct cuda_batch **b, char *err, size_t errlen)
{
	*b = NULL;
	struct cuda_batch *o = calloc(1, sizeof(*o));
	if (!o) {
		snprintf(err, errlen, "cuda: out of host memory");
		return -ENOMEM;
	}
	int rc = nv_util_load(&o->util, cuda_dev_device(dev), err, errlen);
	if (rc < 0) {
		free(o);
		return rc;
	}
	*b = o;
	return 0;
}

void cuda_batch_close(struct cuda_batch *b)
{
	if (!b)
		return;
	cuda_buf_free(&b->parts);
	cuda_buf_free(&b->tables);
	for (int i = 0; i < OP_COUNT; i++)
		cuda_buf_free(&b->joined[i]);
	nv_util_unload(&b->util);
	free(b);
}

static void give_parts(void *arg, size_t off, unsigned char *dst, size_t len)
{
	const struct parts_io *io = arg;
	mfma_gemm_parts_copy(io->g, io->which, io->rows, io->es, off, dst, len, 0);
}

static void take_parts(void *arg, size_t off, const unsigned char *src, size_t len)
{
	const struct parts_io *io = arg;
	mfma_gemm_parts_copy(io->g, io->which, io->rows, io->es, off, (void *)(uintptr_t)src, len, 1);
}

static const void *part_ptr(const struct mfma_gemm_part *pt, int op)
{
	return op == OP_B ? pt->b : op == OP_C ? pt->c : pt->d;
}

/* Fills the spans of operand op between the parts' regions and the parts'
 * buffer; false when some part is not mapped. */
static bool map_spans(struct cuda_dev *dev, const struct cuda_batch *o, const struct parts_io *io,
		      int op, struct nv_copy_span *sp, uint64_t *most)
{
	CUdeviceptr at = o->parts.p;
	*most = 0;
	for (uint32_t i = 0; i < io->g->nparts; i++) {
		const struct mfma_gemm_part *pt = &io->g->parts[i];
		size_t len = io->rows * pt->n * io->es;
		CUdeviceptr host;
		if (!cuda_dev_mapped(dev, part_ptr(pt, op), len, &host))
			return false;
		sp[i] = op == OP_D ? (struct nv_copy_span){ at, host, len }
				   : (struct nv_copy_span){ host, at, len };
		at += len;
		if (len > *most)
			*most = len;
	}
	return true;
}

/* The column table and the spans of the mapped operands, in one copy. */
static int upload_tables(struct cuda_dev *dev, struct cuda_batch *o, const struct parts_io io[OP_COUNT],
			 char *err, size_t errlen)
{
	const struct mfma_gemm *g = io[OP_B].g;
	const size_t cols_bytes = (size_t)g->n * 2 * sizeof(int32_t);
	const size_t span_bytes = (size_t)g->nparts * sizeof(struct nv_copy_span);
	size_t at = (cols_bytes + 15) & ~(size_t)15;
	unsigned char *tab = malloc(at + OP_COUNT * span_bytes);
	if (!tab) {
		snprintf(err, errlen, "cuda: out of host memory for a batch's tables");
		return -ENOMEM;
	}
	int32_t *cols = (int32_t *)(void *)tab;
	uint32_t j = 0;
	for (uint32_t i = 0; i < g->nparts; i++)
		for (uint32_t c = 0; c < g->parts[i].n; c++, j++) {
			cols[j] = (int32_t)(j - c);
			cols[g->n + j] = (int32_t)g->parts[i].n;
		}
	for (int op = 0; op < OP_COUNT; op++) {
		o->spans_at[op] = 0;
		if (op == OP_C && g->beta == 0.0f)
			continue;
		if (map_spans(dev, o, &io[op], op, (struct nv_copy_span *)(void *)(tab + at),
			      &o->most[op])) {
			o->spans_at[op] = at;
			at += span_bytes;
		}
	}
	if (cuda_dev_left_running(dev) && at > o->tables.cap)
		cuda_dev_drain(dev); /* as for the operands' buffers, cuda_batch_in */
	int rc = cuda_buf_need(&o->tables, at, "batch tables", NULL, err, errlen);
	if (rc == 0)
		rc = cuda_dev_copy_in(dev, o->tables.p, at, tab, 1, at, err, errlen);
	free(tab);
	return rc;
}

static int copy_spans(struct cuda_dev *dev, struct cuda_batch *o, uint32_t nparts, int op, char *err,
		      size_t errlen)
{
	struct nv_copy_params p = { .spans = o->tables.p + o->spans_at[op], .count = (int32_t)nparts };
	int rc = nv_launch_copy_spans(&o->util, cuda_dev_stream(dev), &p, o->most[op]);
	if (rc < 0)
		snprintf(err, errlen, "cuda: launching the copy of a batch's parts %s failed (%d)",
			 op == OP_D ? "out" : "in", rc);
	return rc;
}

/* Joins (dir 0) or splits (dir 1) one operand between the parts' buffer
 * and the joined matrix (rows x the joined width, a request's layout). */
static int batch_cols(struct cuda_dev *dev, struct cuda_batch *o, const struct parts_io *io, int op,
		      int dir, char *err, size_t errlen)
{
	const struct mfma_gemm *g = io->g;
	struct nv_batch_params p = {
		.parts = o->parts.p, .joined = o->joined[op].p,
		.col_start = o->tables.p, .col_n = o->tables.p + (size_t)g->n * sizeof(int32_t),
		.rows = (int32_t)io->rows, .cols = (int32_t)g->n, .ld = (int32_t)cuda_batch_width(g->n),
		.es = (int32_t)io->es, .dir = dir,
	};
	int rc = nv_launch_batch_cols(&o->util, cuda_dev_stream(dev), &p);
	if (rc < 0)
		snprintf(err, errlen, "cuda: launching the batch %s failed (%d)",
			 dir ? "split of D" : "join", rc);
	return rc;
}

/* One operand in: its parts into the parts' buffer, then joined.  The
 * parts' buffer is reused in stream order: C's copy starts after B's
 * join has read it. */
static int operand_in(struct cuda_dev *dev, struct cuda_batch *o, const struct parts_io *io, int op,
		      char *err, size_t errlen)
{
	int rc = o->spans_at[op]
			 ? copy_spans(dev, o, io->g->nparts, op, err, errlen)
			 : cuda_dev_copy_in_with(dev, o->parts.p, io->rows * io->g->n * io->es,
						 give_parts, (void *)(uintptr_t)io, err, errlen);
	return rc < 0 ? rc : batch_cols(dev, o, io, op, 0, err, errlen);
}

static void operands(const struct mfma_gemm *g, struct parts_io io[OP_COUNT])
{
	size_t es = mfma_dtype_size(g->in_dtype), os = mfma_dtype_size(g->out_dtype);
	io[OP_B] = (struct parts_io){ g, 'b', g->k, es };
	io[OP_C] = (struct parts_io){ g, 'c', g->m, os };
	io[OP_D] = (struct parts_io){ g, 'd', g->m, os };
}

int cuda_batch_in(struct cuda_batch *o, struct cuda_dev *dev, const struct mfma_gemm *g,
		  struct mfma_gemm *one, char *err, size_t errlen)
{
	struct parts_io io[OP_COUNT];
	operands(g, io);
	const uint32_t width = cuda_batch_width(g->n);
	const size_t bbytes = io[OP_B].rows * width * io[OP_B].es;
	const size_t dbytes = io[OP_D].rows * width * io[OP_D].es;
	const bool with_c = g->beta != 0.0f;
	int rc;
	/* A buffer that grows is freed and made again: not under a launch
	 * left running, which may still read or write it. */
	const size_t pbytes = bbytes > dbytes ? bbytes : dbytes;
	if (cuda_dev_left_running(dev) &&
	    (pbytes > o->parts.cap || bbytes > o->joined[OP_B].cap ||
	     (with_c && dbytes > o->joined[OP_C].cap) || dbytes > o->joined[OP_D].cap))
		cuda_dev_drain(dev);
	/* The parts' own blocks fit in what the joined matrices take. */
	if ((rc = cuda_buf_need(&o->parts, pbytes, "a batch's parts", NULL, err, errlen)) < 0 ||
	    (rc = cuda_buf_need(&o->joined[OP_B], bbytes, "a batch's B", NULL, err, errlen)) < 0 ||
	    (with_c && (rc = cuda_buf_need(&o->joined[OP_C], dbytes, "a batch's C", NULL, err,
					  errlen)) < 0) ||
	    (rc = cuda_buf_need(&o->joined[OP_D], dbytes, "a batch's D", NULL, err, errlen)) < 0)
		return rc;
	/* The batch's start: the provider's own START mark is skipped while
	 * the operands are on the device, so h2d counts the gathers. */
	if ((rc = cuda_dev_mark(dev, CUDA_MARK_START, err, errlen)) < 0 ||
	    (rc = upload_tables(dev, o, io, err, errlen)) < 0 ||
	    (rc = operand_in(dev, o, &io[OP_B], OP_B, err, errlen)) < 0 ||
	    (with_c && (rc = operand_in(dev, o, &io[OP_C], OP_C, err, errlen)) < 0))
		return rc;
	const struct cuda_dev_range on[] = { { o->joined[OP_B].p, bbytes },
					     { o->joined[OP_C].p, with_c ? dbytes : 0 },
					     { o->joined[OP_D].p, dbytes } };
	cuda_dev_on_device(dev, on, OP_COUNT);
	*one = *g;
	one->n = width;
	one->nparts = 0;
	one->parts = NULL;
	one->b = (const void *)(uintptr_t)o->joined[OP_B].p;
	one->c = with_c ? (const void *)(uintptr_t)o->joined[OP_C].p : NULL;
	one->d = (void *)(uintptr_t)o->joined[OP_D].p;
	return 0;
}

int cuda_batch_out(struct cuda_batch *o, struct cuda_dev *dev, const struct mfma_gemm *g, int *left,
		   char *err, size_t errlen)
{
	const int may_leave = *left;
	*left = 0;
	cuda_dev_on_device(dev, NULL, 0);
	struct parts_io io[OP_COUNT];
	operands(g, io);
	int rc = batch_cols(dev, o, &io[OP_D], OP_D, 1, err, errlen);
	if (rc < 0)
		return rc;
	if (!o->spans_at[OP_D])
		return cuda_dev_copy_out_with(dev, o->parts.p, io[OP_D].rows * g->n * io[OP_D].es,
					      take_parts, (void *)(uintptr_t)&io[OP_D], err, errlen);
	rc = copy_spans(dev, o, g->nparts, OP_D, err, errlen);
	if (rc < 0)
		return rc;
	if (!may_leave)
		return cuda_dev_copy_out_end(dev, err, errlen);
	int set;
	if ((rc = cuda_dev_copy_out_leave(dev, &set, err, errlen)) == 0)
		*left = set + 1;
	return rc;
}

void cuda_batch_abort(struct cuda_dev *dev)
{
	cuda_dev_on_device(dev, NULL, 0);
}
