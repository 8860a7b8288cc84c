/* The device layer of the CUDA backend: what every kernel provider on an
 * NVIDIA GPU shares.  Probing, the primary context, one stream, the timing
 * events, the pinned staging pool and the device buffer cache live in
 * cuda_device.c; a provider (cuda_provider.h) sees only this API.
 *
 * Threading: cuda_dev_probe and the cuda_slot_* readers run on the main
 * thread before the loop starts; everything on a struct cuda_dev runs on
 * that device's worker thread, with its context current.
 *
 * Errors: 0 or a negative errno-style code, with a sentence in err. */
#ifndef MFMAD_CUDA_DEVICE_H
#define MFMAD_CUDA_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "nv_driver.h"

/* ---- Probing (main thread) ---- */

/* Whether some provider has kernels for compute capability cc (e.g. 90).
 * Devices no provider serves are not offered. */
typedef int (*cuda_usable_fn)(int cc);

/* Opens the driver and lists the devices usable() accepts: their count (0
 * without a driver or a GPU, which is not an error; err then says why),
 * or a negative code. */
int cuda_dev_probe(cuda_usable_fn usable, char *err, size_t errlen);
int cuda_dev_count(void);
/* Compute capability of device index (major * 10 + minor). */
int cuda_slot_cc(int index);
/* Name, arch ("sm_90") and memory of device index; the providers add the
 * variants and dtypes.  -EINVAL for an index out of range. */
int cuda_slot_describe(int index, struct backend_device_info *info);

/* ---- An open device (its worker thread) ---- */

struct cuda_dev;

int cuda_dev_open(int index, const struct backend_config *cfg, struct cuda_dev **dev, char *err,
		  size_t errlen);
/* Waits for the stream, then frees everything.  Accepts NULL. */
void cuda_dev_close(struct cuda_dev *d);

CUdevice cuda_dev_device(const struct cuda_dev *d);
int cuda_dev_cc(const struct cuda_dev *d);
CUstream cuda_dev_stream(const struct cuda_dev *d);
/* Per-N state of a provider (a library's plan, cuSPARSELt's with its
 * algorithm search, some 100 ms on the H200): the provider counts each
 * one it makes, so that the backend can say whether a GEMM paid for one
 * on the serving path.  While a weight is warmed at load
 * (cuda_dev_set_warming), the plans made are the ones the weight keeps: a
 * provider that replaces its oldest plans never replaces those. */
void cuda_dev_count_plan(struct cuda_dev *d);
uint64_t cuda_dev_plans(const struct cuda_dev *d);
void cuda_dev_set_warming(struct cuda_dev *d, bool on);
bool cuda_dev_warming(const struct cuda_dev *d);
/* Makes the device's context current on the calling thread. */
int cuda_dev_enter(struct cuda_dev *d, char *err, size_t errlen);

/* Fills err from a failed driver call and returns its errno. */
int cuda_fail(CUresult r, char *err, size_t errlen, const char *what);

/* Device memory that grows as needed and is kept.  A provider keeps the
 * buffers only it understands (packed operands, workspaces) in its own
 * per-device state; the operand buffers any provider may use are the
 * device's (cuda_dev_scratch). */
struct cuda_buf {
	CUdeviceptr p;
	size_t cap;
};

/* Grows b to at least size bytes; the contents are not kept.  *grown,
 * when not NULL, says whether it was reallocated. */
int cuda_buf_need(struct cuda_buf *b, size_t size, const char *what, int *grown, char *err,
		  size_t errlen);
void cuda_buf_free(struct cuda_buf *b);

/* A launch made once into a CUDA graph and replayed: for a vendor library
 * whose launch call does much host work (cuSPARSELt's: 8-12 us on the
 * H200, some 20-35 us on the daemon's worker between requests, while the
 * GPU waits after the copy in), a graph's launch costs 2-3 us.  The graph
 * is made for each key (the operands' addresses and scalars the call is
 * made with), CUDA_GRAPH_SLOTS of them kept (a single GEMM's and a
 * batch's buffers, say), the oldest replaced.  A call that cannot be
 * captured (or a graph that does not instantiate) turns the graph off and
 * is enqueued directly from then on, and so does a key that keeps
 * changing (graphs made for more than a quarter of the calls, past the
 * first few); with cuda.graphs off (backend_config) every call is.
 * Zero-initialised; owned by one device's worker. */
