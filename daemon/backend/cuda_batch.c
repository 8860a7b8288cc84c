/* A batched launch's operands on an NVIDIA GPU (cuda_batch.h).
 *
 * Each request's B, C and D move as one block (the parts one after the
 * other in a parts' buffer, mfma_gemm_parts_copy) and nv_batch_cols joins
 * or splits the columns on the device: the host makes a few large copies,
 * not one per request per row.  When every part of an operand lies in host
 * memory the device maps (registered regions), nv_copy_spans moves all of
 * them across the bus in one launch: not one DMA copy per part (each costs
 * microseconds to start: on the H200 123 single-column parts of 16 KiB
 * took 425 us one by one), and not through the staging pool (a host copy
 * of every byte on the device's worker, which bounded the batched rate at
 * N=8).  Other parts go through the pool.
 *
 * Buffers: three slots for what the copies in use (two for pipelined
 * batches, whose gathers run on the copy stream while the device's stream
 * may still read the other slot; one for batches in step), and one joined
 * D and one parts' buffer for D, which only the device's stream uses. */
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
enum { PIPELINED = 2, IN_STEP = PIPELINED, NSLOTS };

struct cuda_batch_slot {
	/* The parts' blocks of B or C; the tables (the column table of
	 * nv_batch_cols, then the spans of each mapped operand) and their
	 * pinned host copy (pipelined); the joined B and C. */
	struct cuda_buf parts, tables, joined_b, joined_c;
	unsigned char *host;
	size_t host_cap;
	size_t spans_at[OP_COUNT]; /* where an operand's spans start in tables; 0: not mapped */
	uint64_t most[OP_COUNT];   /* its largest part, bytes */
	struct cuda_marks *marks;  /* pipelined */
	const char *variant;
	bool busy;
};

