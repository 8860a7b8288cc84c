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
 * batched rate at N=8).  Other parts go through the pool.
 *
 * An operand whose mapped parts are all small (cuda.dma_parts_kb) moves by
 * the copy engines instead: one cuMemcpyBatchAsync call, every part a copy
 * of its own.  The copy kernel reads the host's memory across the bus from
 * the SMs, a small part from few of them; the copy engines take such
 * parts faster, but the driver's host time grows with every part, and
 * large parts the kernel moves as fast (measured on an H200:
 * bench/RESULTS.md).  Without cuMemcpyBatchAsync in the driver the kernel
 * moves them all.
 *
 * Parts in clients' regions (cuda.region_copies, on by default) move by the
 * copy engines whatever their size, and a batch whose B (and C) all lie in
 * regions is gathered on the copy stream below: with the copy stream the
 * engines carry one batch in while the SMs run the previous GEMM, which
 * the copy kernel could not (it shares the SMs with the GEMM); measured
 * faster on an H200 for regions, slower for request frames, which keep the
 * kernel (bench/RESULTS.md).
 *
 * With cuda.copy_stream, a batch whose B (and C) all lie in mapped memory
 * is gathered on a stream of its own, into the other of two sets of
 * buffers, while the device's stream still runs the previous batch's GEMM
 * and copy out: the bus carries the next batch in and the last one out at
 * once.  The device's stream waits for the gather (an event) before the
 * GEMM; the copy stream waits, before it refills a set, for the copy out
 * of the batch that last used it (another).  Off, one set and the device's
 * stream alone, as before.
 *
 * With two sets (the copy stream there) and cuda.out_stream, a batch whose
 * D parts all lie in mapped memory is split and copied out on a third
 * stream, after the GEMM (an event) and beside the next batch's GEMM: the
 * device's stream then runs GEMMs, not the copies across the bus between
 * them (measured on an H100 with single-column requests on a 16384 x 16384
 * weight: the device's worker waited for the stream 62-67% of the time,
 * the copies in and out taking about as long as the GEMM).  The set's
 * freed event and the launch's end mark are recorded on that stream, and
 * whichever stream next fills the set waits for freed first. */
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

/* One batch's buffers on the device. */
struct batch_set {
	/* The parts' blocks one after the other; the tables (column table of
	 * nv_batch_cols, then the spans of each mapped operand); the joined
	 * B, C and D. */
	struct cuda_buf parts, tables, joined[OP_COUNT];
	size_t spans_at[OP_COUNT]; /* where an operand's spans start in tables; 0: not mapped */
	uint64_t most[OP_COUNT];   /* its largest part, bytes */
	bool region[OP_COUNT];     /* all its parts lie in clients' regions */
	/* The copy stream's: the tables in pinned host memory (copied from
	 * there by DMA, so kept until the copy is done: gathered); gathered,
	 * recorded on the copy stream after the gather; freed, on the
	 * device's stream after the copy out of the batch that used the set
	 * (used: recorded at least once). */
	unsigned char *host;
	size_t host_cap;
	CUevent gathered, freed;
	bool used;
	/* With the out stream: recorded on the device's stream after the
	 * batch's GEMM, for the out stream to wait on. */
	CUevent computed;
};

/* The arrays of one cuMemcpyBatchAsync call, grown as needed. */
struct dma_list {
	CUdeviceptr *dst, *src;
	size_t *len;
	size_t cap;
};