#define CUDA_GRAPH_KEY 8
#define CUDA_GRAPH_SLOTS 2
struct cuda_graph {
	struct {
		CUgraphExec exec;
		uint64_t key[CUDA_GRAPH_KEY];
	} slot[CUDA_GRAPH_SLOTS];
	unsigned next;
	uint64_t runs, made;
	bool off;
};
/* Enqueues the launch on stream s; 0 or a negative errno with err filled. */
typedef int (*cuda_enqueue_fn)(void *arg, CUstream s, char *err, size_t errlen);
/* Runs fn on the device's stream through g: replays g's graph when key
 * (n <= CUDA_GRAPH_KEY words) is the one it was made with, else captures
 * fn into a new one first. */
int cuda_dev_graph_run(struct cuda_dev *d, struct cuda_graph *g, const uint64_t *key, size_t n,
		       cuda_enqueue_fn fn, void *arg, char *err, size_t errlen);
void cuda_graph_free(struct cuda_graph *g);
/* Times fn on the device's stream: one untimed run, then `runs` back to
 * back between two events (captured into one graph, launched once untimed
 * first, where the stream can be captured; enqueued one by one where not),
 * *ns the mean of one; waits for them.  For a
 * provider choosing among its own ways of running a shape while a weight
 * is warmed (cuda_dev_warming): the runs write what the launch would. */
int cuda_dev_time(struct cuda_dev *d, cuda_enqueue_fn fn, void *arg, int runs, uint64_t *ns,
		  char *err, size_t errlen);
/* How many cuda_dev_time has made on d. */
uint64_t cuda_dev_timings(const struct cuda_dev *d);

/* The device's operand buffers, shared by the providers: their contents
 * do not outlive one request. */
enum cuda_scratch {
	CUDA_SCRATCH_A,    /* A as the request sent it */
	CUDA_SCRATCH_META, /* its canonical 2:4 meta */
	CUDA_SCRATCH_B,
	CUDA_SCRATCH_C,
	CUDA_SCRATCH_D,
	CUDA_SCRATCH_COUNT
};
struct cuda_buf *cuda_dev_scratch(struct cuda_dev *d, enum cuda_scratch which);

/* Registers host memory [p, p + len) with the device (cuMemHostRegister):
 * the copies below then go straight from and into it, with no staging.
 * Unregistering waits for the copies queued on the device's stream. */
int cuda_dev_host_register(struct cuda_dev *d, void *p, size_t len, bool region, char *err,
			   size_t errlen);
void cuda_dev_host_unregister(struct cuda_dev *d, void *p);
/* Whether [p, p + len) lies inside one registered range. */
bool cuda_dev_registered(const struct cuda_dev *d, const void *p, size_t len);
/* Whether kernels can reach [p, p + len) (inside one registered range,
 * mapped into the device's address space), and at which address;
 * *region: whether that range is a client's region
 * (cuda_dev_host_register's `region`). */
bool cuda_dev_mapped(const struct cuda_dev *d, const void *p, size_t len, CUdeviceptr *dp,
		     bool *region);
/* Ends a copy out that the provider queued itself (a kernel writing
 * into mapped host memory) as cuda_dev_copy_out does: the end event on
 * stream s (NULL: the device's stream; a batch's copy out may run on a
 * stream of its own), and waits for it. */
int cuda_dev_copy_out_end(struct cuda_dev *d, CUstream s, char *err, size_t errlen);

/* The sets of timing events a device keeps: launches it may leave running
 * at once.  A launch's marks go to the current set; the caller finishes
 * the oldest launch left running before a new one marks, once every set
 * is taken (cuda_gemm refuses to start then). */
#define CUDA_EVENT_SETS BACKEND_MAX_LEFT
/* Ends such a copy out without waiting: the end event is recorded on s
 * (NULL: the device's stream) in the launch's event set, *set names it
 * for cuda_dev_finish, and the next launch's marks go to the next set.
 * -EBUSY when every set holds a launch left running. */
int cuda_dev_copy_out_leave(struct cuda_dev *d, CUstream s, int *set, char *err, size_t errlen);
/* Waits for the launch left running in set (a kernel fault surfaces
 * here) and fills its times. */