struct cuda_batch {
	struct nv_util util;
	CUstream copy; /* the pipelined gathers */
	struct cuda_batch_slot slot[NSLOTS];
	struct cuda_buf joined_d, parts_d;
	unsigned next;
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

uint32_t cuda_batch_width(uint32_t n)
{
	/* 16, 32, 64, 128, 192, 256, 384, 512, 768, ...: powers of two and
	 * one and a half times them, so at most a third of the columns are
	 * padding past 128, and ten widths cover up to 1536 columns. */
	uint32_t w = 16;
	while (w < n && w <= UINT32_MAX / 2) {
		uint32_t half = w + w / 2;
		if (w >= 128 && n <= half)
			return half;
		w *= 2;
	}
	return w < n ? n : w;
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
	CUresult r = nv_drv.cuStreamCreate(&o->copy, CU_STREAM_NON_BLOCKING);
	if (r != CUDA_SUCCESS) {
		o->copy = NULL;
		rc = cuda_fail(r, err, errlen, "cuStreamCreate(batch copies)");
	}
	for (int i = 0; i < PIPELINED && rc == 0; i++)
		rc = cuda_marks_new(&o->slot[i].marks, err, errlen);
	if (rc < 0) {
		cuda_batch_close(o);
		return rc;
	}
	*b = o;
	return 0;
}

void cuda_batch_close(struct cuda_batch *b)
{
	if (!b)
		return;
	if (b->copy) {
		nv_drv.cuStreamSynchronize(b->copy);
		nv_drv.cuStreamDestroy(b->copy);
	}
	for (int i = 0; i < NSLOTS; i++) {
		struct cuda_batch_slot *s = &b->slot[i];
		cuda_buf_free(&s->parts);
		cuda_buf_free(&s->tables);
		cuda_buf_free(&s->joined_b);
		cuda_buf_free(&s->joined_c);
		if (s->host)
			nv_drv.cuMemFreeHost(s->host);
		cuda_marks_free(s->marks);
	}
	cuda_buf_free(&b->joined_d);
	cuda_buf_free(&b->parts_d);
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

static void operands(const struct mfma_gemm *g, struct parts_io io[OP_COUNT])
{
	size_t es = mfma_dtype_size(g->in_dtype), os = mfma_dtype_size(g->out_dtype);
	io[OP_B] = (struct parts_io){ g, 'b', g->k, es };
	io[OP_C] = (struct parts_io){ g, 'c', g->m, os };
	io[OP_D] = (struct parts_io){ g, 'd', g->m, os };
}

/* Fills the spans of operand op between the parts' regions and the parts'
 * buffer at parts; false when some part is not mapped. */
static bool map_spans(struct cuda_dev *dev, CUdeviceptr parts, const struct parts_io *io, int op,
		      struct nv_copy_span *sp, uint64_t *most)
{
	*most = 0;
	for (uint32_t i = 0; i < io->g->nparts; i++) {
		const struct mfma_gemm_part *pt = &io->g->parts[i];
		size_t len = io->rows * pt->n * io->es;
		CUdeviceptr host;
		if (!cuda_dev_mapped(dev, part_ptr(pt, op), len, &host))
			return false;
		sp[i] = op == OP_D ? (struct nv_copy_span){ parts, host, len }
				   : (struct nv_copy_span){ host, parts, len };
		parts += len;
		if (len > *most)
			*most = len;
	}
	return true;
}

/* The slot's tables: the column table and the spans of every operand the
 * device maps, in one copy (through the pool on the device's stream in
 * step; from the slot's pinned copy on the copy stream pipelined).
 * -EAGAIN pipelined when an operand is not mapped. */
static int upload_tables(struct cuda_dev *dev, struct cuda_batch *o, struct cuda_batch_slot *s,
			 const struct parts_io io[OP_COUNT], bool pipelined, char *err,
			 size_t errlen)
{
	const struct mfma_gemm *g = io[OP_B].g;
	const size_t cols_bytes = (size_t)g->n * 2 * sizeof(int32_t);
	const size_t span_bytes = (size_t)g->nparts * sizeof(struct nv_copy_span);
	const size_t need = ((cols_bytes + 15) & ~(size_t)15) + OP_COUNT * span_bytes;
	unsigned char *tab;
	if (pipelined) {
		if (s->host_cap < need) {
			if (s->host)
				nv_drv.cuMemFreeHost(s->host);
			s->host = NULL;
			s->host_cap = 0;
			void *p = NULL;
			CUresult r = nv_drv.cuMemHostAlloc(&p, need, 0);
			if (r != CUDA_SUCCESS)
				return cuda_fail(r, err, errlen, "cuMemHostAlloc(batch tables)");
			s->host = p;
			s->host_cap = need;
		}
		tab = s->host;
	} else if (!(tab = malloc(need))) {
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
	size_t at = (cols_bytes + 15) & ~(size_t)15;
	int rc = 0;
	for (int op = 0; op < OP_COUNT; op++) {
		s->spans_at[op] = 0;
		if (op == OP_C && g->beta == 0.0f)
			continue;
		CUdeviceptr parts = op == OP_D ? o->parts_d.p : s->parts.p;
		if (map_spans(dev, parts, &io[op], op, (struct nv_copy_span *)(void *)(tab + at),
			      &s->most[op])) {
			s->spans_at[op] = at;
			at += span_bytes;
		} else if (pipelined) {
			rc = -EAGAIN;
		}
	}
	if (rc == 0)
		rc = cuda_buf_need(&s->tables, at, "batch tables", NULL, err, errlen);
	if (rc == 0 && pipelined) {
		CUresult r = nv_drv.cuMemcpyHtoDAsync(s->tables.p, tab, at, o->copy);
		if (r != CUDA_SUCCESS)
			rc = cuda_fail(r, err, errlen, "cuMemcpyHtoDAsync(batch tables)");
	} else if (rc == 0) {
		rc = cuda_dev_copy_in(dev, s->tables.p, at, tab, 1, at, err, errlen);
	}
	if (!pipelined)
		free(tab);
	return rc;
}

static int copy_spans(struct cuda_batch *o, const struct cuda_batch_slot *s, uint32_t nparts, int op,
		      CUstream st, char *err, size_t errlen)
{
	struct nv_copy_params p = { .spans = s->tables.p + s->spans_at[op], .count = (int32_t)nparts };
	int rc = nv_launch_copy_spans(&o->util, st, &p, s->most[op]);
	if (rc < 0)
		snprintf(err, errlen, "cuda: launching the copy of a batch's parts %s failed (%d)",
			 op == OP_D ? "out" : "in", rc);
	return rc;
}

/* Joins (dir 0) or splits (dir 1) one operand between its parts' buffer
 * and the joined matrix (rows x the joined width, a request's layout). */
static int batch_cols(struct cuda_batch *o, const struct cuda_batch_slot *s,
		      const struct parts_io *io, CUdeviceptr parts, CUdeviceptr joined, int dir,
		      CUstream st, char *err, size_t errlen)
{
	const struct mfma_gemm *g = io->g;
	struct nv_batch_params p = {
		.parts = parts, .joined = joined,
		.col_start = s->tables.p, .col_n = s->tables.p + (size_t)g->n * sizeof(int32_t),
		.rows = (int32_t)io->rows, .cols = (int32_t)g->n, .ld = (int32_t)cuda_batch_width(g->n),
		.es = (int32_t)io->es, .dir = dir,
	};
	int rc = nv_launch_batch_cols(&o->util, st, &p);
	if (rc < 0)
		snprintf(err, errlen, "cuda: launching the batch %s failed (%d)",
			 dir ? "split of D" : "join", rc);
	return rc;
}

/* One operand in: its parts into the slot's parts' buffer, then joined.
 * The parts' buffer is reused in stream order: C's copy starts after B's
 * join has read it. */
static int operand_in(struct cuda_dev *dev, struct cuda_batch *o, struct cuda_batch_slot *s,
		      const struct parts_io *io, int op, CUstream st, char *err, size_t errlen)
{
	int rc = s->spans_at[op]
			 ? copy_spans(o, s, io->g->nparts, op, st, err, errlen)
			 : cuda_dev_copy_in_with(dev, s->parts.p, io->rows * io->g->n * io->es,
						 give_parts, (void *)(uintptr_t)io, err, errlen);
	CUdeviceptr joined = op == OP_B ? s->joined_b.p : s->joined_c.p;
	return rc < 0 ? rc : batch_cols(o, s, io, s->parts.p, joined, 0, st, err, errlen);
}

/* What every batch needs before its copies in: the slot's and the shared
 * buffers at the joined width. */
static int buffers(struct cuda_batch *o, struct cuda_batch_slot *s, const struct parts_io io[OP_COUNT],
		   size_t *bbytes, size_t *dbytes, char *err, size_t errlen)
{
	const struct mfma_gemm *g = io[OP_B].g;
	const uint32_t width = cuda_batch_width(g->n);
	*bbytes = io[OP_B].rows * width * io[OP_B].es;
	*dbytes = io[OP_D].rows * width * io[OP_D].es;
	int rc;
	/* The parts' own blocks fit in what the joined matrices take. */
	if ((rc = cuda_buf_need(&s->parts, *bbytes > *dbytes ? *bbytes : *dbytes, "a batch's parts",
				NULL, err, errlen)) < 0 ||
	    (rc = cuda_buf_need(&s->joined_b, *bbytes, "a batch's B", NULL, err, errlen)) < 0 ||
	    (g->beta != 0.0f &&
	     (rc = cuda_buf_need(&s->joined_c, *dbytes, "a batch's C", NULL, err, errlen)) < 0) ||
	    (rc = cuda_buf_need(&o->joined_d, *dbytes, "a batch's D", NULL, err, errlen)) < 0 ||
	    (rc = cuda_buf_need(&o->parts_d, *dbytes, "a batch's D parts", NULL, err, errlen)) < 0)
		return rc;
	return 0;
}

/* Sets the joined operands on the device and describes the GEMM over
 * them. */
static void hand_over(struct cuda_batch *o, struct cuda_dev *dev, const struct cuda_batch_slot *s,
		      const struct mfma_gemm *g, size_t bbytes, size_t dbytes, struct mfma_gemm *one)
{
	const bool with_c = g->beta != 0.0f;
	const struct cuda_dev_range on[] = { { s->joined_b.p, bbytes },
					     { s->joined_c.p, with_c ? dbytes : 0 },
					     { o->joined_d.p, dbytes } };
	cuda_dev_on_device(dev, on, OP_COUNT);
	*one = *g;
	one->n = cuda_batch_width(g->n);
	one->nparts = 0;
	one->parts = NULL;
	one->b = (const void *)(uintptr_t)s->joined_b.p;
	one->c = with_c ? (const void *)(uintptr_t)s->joined_c.p : NULL;
	one->d = (void *)(uintptr_t)o->joined_d.p;
}

/* The split of D into the parts and their copy out, queued on the
 * device's stream; the copy out through the pool waits, the spans not. */
static int split_out(struct cuda_batch *o, struct cuda_dev *dev, const struct cuda_batch_slot *s,
		     const struct mfma_gemm *g, char *err, size_t errlen)
{
	struct parts_io io[OP_COUNT];
	operands(g, io);
	const CUstream st = cuda_dev_stream(dev);
	int rc = batch_cols(o, s, &io[OP_D], o->parts_d.p, o->joined_d.p, 1, st, err, errlen);
	if (rc < 0)
		return rc;
	if (!s->spans_at[OP_D])
		return cuda_dev_copy_out_with(dev, o->parts_d.p, io[OP_D].rows * g->n * io[OP_D].es,
					      take_parts, (void *)(uintptr_t)&io[OP_D], err, errlen);
	return copy_spans(o, s, g->nparts, OP_D, st, err, errlen);
}

int cuda_batch_in(struct cuda_batch *o, struct cuda_dev *dev, const struct mfma_gemm *g,
		  struct mfma_gemm *one, char *err, size_t errlen)
{
	struct cuda_batch_slot *s = &o->slot[IN_STEP];
	struct parts_io io[OP_COUNT];
	operands(g, io);
	const CUstream st = cuda_dev_stream(dev);
	size_t bbytes, dbytes;
	int rc;
	/* The batch's start: the provider's own START mark is skipped while
	 * the operands are on the device, so h2d counts the gathers. */
	if ((rc = buffers(o, s, io, &bbytes, &dbytes, err, errlen)) < 0 ||
	    (rc = cuda_dev_mark(dev, CUDA_MARK_START, err, errlen)) < 0 ||
	    (rc = upload_tables(dev, o, s, io, false, err, errlen)) < 0 ||
	    (rc = operand_in(dev, o, s, &io[OP_B], OP_B, st, err, errlen)) < 0 ||
	    (g->beta != 0.0f && (rc = operand_in(dev, o, s, &io[OP_C], OP_C, st, err, errlen)) < 0))
		return rc;
	hand_over(o, dev, s, g, bbytes, dbytes, one);
	return 0;
}

int cuda_batch_out(struct cuda_batch *o, struct cuda_dev *dev, const struct mfma_gemm *g, char *err,
		   size_t errlen)
{
	cuda_dev_on_device(dev, NULL, 0);
	const struct cuda_batch_slot *s = &o->slot[IN_STEP];
	int rc = split_out(o, dev, s, g, err, errlen);
	if (rc < 0 || !s->spans_at[OP_D])
		return rc;
	return cuda_dev_copy_out_end(dev, err, errlen);
}

void cuda_batch_abort(struct cuda_batch *b, struct cuda_dev *dev, struct cuda_batch_slot *slot)
{
	(void)b;
	cuda_dev_on_device(dev, NULL, 0);
	cuda_dev_use_marks(dev, NULL);
	if (slot)
		slot->busy = false;
}

int cuda_batch_start(struct cuda_batch *o, struct cuda_dev *dev, const struct mfma_gemm *g,
		     struct mfma_gemm *one, struct cuda_batch_slot **slot, char *err, size_t errlen)
{
	struct cuda_batch_slot *s = &o->slot[o->next];
	if (s->busy && (s = &o->slot[o->next ^ 1])->busy)
		return -EAGAIN;
	struct parts_io io[OP_COUNT];
	operands(g, io);
	size_t bbytes, dbytes;
	int rc;
	/* The slot's last batch was waited for: its buffers and pinned
	 * tables are free.  Growing a buffer waits for the device. */
	if ((rc = buffers(o, s, io, &bbytes, &dbytes, err, errlen)) < 0 ||
	    (rc = cuda_marks_gathering(s->marks, o->copy, false, err, errlen)) < 0 ||
	    (rc = upload_tables(dev, o, s, io, true, err, errlen)) < 0 ||
	    (rc = operand_in(dev, o, s, &io[OP_B], OP_B, o->copy, err, errlen)) < 0 ||
	    (g->beta != 0.0f && (rc = operand_in(dev, o, s, &io[OP_C], OP_C, o->copy, err, errlen)) < 0) ||
	    (rc = cuda_marks_gathering(s->marks, o->copy, true, err, errlen)) < 0 ||
	    (rc = cuda_dev_wait_gathered(dev, s->marks, err, errlen)) < 0) {
		if (rc != -EAGAIN)
			nv_drv.cuStreamSynchronize(o->copy);
		return rc;
	}
	s->busy = true;
	o->next = (unsigned)(s - o->slot) ^ 1;
	hand_over(o, dev, s, g, bbytes, dbytes, one);
	cuda_dev_use_marks(dev, s->marks);
	*slot = s;
	return 0;
}

int cuda_batch_launched(struct cuda_batch *o, struct cuda_dev *dev, const struct mfma_gemm *g,
			struct cuda_batch_slot *s, const char *variant, char *err, size_t errlen)
{
	cuda_dev_on_device(dev, NULL, 0);
	int rc = split_out(o, dev, s, g, err, errlen);
	if (rc == 0)
		rc = cuda_dev_copy_out_mark(dev, err, errlen);
	cuda_dev_use_marks(dev, NULL);
	s->variant = variant;
	return rc;
}

int cuda_batch_wait(struct cuda_batch_slot *s, struct backend_timing *t, char *err, size_t errlen)
{
	int rc = cuda_marks_wait(s->marks, t, err, errlen);
	t->variant = s->variant;
	s->busy = false;
	return rc;
}