struct cuda_batch {
	struct nv_util util;
	struct batch_set set[2];
	/* The copy stream; NULL: cuda.copy_stream and region copies both
	 * off, set 0 alone. */
	CUstream in;
	/* The out stream (cuda.out_stream, with the copy stream); NULL: D is
	 * split and copied out on the device's stream. */
	CUstream out;
	int cur;      /* the set of the batch between cuda_batch_in and its end */
	int next;     /* the set the next batch takes (with the copy stream) */
	bool copy_all; /* cuda.copy_stream: every mapped batch gathers on it */
	uint64_t dma_part; /* cuda.dma_parts_kb in bytes; 0: no copy engines */
	bool region;  /* cuda.region_copies, and the driver has the copy engines' call */
	struct dma_list dl;
	/* Without the copy stream: the host copy of a batch's tables,
	 * reused from batch to batch (the pool copies it before it returns). */
	unsigned char *scratch;
	size_t scratch_cap;
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

/* The copy stream and its events. */
static int open_copy_stream(struct cuda_batch *o, char *err, size_t errlen)
{
	CUresult r = nv_drv.cuStreamCreate(&o->in, CU_STREAM_NON_BLOCKING);
	if (r != CUDA_SUCCESS) {
		o->in = NULL;
		return cuda_fail(r, err, errlen, "cuStreamCreate(copy stream)");
	}
	for (int s = 0; s < 2; s++) {
		if ((r = nv_drv.cuEventCreate(&o->set[s].gathered, CU_EVENT_DISABLE_TIMING)) !=
			    CUDA_SUCCESS ||
		    (r = nv_drv.cuEventCreate(&o->set[s].freed, CU_EVENT_DISABLE_TIMING)) !=
			    CUDA_SUCCESS)
			return cuda_fail(r, err, errlen, "cuEventCreate(copy stream)");
	}
	return 0;
}

/* The out stream and its events (after the copy stream's). */
static int open_out_stream(struct cuda_batch *o, char *err, size_t errlen)
{
	CUresult r = nv_drv.cuStreamCreate(&o->out, CU_STREAM_NON_BLOCKING);
	if (r != CUDA_SUCCESS) {
		o->out = NULL;
		return cuda_fail(r, err, errlen, "cuStreamCreate(out stream)");
	}
	for (int s = 0; s < 2; s++)
		if ((r = nv_drv.cuEventCreate(&o->set[s].computed, CU_EVENT_DISABLE_TIMING)) !=
		    CUDA_SUCCESS)
			return cuda_fail(r, err, errlen, "cuEventCreate(out stream)");
	return 0;
}

bool cuda_batch_dma_usable(void)
{
#if NV_HAVE_BATCH_COPY
	return nv_drv.cuMemcpyBatchAsync != NULL;
#else
	return false;
#endif
}

int cuda_batch_open(struct cuda_dev *dev, const struct cuda_batch_cfg *cfg, struct cuda_batch **b,
		    char *err, size_t errlen)
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
	o->copy_all = cfg->copy_stream;
	o->dma_part = cuda_batch_dma_usable() ? cfg->dma_part : 0;
	o->region = cfg->region_copies && cuda_batch_dma_usable();
	if (((o->copy_all || o->region) && (rc = open_copy_stream(o, err, errlen)) < 0) ||
	    (o->in && cfg->out_stream && (rc = open_out_stream(o, err, errlen)) < 0)) {
		cuda_batch_close(o);
		return rc;
	}
	*b = o;
	return 0;
}

/* Waits for the copy and out streams, those open. */
static void wait_own_streams(struct cuda_batch *o)
{
	if (o->in)
		nv_drv.cuStreamSynchronize(o->in);
	if (o->out)
		nv_drv.cuStreamSynchronize(o->out);
}