int cuda_dev_finish(struct cuda_dev *d, int set, struct backend_timing *t, char *err,
		    size_t errlen);
/* How many launches left running are not finished. */
int cuda_dev_left_running(const struct cuda_dev *d);
/* A lone GEMM's launch that may be left running: between
 * cuda_dev_lone_begin and cuda_dev_lone_end, a cuda_dev_copy_out of D into
 * registered host memory ends as cuda_dev_copy_out_leave does instead of
 * waiting.  cuda_dev_lone_end says which set holds it, or -1 when no copy
 * out was left (the launch was waited for as usual). */
void cuda_dev_lone_begin(struct cuda_dev *d);
int cuda_dev_lone_end(struct cuda_dev *d);

/* Answer frames in host memory the device registered at open
 * (cuda.pinned_answers_mb, frame_arena.h): a frame whose D the copies
 * above write directly, as into a region.  NULL when the arena is full
 * (or off): the caller makes the frame on the heap. */
struct frame_arena;
void *cuda_dev_frame_alloc(struct cuda_dev *d, size_t len, size_t at);
/* The arena, for tests and counters; NULL when off. */
struct frame_arena *cuda_dev_answers(const struct cuda_dev *d);

/* Operands already on the device: a batched launch gathers its parts'
 * B and C into joined matrices on the device, and hands the provider one
 * GEMM whose b, c and d are those device addresses (with unified
 * addressing a device address is never a host one).  While they are set,
 * a copy in from one of them is a device-to-device copy, a copy out into
 * one is a device-to-device copy that neither records the end nor waits
 * (the batch splits D and ends the copy out itself), and the START mark
 * is the batch's, recorded before its gathers.  n = 0 clears them. */
#define CUDA_MAX_ON_DEVICE 3
struct cuda_dev_range {
	CUdeviceptr p;
	size_t len;
};
void cuda_dev_on_device(struct cuda_dev *d, const struct cuda_dev_range *r, size_t n);

/* Host to device through the pinned pool (or directly from registered
 * memory, or from an operand on the device): rows x row_bytes of src to dst, whose rows are dpitch bytes
 * apart (the gap zero-filled); asynchronous on the stream. */
int cuda_dev_copy_in(struct cuda_dev *d, CUdeviceptr dst, size_t dpitch, const void *src,
		     size_t rows, size_t row_bytes, char *err, size_t errlen);

/* The same, for a reader that never reads the gap after each row (a
 * tensor map no wider than a row): the gap is left as it was, and only
 * the rows' own bytes cross the bus. */
int cuda_dev_copy_rows_in(struct cuda_dev *d, CUdeviceptr dst, size_t dpitch, const void *src, size_t rows,
			  size_t row_bytes, char *err, size_t errlen);

/* The end of a GEMM's copies in: C (bytes from hc to c) when hc is not
 * NULL (beta != 0), then the IN mark. */
int cuda_dev_copy_in_end(struct cuda_dev *d, CUdeviceptr c, const void *hc, size_t bytes, char *err,
			 size_t errlen);

/* B's copy in for a kernel launched right after it that waits for B at
 * its gate (nv_wgmma.cuh): from registered host memory only, on the
 * device's gate stream, after everything enqueued on the device's stream
 * so far (an earlier kernel may still read dst); then the IN mark on the
 * gate stream and the gate word set to a new count, which *gate and *seq
 * give the kernel.  The kernel's time (IN to KERNEL) is then the part of
 * it after B landed: its start overlaps the copy.  -EAGAIN with nothing
 * done when the gate is off (cuda.gate, or a driver without stream
 * writes), src is not registered host memory, or the gate's word, event
 * or stream cannot be made (tried again by the next call; nothing made
 * twice): the caller copies in as usual.  The gap after each row is left
 * as it was, as by cuda_dev_copy_rows_in.  The gate stream holds only such copies and the
 * word's writes, so nothing on it waits for a kernel that waits for it. */
int cuda_dev_copy_in_gated(struct cuda_dev *d, CUdeviceptr dst, size_t dpitch, const void *src, size_t rows,
			   size_t row_bytes, CUdeviceptr *gate, uint32_t *seq, char *err, size_t errlen);

/* Host to device through the pinned pool: bytes to dst, the pool's chunks
 * filled by give(arg, off, chunk, len) in order (a batched launch's parts,
 * one after the other). */