void cuda_batch_close(struct cuda_batch *b)
{
	if (!b)
		return;
	wait_own_streams(b);
	for (int s = 0; s < 2; s++) {
		struct batch_set *st = &b->set[s];
		cuda_buf_free(&st->parts);
		cuda_buf_free(&st->tables);
		for (int i = 0; i < OP_COUNT; i++)
			cuda_buf_free(&st->joined[i]);
		if (st->host)
			nv_drv.cuMemFreeHost(st->host);
		if (st->gathered)
			nv_drv.cuEventDestroy(st->gathered);
		if (st->freed)
			nv_drv.cuEventDestroy(st->freed);
		if (st->computed)
			nv_drv.cuEventDestroy(st->computed);
	}
	if (b->in)
		nv_drv.cuStreamDestroy(b->in);
	if (b->out)
		nv_drv.cuStreamDestroy(b->out);
	nv_util_unload(&b->util);
	free(b->dl.dst);
	free(b->dl.src);
	free(b->dl.len);
	free(b->scratch);
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

/* Fills the spans of operand op between the parts' host memory and the
 * parts' buffer of st, its largest part in *most and in *region whether
 * every part lies in a client's region; false, and *region false, when
 * some part is not mapped. */
static bool map_spans(struct cuda_dev *dev, const struct batch_set *st, const struct parts_io *io,
		      int op, struct nv_copy_span *sp, uint64_t *most, bool *region)
{
	CUdeviceptr at = st->parts.p;
	*most = 0;
	*region = true;
	for (uint32_t i = 0; i < io->g->nparts; i++) {
		const struct mfma_gemm_part *pt = &io->g->parts[i];
		size_t len = io->rows * pt->n * io->es;
		CUdeviceptr host;
		bool in_region;
		if (!cuda_dev_mapped(dev, part_ptr(pt, op), len, &host, &in_region)) {
			*region = false;
			return false;
		}
		*region = *region && in_region;
		sp[i] = op == OP_D ? (struct nv_copy_span){ at, host, len }
				   : (struct nv_copy_span){ host, at, len };
		at += len;
		if (len > *most)
			*most = len;
	}
	return true;
}

/* The bytes of g's tables: the column table, then room for the spans of
 * every operand. */
static size_t tables_bytes(const struct mfma_gemm *g)
{
	const size_t cols_bytes = (size_t)g->n * 2 * sizeof(int32_t);
	return ((cols_bytes + 15) & ~(size_t)15) + OP_COUNT * (size_t)g->nparts *
							   sizeof(struct nv_copy_span);
}

/* Lays out the column table and the spans of the mapped operands in tab
 * (tables_bytes long): the bytes used. */
static size_t fill_tables(struct cuda_dev *dev, struct batch_set *st,
			  const struct parts_io io[OP_COUNT], unsigned char *tab)
{
	const struct mfma_gemm *g = io[OP_B].g;
	const size_t cols_bytes = (size_t)g->n * 2 * sizeof(int32_t);
	const size_t span_bytes = (size_t)g->nparts * sizeof(struct nv_copy_span);
	size_t at = (cols_bytes + 15) & ~(size_t)15;
	int32_t *cols = (int32_t *)(void *)tab;
	uint32_t j = 0;
	for (uint32_t i = 0; i < g->nparts; i++)
		for (uint32_t c = 0; c < g->parts[i].n; c++, j++) {
			cols[j] = (int32_t)(j - c);
			cols[g->n + j] = (int32_t)g->parts[i].n;
		}
	for (int op = 0; op < OP_COUNT; op++) {
		st->spans_at[op] = 0;
		st->region[op] = false;
		if (op == OP_C && g->beta == 0.0f)
			continue;
		if (map_spans(dev, st, &io[op], op, (struct nv_copy_span *)(void *)(tab + at),
			      &st->most[op], &st->region[op])) {
			st->spans_at[op] = at;
			at += span_bytes;
		}
	}
	return at;
}

/* Waits for everything on the device: every stream. */
static void drain_all(struct cuda_batch *o, struct cuda_dev *dev)
{
	wait_own_streams(o);
	cuda_dev_drain(dev);
}

/* The tables on the device's stream, in one copy through the pool, from
 * the batch's scratch (kept: the copy engines' spans are read from it). */
static int upload_tables(struct cuda_batch *o, struct cuda_dev *dev, struct batch_set *st,
			 const struct parts_io io[OP_COUNT], char *err, size_t errlen)
{
	size_t need = tables_bytes(io[OP_B].g);
	if (need > o->scratch_cap) {
		unsigned char *tab = realloc(o->scratch, need);
		if (!tab) {
			snprintf(err, errlen, "cuda: out of host memory for a batch's tables");
			return -ENOMEM;
		}
		o->scratch = tab;
		o->scratch_cap = need;
	}
	size_t at = fill_tables(dev, st, io, o->scratch);
	if (cuda_dev_left_running(dev) && at > st->tables.cap)
		drain_all(o, dev); /* as for the operands' buffers, cuda_batch_in */
	int rc = cuda_buf_need(&st->tables, at, "batch tables", NULL, err, errlen);
	if (rc == 0)
		rc = cuda_dev_copy_in(dev, st->tables.p, at, o->scratch, 1, at, err, errlen);
	return rc;
}

#if NV_HAVE_BATCH_COPY
/* The host copy of the batch's tables that set st was filled from: the
 * set's own with the copy stream, else the batch's scratch. */
static const unsigned char *host_tables(const struct cuda_batch *o, const struct batch_set *st)
{
	return o->in ? st->host : o->scratch;
}

/* The spans of operand op by the copy engines: one call, a copy per part,
 * the sources read in stream order (D's parts after the split). */
static int dma_spans(struct cuda_batch *o, const struct batch_set *st, CUstream s,
		     uint32_t nparts, int op, char *err, size_t errlen)
{
	struct dma_list *l = &o->dl;
	if (nparts > l->cap) {
		CUdeviceptr *dst = realloc(l->dst, nparts * sizeof(*dst));
		if (dst)
			l->dst = dst;
		CUdeviceptr *src = realloc(l->src, nparts * sizeof(*src));
		if (src)
			l->src = src;
		size_t *len = realloc(l->len, nparts * sizeof(*len));
		if (len)
			l->len = len;
		if (!dst || !src || !len) {
			snprintf(err, errlen, "cuda: out of host memory for a batch's copy list");
			return -ENOMEM;
		}
		l->cap = nparts;
	}
	const struct nv_copy_span *sp =
		(const struct nv_copy_span *)(const void *)(host_tables(o, st) + st->spans_at[op]);
	for (uint32_t i = 0; i < nparts; i++) {
		l->dst[i] = (CUdeviceptr)sp[i].dst;
		l->src[i] = (CUdeviceptr)sp[i].src;
		l->len[i] = (size_t)sp[i].bytes;
	}
	CUmemcpyAttributes attr = { .srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM,
				    .flags = CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE };
	size_t first = 0;
	CUresult r = nv_drv.cuMemcpyBatchAsync(l->dst, l->src, l->len, nparts, &attr, &first, 1, s);
	if (r != CUDA_SUCCESS)
		return cuda_fail(r, err, errlen,
				 op == OP_D ? "cuMemcpyBatchAsync(a batch's parts out)"
					    : "cuMemcpyBatchAsync(a batch's parts in)");
	return 0;
}
#endif

/* Whether operand op of the batch in st moves as clients' regions do
 * (cuda.region_copies): every part in a region. */
static bool region_op(const struct cuda_batch *o, const struct batch_set *st, int op)
{
	return o->region && st->region[op];
}

static int copy_spans(struct cuda_batch *o, const struct batch_set *st, CUstream s,
		      uint32_t nparts, int op, char *err, size_t errlen)
{
#if NV_HAVE_BATCH_COPY
	if (st->most[op] <= o->dma_part || region_op(o, st, op))
		return dma_spans(o, st, s, nparts, op, err, errlen);
#endif
	struct nv_copy_params p = { .spans = st->tables.p + st->spans_at[op],
				    .count = (int32_t)nparts };
	int rc = nv_launch_copy_spans(&o->util, s, &p, st->most[op]);
	if (rc < 0)
		snprintf(err, errlen, "cuda: launching the copy of a batch's parts %s failed (%d)",
			 op == OP_D ? "out" : "in", rc);
	return rc;
}

/* Joins (dir 0) or splits (dir 1) one operand between the parts' buffer
 * and the joined matrix (rows x the joined width, a request's layout). */
static int batch_cols(const struct cuda_batch *o, const struct batch_set *st, CUstream s,
		      const struct parts_io *io, int op, int dir, char *err, size_t errlen)
{
	const struct mfma_gemm *g = io->g;
	struct nv_batch_params p = {
		.parts = st->parts.p, .joined = st->joined[op].p,
		.col_start = st->tables.p, .col_n = st->tables.p + (size_t)g->n * sizeof(int32_t),
		.rows = (int32_t)io->rows, .cols = (int32_t)g->n, .ld = (int32_t)cuda_batch_width(g->n),
		.es = (int32_t)io->es, .dir = dir,
	};
	int rc = nv_launch_batch_cols(&o->util, s, &p);
	if (rc < 0)
		snprintf(err, errlen, "cuda: launching the batch %s failed (%d)",
			 dir ? "split of D" : "join", rc);
	return rc;
}

/* One operand in on stream s: its parts into the parts' buffer, then
 * joined.  The parts' buffer is reused in stream order: C's copy starts
 * after B's join has read it.  Through the pool (the device's stream
 * only) when its parts are not all mapped. */
static int operand_in(struct cuda_batch *o, struct cuda_dev *dev, struct batch_set *st, CUstream s,
		      const struct parts_io *io, int op, char *err, size_t errlen)
{
	int rc = st->spans_at[op]
			 ? copy_spans(o, st, s, io->g->nparts, op, err, errlen)
			 : cuda_dev_copy_in_with(dev, st->parts.p, io->rows * io->g->n * io->es,
						 give_parts, (void *)(uintptr_t)io, err, errlen);
	return rc < 0 ? rc : batch_cols(o, st, s, io, op, 0, err, errlen);
}

static void operands(const struct mfma_gemm *g, struct parts_io io[OP_COUNT])
{
	size_t es = mfma_dtype_size(g->in_dtype), os = mfma_dtype_size(g->out_dtype);
	io[OP_B] = (struct parts_io){ g, 'b', g->k, es };
	io[OP_C] = (struct parts_io){ g, 'c', g->m, os };
	io[OP_D] = (struct parts_io){ g, 'd', g->m, os };
}

/* The gather on the copy stream: the tables from st's pinned host copy,
 * then B's and C's parts, joined; the device's stream waits for it.  The
 * set is refilled only after the copy out of the batch that last used it
 * (st->freed).  The START mark goes on the copy stream: h2d then runs
 * from the gather's start to the GEMM's, a wait for the previous batch's
 * GEMM and copy out included. */
static int gather_on_copy_stream(struct cuda_batch *o, struct cuda_dev *dev, struct batch_set *st,
				 const struct parts_io io[OP_COUNT], size_t at, bool with_c,
				 char *err, size_t errlen)
{
	CUresult r;
	int rc;
	if (st->used && (r = nv_drv.cuStreamWaitEvent(o->in, st->freed, 0)) != CUDA_SUCCESS)
		return cuda_fail(r, err, errlen, "cuStreamWaitEvent(copy stream)");
	if ((rc = cuda_dev_mark_on(dev, CUDA_MARK_START, o->in, err, errlen)) < 0)
		return rc;
	if ((r = nv_drv.cuMemcpyHtoDAsync(st->tables.p, st->host, at, o->in)) != CUDA_SUCCESS)
		return cuda_fail(r, err, errlen, "cuMemcpyHtoDAsync(batch tables)");
	if ((rc = operand_in(o, dev, st, o->in, &io[OP_B], OP_B, err, errlen)) < 0 ||
	    (with_c && (rc = operand_in(o, dev, st, o->in, &io[OP_C], OP_C, err, errlen)) < 0))
		return rc;
	if ((r = nv_drv.cuEventRecord(st->gathered, o->in)) != CUDA_SUCCESS)
		return cuda_fail(r, err, errlen, "cuEventRecord(gathered)");
	if ((r = nv_drv.cuStreamWaitEvent(cuda_dev_stream(dev), st->gathered, 0)) != CUDA_SUCCESS)
		return cuda_fail(r, err, errlen, "cuStreamWaitEvent(gathered)");
	return 0;
}

/* With the copy stream: the set's tables laid out in its pinned host copy
 * (grown as needed, once the last copy from it is done); *copy says
 * whether the copy stream gathers B and C: all mapped, with
 * cuda.copy_stream, or all in clients' regions. */
static int tables_for_copy_stream(const struct cuda_batch *o, struct cuda_dev *dev,
				  struct batch_set *st, const struct parts_io io[OP_COUNT],
				  bool with_c, size_t *at, bool *copy, char *err, size_t errlen)
{
	CUresult r;
	if (st->used && (r = nv_drv.cuEventSynchronize(st->gathered)) != CUDA_SUCCESS)
		return cuda_fail(r, err, errlen, "cuEventSynchronize(gathered)");
	size_t need = tables_bytes(io[OP_B].g);
	if (need > st->host_cap) {
		if (st->host)
			nv_drv.cuMemFreeHost(st->host);
		st->host = NULL;
		st->host_cap = 0;
		void *h = NULL;
		if ((r = nv_drv.cuMemHostAlloc(&h, need, 0)) != CUDA_SUCCESS)
			return cuda_fail(r, err, errlen, "cuMemHostAlloc(batch tables)");
		st->host = h;
		st->host_cap = need;
	}
	*at = fill_tables(dev, st, io, st->host);
	/* Only mapped operands: the pool's copies run on the device's
	 * stream, not before the copy stream's joins. */
	const bool mapped = st->spans_at[OP_B] && (!with_c || st->spans_at[OP_C]);
	*copy = mapped && (o->copy_all ||
			   (region_op(o, st, OP_B) && (!with_c || region_op(o, st, OP_C))));
	return 0;
}

/* With the copy stream, a batch gathered on the device's stream s: its
 * tables straight from the set's pinned host copy, not through the
 * staging pool (whose half each such batch took in turn and waited for:
 * with two batches left running the worker waited there for the GEMM
 * before).  gathered then marks the host copy read, as on the copy
 * stream. */
static int tables_up(struct batch_set *st, CUstream s, size_t at, char *err, size_t errlen)
{
	CUresult r = nv_drv.cuMemcpyHtoDAsync(st->tables.p, st->host, at, s);
	if (r != CUDA_SUCCESS)
		return cuda_fail(r, err, errlen, "cuMemcpyHtoDAsync(batch tables)");
	if ((r = nv_drv.cuEventRecord(st->gathered, s)) != CUDA_SUCCESS)
		return cuda_fail(r, err, errlen, "cuEventRecord(gathered)");
	return 0;
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
	/* With the copy stream the batches take the two sets in turn. */
	o->cur = o->in ? o->next : 0;
	o->next = o->cur ^ 1;
	struct batch_set *st = &o->set[o->cur];
	/* A buffer that grows is freed and made again: not under a launch
	 * left running, nor a gather, which may still read or write it. */
	const size_t pbytes = bbytes > dbytes ? bbytes : dbytes;
	if ((cuda_dev_left_running(dev) || o->in) &&
	    (pbytes > st->parts.cap || bbytes > st->joined[OP_B].cap ||
	     (with_c && dbytes > st->joined[OP_C].cap) || dbytes > st->joined[OP_D].cap ||
	     (o->in && tables_bytes(g) > st->tables.cap)))
		drain_all(o, dev);
	/* The parts' own blocks fit in what the joined matrices take. */
	if ((rc = cuda_buf_need(&st->parts, pbytes, "a batch's parts", NULL, err, errlen)) < 0 ||
	    (rc = cuda_buf_need(&st->joined[OP_B], bbytes, "a batch's B", NULL, err, errlen)) < 0 ||
	    (with_c && (rc = cuda_buf_need(&st->joined[OP_C], dbytes, "a batch's C", NULL, err,
					  errlen)) < 0) ||
	    (rc = cuda_buf_need(&st->joined[OP_D], dbytes, "a batch's D", NULL, err, errlen)) < 0)
		return rc;
	bool copy = false;
	size_t at = 0;
	if (o->in &&
	    ((rc = tables_for_copy_stream(o, dev, st, io, with_c, &at, &copy, err, errlen)) < 0 ||
	     (rc = cuda_buf_need(&st->tables, tables_bytes(g), "batch tables", NULL, err,
				 errlen)) < 0))
		return rc;
	if (copy) {
		rc = gather_on_copy_stream(o, dev, st, io, at, with_c, err, errlen);
	} else {
		/* On the device's stream.  The batch's start: the provider's
		 * own START mark is skipped while the operands are on the
		 * device, so h2d counts the gathers.  The tables from the set's
		 * host copy when the copy stream laid them out already (some
		 * part is not mapped). */
		CUstream s = cuda_dev_stream(dev);
		CUresult r;
		/* The set's last copy out may still run on the out stream. */
		if (o->out && st->used &&
		    (r = nv_drv.cuStreamWaitEvent(s, st->freed, 0)) != CUDA_SUCCESS)
			return cuda_fail(r, err, errlen, "cuStreamWaitEvent(freed)");
		if ((rc = cuda_dev_mark(dev, CUDA_MARK_START, err, errlen)) == 0)
			rc = o->in ? tables_up(st, s, at, err, errlen)
				   : upload_tables(o, dev, st, io, err, errlen);
		if (rc == 0)
			rc = operand_in(o, dev, st, s, &io[OP_B], OP_B, err, errlen);
		if (rc == 0 && with_c)
			rc = operand_in(o, dev, st, s, &io[OP_C], OP_C, err, errlen);
	}
	if (rc < 0)
		return rc;
	const struct cuda_dev_range on[] = { { st->joined[OP_B].p, bbytes },
					     { st->joined[OP_C].p, with_c ? dbytes : 0 },
					     { st->joined[OP_D].p, dbytes } };
	cuda_dev_on_device(dev, on, OP_COUNT);
	*one = *g;
	one->n = width;
	one->nparts = 0;
	one->parts = NULL;
	one->b = (const void *)(uintptr_t)st->joined[OP_B].p;
	one->c = with_c ? (const void *)(uintptr_t)st->joined[OP_C].p : NULL;
	one->d = (void *)(uintptr_t)st->joined[OP_D].p;
	return 0;
}

/* With the copy stream: the set is free again once stream s (the
 * device's or the out stream) has got this far (the batch's copy out
 * queued or done). */
static int set_freed(struct cuda_batch *o, CUstream s, char *err, size_t errlen)
{
	if (!o->in)
		return 0;
	struct batch_set *st = &o->set[o->cur];
	CUresult r = nv_drv.cuEventRecord(st->freed, s);
	if (r != CUDA_SUCCESS)
		return cuda_fail(r, err, errlen, "cuEventRecord(freed)");
	st->used = true;
	return 0;
}

int cuda_batch_out(struct cuda_batch *o, struct cuda_dev *dev, const struct mfma_gemm *g, int *left,
		   char *err, size_t errlen)
{
	const int may_leave = *left;
	*left = 0;
	cuda_dev_on_device(dev, NULL, 0);
	struct batch_set *st = &o->set[o->cur];
	struct parts_io io[OP_COUNT];
	operands(g, io);
	/* Mapped parts of D go out on the out stream, once the GEMM (and
	 * whatever the provider queued after it) is done. */
	CUstream s = cuda_dev_stream(dev);
	if (o->out && st->spans_at[OP_D]) {
		CUresult r;
		if ((r = nv_drv.cuEventRecord(st->computed, s)) != CUDA_SUCCESS)
			return cuda_fail(r, err, errlen, "cuEventRecord(computed)");
		if ((r = nv_drv.cuStreamWaitEvent(o->out, st->computed, 0)) != CUDA_SUCCESS)
			return cuda_fail(r, err, errlen, "cuStreamWaitEvent(computed)");
		s = o->out;
	}
	int rc = batch_cols(o, st, s, &io[OP_D], OP_D, 1, err, errlen);
	if (rc < 0)
		return rc;
	if (!st->spans_at[OP_D]) {
		rc = cuda_dev_copy_out_with(dev, st->parts.p, io[OP_D].rows * g->n * io[OP_D].es,
					    take_parts, (void *)(uintptr_t)&io[OP_D], err, errlen);
		return rc < 0 ? rc : set_freed(o, s, err, errlen);
	}
	rc = copy_spans(o, st, s, g->nparts, OP_D, err, errlen);
	if (rc == 0)
		rc = set_freed(o, s, err, errlen);
	if (rc < 0)
		return rc;
	if (!may_leave)
		return cuda_dev_copy_out_end(dev, s, err, errlen);
	int set;
	if ((rc = cuda_dev_copy_out_leave(dev, s, &set, err, errlen)) == 0)
		*left = set + 1;
	return rc;
}

void cuda_batch_abort(struct cuda_batch *o, struct cuda_dev *dev)
{
	/* A gather may still be running on the copy stream, a copy out on
	 * the out stream: the caller drains the device's stream, these are
	 * waited for here. */
	if (o)
		wait_own_streams(o);
	cuda_dev_on_device(dev, NULL, 0);
}