typedef void (*cuda_give_fn)(void *arg, size_t off, unsigned char *dst, size_t len);
int cuda_dev_copy_in_with(struct cuda_dev *d, CUdeviceptr dst, size_t bytes, cuda_give_fn give,
			  void *arg, char *err, size_t errlen);

/* The timing of one request: the provider records START before its first
 * copy in, IN after its last, KERNEL after its last kernel; the copy out
 * records the end and waits for it. */
enum cuda_mark { CUDA_MARK_START, CUDA_MARK_IN, CUDA_MARK_KERNEL };
int cuda_dev_mark(struct cuda_dev *d, enum cuda_mark mark, char *err, size_t errlen);
/* The same mark recorded on stream s instead of the device's (a batch
 * whose copy in runs on a stream of its own records its START there). */
int cuda_dev_mark_on(struct cuda_dev *d, enum cuda_mark mark, CUstream s, char *err,
		     size_t errlen);

/* Where a GEMM's kernels write D (bytes of it, for dst): dst itself when
 * it is an operand on the device (a batch's joined D), else the device's D
 * scratch buffer, grown as needed.  Not into a mapped region: the GEMM
 * epilogues' scattered stores across the bus measured slower on the H200
 * than the kernel into device memory and one DMA copy after it (N=16:
 * kernel 27 -> 38 us against a 15 us copy; N=256: 39 -> 188 us against
 * 138 us).  Tried again through mfmad with regions (bench/RESULTS.md):
 * only the mma.sp kernels' stores keep pace; cuSPARSELt's and cuBLASLt's
 * kernels took 93-97 us at 1024x16x1024 and the wgmma ones 64 us against
 * 20, and the served N=16 p50 rose from 86 to 105 us. */
int cuda_dev_out_buffer(struct cuda_dev *d, void *dst, size_t bytes, CUdeviceptr *out, char *err,
			size_t errlen);

/* Where a lone launch's wgmma kernel copies its tiles of D itself
 * (cuda.tile_out, nv_wg_params.dh): the device address of dst when the
 * launch is lone (cuda_dev_lone_begin), after its START mark, and dst lies
 * in mapped registered host memory (a client's region, a pinned frame);
 * cuda_dev_copy_out then makes no copy.  0 otherwise: D goes as before.
 * Each CTA copies its tile in 16-byte pieces once its epilogue is done,
 * so that D crosses the bus as the tiles end (bench/RESULTS.md, "Tile
 * out"); unlike the epilogue's own scattered stores into mapped memory
 * (cuda_dev_out_buffer), which were slower than one DMA copy. */
CUdeviceptr cuda_dev_tile_out(struct cuda_dev *d, void *dst, size_t bytes);

/* Device to host through the pinned pool, then waits for the stream: the
 * last step of a GEMM (into registered host memory a DMA instead, left
 * running between cuda_dev_lone_begin and _end).  A kernel fault surfaces
 * here.  Into an operand on
 * the device it is a device-to-device copy that does not wait (nothing at
 * all when src is dst: cuda_dev_out_buffer gave the kernels dst). */
int cuda_dev_copy_out(struct cuda_dev *d, void *dst, CUdeviceptr src, size_t bytes, char *err,
		      size_t errlen);

/* Like cuda_dev_copy_out, but the bytes go to take(arg, off, src, len) in
 * order as they leave the pool (a batched launch scatters D this way). */
typedef void (*cuda_take_fn)(void *arg, size_t off, const unsigned char *src, size_t len);
int cuda_dev_copy_out_with(struct cuda_dev *d, CUdeviceptr src, size_t bytes, cuda_take_fn take,
			   void *arg, char *err, size_t errlen);

/* h2d, kernel and d2h times of the request just copied out (the
 * variant is the provider's to name). */
void cuda_dev_timing(struct cuda_dev *d, struct backend_timing *t);

/* Waits for the stream after work that ends on the device (a weight's
 * packing): the pinned pool is free again afterwards. */
int cuda_dev_sync(struct cuda_dev *d, const char *what, char *err, size_t errlen);

/* After a failure half-way, waits for whatever was enqueued, so that no
 * copy still reads or writes the pool or the caller's memory. */
void cuda_dev_drain(struct cuda_dev *d);

#endif
