/* libmfmaclient: the C client of mfmad, the GEMM inference daemon.
 *
 * Conventions (the libuv ones):
 * - Every function that can fail returns 0 or a negative code and, when
 *   `err` is not NULL, fills it: err->code and err->message.
 *     err->code < 0  a local or transport failure: a negative errno value
 *                    (-ECONNREFUSED, -ETIMEDOUT, -EPROTO, -EINVAL ...) and
 *                    a sentence that says what was wrong; the return value
 *                    is the same number.
 *     err->code > 0  the daemon answered with an error: the wire Code
 *                    (enum mfma_code) and the daemon's message verbatim;
 *                    the return value is MFMA_EREMOTE(code), which never
 *                    collides with an errno value.
 *   On success err->code is 0 and err->message is empty.
 * - Nothing here logs, exits, touches signals or keeps global state.  A
 *   client handle must be used by one thread at a time; use one handle per
 *   thread for parallel work (connections are cheap).
 * - Results that carry memory (GEMM output, status, weight lists) are owned
 *   by the library until the matching *_free() call, which accepts NULL
 *   and zeroed structs.
 *
 * Build with `pkg-config --cflags --libs mfmaclient`.  In short:
 *
 *   mfma_client *c;
 *   struct mfma_error err;
 *   if (mfma_connect(NULL, &c, &err) < 0)          // $MFMA_ENDPOINT or the default socket
 *           die(err.message);
 *   struct mfma_gemm_args g;
 *   mfma_gemm_args_init(&g);                        // alpha 1, beta 0, any device
 *   g.a.kind = MFMA_OPERAND_DENSE;
 *   g.a.dense = (struct mfma_matrix){ M, K, MFMA_TYPE_F16, a, M * K * 2 };
 *   g.a.sparsity = MFMA_SPARSITY_PRUNE_24;         // optional: 2:4 on the daemon
 *   g.b = (struct mfma_matrix){ K, N, MFMA_TYPE_F16, b, K * N * 2 };
 *   struct mfma_gemm_result r;
 *   if (mfma_gemm(c, &g, &r, &err) < 0)             // or mfma_gemm_submit + mfma_wait
 *           die(err.message);
 *   use(r.d.data);                                  // M x N f32, r.timing.kernel_ns ...
 *   mfma_gemm_result_free(&r);
 *   mfma_close(c); */
#ifndef MFMA_CLIENT_H
#define MFMA_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types.  The numbers are those of the wire's mfma.v1.DType. */
enum mfma_type {
	MFMA_TYPE_NONE = 0, /* only as out_dtype: the daemon's default */
	MFMA_TYPE_F32 = 1,
	MFMA_TYPE_F16 = 2,  /* IEEE binary16 */
	MFMA_TYPE_BF16 = 3,
	MFMA_TYPE_I8 = 4,
	MFMA_TYPE_I32 = 5,
};

/* Bytes per element of t; 0 for MFMA_TYPE_NONE or an unknown value. */
static inline size_t mfma_type_size(enum mfma_type t)
{
	switch (t) {
	case MFMA_TYPE_F32: return 4;
	case MFMA_TYPE_F16: return 2;
	case MFMA_TYPE_BF16: return 2;
	case MFMA_TYPE_I8: return 1;
	case MFMA_TYPE_I32: return 4;
	default: return 0;
	}
}

/* Status codes the daemon answers with (the wire enum mfma.v1.Code). */
enum mfma_code {
	MFMA_CODE_OK = 0,
	MFMA_CODE_INVALID_ARGUMENT = 1, /* a field of the request is wrong */
	MFMA_CODE_NOT_FOUND = 2,        /* e.g. an unknown weight */
	MFMA_CODE_ALREADY_EXISTS = 3,
	MFMA_CODE_RESOURCE_EXHAUSTED = 4, /* busy, or a memory budget */
	MFMA_CODE_UNAVAILABLE = 5,      /* shutting down, or no device can take it */
	MFMA_CODE_DEADLINE_EXCEEDED = 6,
	MFMA_CODE_INTERNAL = 7,         /* a device or kernel failure */
	MFMA_CODE_MALFORMED = 8,        /* the daemon could not decode the frame */
	MFMA_CODE_FAILED_PRECONDITION = 9, /* not possible on this connection (regions over TCP) */
};

/* Return value for "the daemon answered with code c": far below any
 * negative errno, so callers can tell the two apart. */
#define MFMA_EREMOTE_BASE 10000
#define MFMA_EREMOTE(c) (-(MFMA_EREMOTE_BASE + (int)(c)))
#define MFMA_IS_REMOTE(rc) ((rc) <= -MFMA_EREMOTE_BASE)
#define MFMA_REMOTE_CODE(rc) (-(rc) - MFMA_EREMOTE_BASE)

#define MFMA_ERROR_MAX 512

struct mfma_error {
	int code;
	char message[MFMA_ERROR_MAX];
};

/* Name of a daemon code ("NOT_FOUND"), or "UNKNOWN". */
const char *mfma_code_name(int code);

/* The library's version string ("0.1.0"). */
const char *mfma_version(void);

/* ---- connection ---- */

typedef struct mfma_client mfma_client;

/* Connects to `endpoint`: "unix:PATH", "tcp:HOST:PORT", "tcp:[V6]:PORT",
 * "tls:HOST:PORT" (TCP with TLS, see mfma_connect_tls) or a bare socket
 * path; or a comma list of them, tried in order, with failover to the
 * next after a lost connection.  NULL (or "") means the MFMA_ENDPOINT
 * environment variable, else the default sockets:
 * $XDG_RUNTIME_DIR/mfmad.sock (not for root) when a daemon listens there,
 * else /run/mfmad/mfmad.sock, which is for root and the members of the
 * mfmad group.  tls: endpoints take their files from MFMA_TLS_CA,
 * MFMA_TLS_CERT and MFMA_TLS_KEY.  One connect() to an endpoint is given
 * 3 seconds (a host that drops it, a listener whose queue is full) before
 * the next is tried. */
int mfma_connect(const char *endpoint, mfma_client **client, struct mfma_error *err);

/* TLS for tls: endpoints (TLS 1.2 or 1.3).  A field NULL or "" takes the
 * environment variable named, then the default:
 *   ca_file      MFMA_TLS_CA    PEM CAs the daemon's certificate must chain
 *                               to (default: the system's CAs)
 *   cert_file    MFMA_TLS_CERT  this client's certificate (PEM), for a
 *   key_file     MFMA_TLS_KEY   daemon with listen.tls_client_ca; both or
 *                               neither
 *   server_name  -              the name the daemon's certificate must carry
 *                               (DNS name or IP address; default: the host
 *                               of each endpoint)
 * The handshake is part of connecting (at most 30 s; a reconnection's,
 * at most what is left of the call's timeout).  Under TLS 1.3 a
 * daemon judges the client's certificate after the client has finished:
 * a refused certificate shows as the first call failing with the
 * daemon's alert ("certificate required", "unknown ca"). */
struct mfma_tls {
	const char *ca_file;
	const char *cert_file;
	const char *key_file;
	const char *server_name;
};

/* mfma_connect with TLS settings (NULL: the environment's, as above). */
int mfma_connect_tls(const char *endpoint, const struct mfma_tls *tls, mfma_client **client,
		     struct mfma_error *err);

/* mfma_connect_tls within timeout_ms: the connects and TLS handshakes of
 * the endpoints tried all end by then (each still given 100 ms), where
 * they would otherwise take up to 3 s a connect and 30 s a handshake; -1
 * means those bounds.  The client's timeout for calls is still
 * mfma_set_timeout's. */
int mfma_connect_timeout(const char *endpoint, const struct mfma_tls *tls, int timeout_ms,
			 mfma_client **client, struct mfma_error *err);

/* Closes the connection and frees the handle (NULL is fine).  Results of
 * requests still in flight are dropped; results already returned stay
 * valid until freed. */
void mfma_close(mfma_client *client);

/* Sends the token a TCP listener with listen.token_file asks for (the
 * first line of that file), as the connection's first request, and checks
 * it with a ping.  A wrong token fails with the daemon's message, and the
 * connection is closed.  mfmactl takes it from --token-file or
 * $MFMA_TOKEN_FILE. */
int mfma_authenticate(mfma_client *client, const void *token, size_t len,
		      struct mfma_error *err);

/* How long blocking calls (and the sending half of mfma_gemm_submit) may
 * wait for the daemon, in milliseconds; negative = forever (the default).
 * A call that runs out fails with -ETIMEDOUT; its request stays in flight
 * and a late response to it is discarded. */
void mfma_set_timeout(mfma_client *client, int timeout_ms);

/* Busy-polling: before a wait on the socket blocks in poll() (for an
 * answer, or for room to send), the library polls the socket without
 * blocking for up to `us` microseconds, so an answer that comes within
 * that time is taken without the thread being put to sleep and woken
 * again (10-80 us on a virtual machine with idle cores).  It costs up to
 * that much CPU time per wait, and on a machine with few cores it takes
 * the core the daemon needs: measure before turning it on.  A wait still
 * ends at its deadline (mfma_set_timeout, mfma_wait's timeout_ms), spin or
 * not.  The default is the MFMA_SPIN_US environment variable read at
 * connect (mfma_connect fails with -EINVAL, naming it, on a value that is
 * not a number from 0 to MFMA_SPIN_US_MAX), else 0: block at once.  Waits
 * of the caller's own on mfma_fileno() are the caller's.  Returns 0, or
 * -EINVAL (nothing changed) when us is over MFMA_SPIN_US_MAX. */
#define MFMA_SPIN_US_MAX 1000000u
int mfma_set_spin_us(mfma_client *client, uint32_t us);

/* The spin window in microseconds (0: off). */
uint32_t mfma_spin_us(const mfma_client *client);

/* Called while a request frame is written, after every chunk the socket
 * takes: bytes of the frame sent so far and its total (the last call has
 * sent == total).  For showing progress on large matrices; it runs in the
 * calling thread, inside the call that sends, and must not use the
 * client.  fn NULL removes it. */
typedef void (*mfma_progress_fn)(void *user, uint64_t sent, uint64_t total);
void mfma_set_progress(mfma_client *client, mfma_progress_fn fn, void *user);

/* The endpoint this client connected to, as a string ("unix:/run/..."). */
const char *mfma_endpoint(const mfma_client *client);

/* ---- matrices ---- */

/* A dense row-major matrix in little-endian element order.  For inputs the
 * memory belongs to the caller and is only read; bytes must equal
 * rows * cols * mfma_type_size(dtype). */
struct mfma_matrix {
	uint32_t rows, cols;
	enum mfma_type dtype;
	const void *data;
	size_t bytes;
};

/* What the daemon should do with a dense A operand. */
enum mfma_sparsity {
	MFMA_SPARSITY_DENSE = 0,  /* use A as it is */
	MFMA_SPARSITY_VALIDATE_24 = 1, /* reject unless A already is 2:4 */
	MFMA_SPARSITY_PRUNE_24 = 2,    /* keep the two largest of every 4 along K */
};

/* A 2:4 matrix in the canonical format: of every group of 4 along a row,
 * the two kept values in position order go to `values` (rows x cols/2
 * elements) and their positions i0 < i1 to `meta` as the nibble
 * i0 | i1 << 2, eight groups per little-endian uint32, each row starting a
 * new word (rows x ((cols/4 + 7) / 8) uint32). */
struct mfma_sparse24 {
	uint32_t rows, cols; /* logical shape; cols is K, a multiple of 4 */
	enum mfma_type dtype;
	const void *values;
	size_t values_bytes;
	const uint32_t *meta;
	size_t meta_bytes;
};

enum mfma_operand_kind {
	MFMA_OPERAND_DENSE = 0,
	MFMA_OPERAND_SPARSE24 = 1,
	MFMA_OPERAND_WEIGHT = 2, /* a resident weight, by name (GEMM only) */
};

struct mfma_operand {
	enum mfma_operand_kind kind;
	struct mfma_matrix dense;       /* MFMA_OPERAND_DENSE */
	enum mfma_sparsity sparsity;    /* MFMA_OPERAND_DENSE */
	struct mfma_sparse24 sparse;    /* MFMA_OPERAND_SPARSE24 */
	const char *weight;             /* MFMA_OPERAND_WEIGHT */
};

/* ---- GEMM: D = alpha * A.B + beta * C ---- */

struct mfma_gemm_args {
	struct mfma_operand a;      /* M x K */
	struct mfma_matrix b;       /* K x N, the same dtype as A */
	const struct mfma_matrix *c; /* M x N in out_dtype, or NULL */
	float alpha;                /* 1 after mfma_gemm_args_init() */
	float beta;                 /* 0 after mfma_gemm_args_init() */
	enum mfma_type out_dtype;  /* MFMA_TYPE_NONE: f32 for float inputs, i32 for i8 */
	int device;                 /* -1 (after init): the daemon picks */
	uint32_t priority;          /* 0 = default, 1 = highest, larger = lower */
	uint64_t timeout_us;        /* server-side deadline from arrival; 0 = none */
	/* Where D should go (M x N of the output type), or NULL for memory
	 * the library owns until mfma_gemm_result_free().  Inside one of the
	 * client's regions the daemon writes D there and no byte of it
	 * travels; elsewhere the library copies D there (once, from the
	 * buffer the answer was received in).  result.d.data
	 * points at it either way.  d_bytes is how many bytes d holds: a D
	 * that does not fit is refused (the daemon checks it inside a region;
	 * the library before it copies elsewhere).  0 means "to the end of
	 * d's region", and is refused for d outside a region.
	 *
	 * Submitted (mfma_gemm_submit), d is the request's until mfma_wait
	 * returns it: the library may copy D there as soon as the answer is
	 * read, by whichever call on this client reads it, so requests in
	 * flight together need a d each, and d must not be read before.
	 * Blocking (mfma_gemm), D is copied there as the answer is read,
	 * within the call, never after it returns.  A request that fails may
	 * leave d written. */
	void *d;
	size_t d_bytes;
};

/* Zero-initialising the struct is NOT enough: alpha would be 0 and device
 * 0.  Start from this (or MFMA_GEMM_ARGS_INIT). */
void mfma_gemm_args_init(struct mfma_gemm_args *args);
#define MFMA_GEMM_ARGS_INIT { .alpha = 1.0f, .beta = 0.0f, .device = -1 }

struct mfma_timing {
	uint64_t queue_ns;  /* waiting in the device queue */
	uint64_t h2d_ns;    /* copies in */
	uint64_t kernel_ns; /* the kernel(s) */
	uint64_t d2h_ns;    /* copy out */
	uint64_t total_ns;  /* arrival of the frame to the response being queued */
	uint64_t prep_ns;   /* host-side preparation: decoding a large request, 2:4 work on A */
	uint32_t batch_requests; /* requests that shared this one's launch (1: it ran alone) */
	uint32_t batch_columns;  /* their columns together: the launch's N */
};

struct mfma_device_ref {
	uint32_t index;
	const char *backend; /* "cpu", "hip", "cuda" */
	const char *arch;    /* "x86_64", "gfx942", "sm_90" */
};

/* What the library itself spent on the last GEMM it returned (mfma_gemm
 * or mfma_wait): building and packing the request, writing it to the
 * socket, waiting from the last byte sent to the whole answer read, and
 * decoding the answer.  Measured with the same monotonic clock as
 * round_trip_ns. */
struct mfma_client_timing {
	uint64_t encode_ns;
	uint64_t send_ns;
	uint64_t wait_ns;
	uint64_t decode_ns;
};

struct mfma_gemm_result {
	struct mfma_matrix d;       /* library-owned until mfma_gemm_result_free() */
	struct mfma_timing timing;
	struct mfma_device_ref device;
	const char *variant;        /* the kernel variant that ran */
	uint64_t round_trip_ns;     /* first byte sent to the whole response received */
	struct mfma_client_timing client; /* the library's own share */
	void *priv;
};

/* Frees a result (on any thread; also after its client is closed).  A D
 * of 4 KiB or more in the library's memory (no mfma_gemm_args.d) was
 * copied into a buffer of its client's, which goes back to the client for
 * a later answer's D: a client keeps at most 16 such buffers and 4 MiB,
 * freed by mfma_close (one still out, when its result is freed). */
void mfma_gemm_result_free(struct mfma_gemm_result *result);

/* Blocking: sends the request and waits for its answer.  Responses to
 * requests submitted earlier that arrive meanwhile are kept for
 * mfma_wait().  A large request's matrices are written to the socket
 * straight from the caller's memory (and again from there if the
 * connection is lost and the request resent), so they must not change
 * until the call returns. */
int mfma_gemm(mfma_client *client, const struct mfma_gemm_args *args,
	      struct mfma_gemm_result *result, struct mfma_error *err);

/* ---- pipelining ---- */

#define MFMA_ANY UINT64_MAX

/* Sends a GEMM without waiting for its answer and returns its id (assigned
 * by the library, never 0 or MFMA_ANY).  The call returns once the frame
 * is handed to the kernel (or, corked, held: mfma_cork); while the socket
 * is full it keeps reading responses into the client's buffer, so any
 * number of submits before the first wait cannot deadlock.  The caller's
 * matrices may be reused as soon as it returns.
 *
 * A GEMM changes nothing, so the library keeps its frame until the answer
 * comes: when the connection is lost (the daemon killed and restarted, or
 * draining), the next submit or wait reconnects (to the same endpoint, or
 * the next of a list) and sends it again with the same id; mfma_wait
 * completes each id exactly once.  A request that finds no connection
 * within its timeout_us (else the client's timeout, else 60 s) completes
 * with DEADLINE_EXCEEDED: a reconnection's connect and TLS handshake end
 * by then (each given at least 100 ms).  When the daemon closed the connection over
 * something this client sent (a frame over its limit, a TLS alert), which
 * request it was is not known: those in flight then complete with
 * FAILED_PRECONDITION, naming the verdict, and are not sent again.  A
 * request that names a region (its B, C or D there) is never sent again:
 * when its connection is lost it completes with UNAVAILABLE. */
int mfma_gemm_submit(mfma_client *client, const struct mfma_gemm_args *args, uint64_t *id,
		     struct mfma_error *err);

/* Waits for the submitted request `id`, or for whichever finishes first
 * with MFMA_ANY (buffered answers first, oldest first).  timeout_ms < 0
 * waits forever, 0 only looks at what already arrived.
 * Returns 0 with *done_id and *result set; MFMA_EREMOTE(code) with
 * *done_id set when the daemon failed that request (result zeroed);
 * -ETIMEDOUT when nothing finished in time (no id); -ENOENT when `id` (or,
 * for MFMA_ANY, any request) is not in flight; another negative errno when
 * the connection broke and no new one could be made now: GEMMs in flight
 * stay in flight (sent again once a connection is made, by a later wait
 * or submit; see mfma_gemm_submit for how each ends), the rest are lost. */
int mfma_wait(mfma_client *client, uint64_t id, int timeout_ms, uint64_t *done_id,
	      struct mfma_gemm_result *result, struct mfma_error *err);

/* Submitted requests whose answer has not been returned by mfma_wait(). */
size_t mfma_in_flight(const mfma_client *client);

/* Corks the connection: from now on mfma_gemm_submit keeps each request's
 * frame in the library instead of writing it, and mfma_uncork writes all
 * of them in one call (the daemon then reads them in one go too).  A
 * client that submits several requests at a time (refilling the slots
 * that answers freed, say) saves a system call and a wake-up of the
 * daemon for each (`mfmactl bench --cork`).  Measure it: holding the
 * refills until every answer there is taken can leave the socket idle
 * between bursts.
 *
 * Nothing waits on a held request: mfma_wait, every blocking call and
 * every request that is not held (a large GEMM written from the caller's
 * memory, a load, a ping) write the held frames first, in order, so the
 * daemon sees the requests in the order they were made; past 256 KiB held
 * they are written at once.  The cork stays until mfma_uncork.  A held
 * request has its id and counts as in flight; its round trip starts when
 * it is written.  If that write fails the connection is lost with the
 * held requests, as with those in flight (resendable ones go again on
 * the next connection). */
void mfma_cork(mfma_client *client);
/* Uncorks, writing what is held: 0, or the write's error. */
int mfma_uncork(mfma_client *client, struct mfma_error *err);

/* ---- shared-memory regions (Unix socket only) ----
 *
 * A region is memory the client and the daemon share: a sealed memfd the
 * library creates and maps, and registers with the daemon once (the
 * daemon maps it too and registers it with each GPU's runtime, so copies
 * are DMA from and to these very pages).  Matrices whose bytes lie inside
 * a region are then not sent: a GEMM whose b, c or d (struct
 * mfma_gemm_args) point into a region of this client names (region,
 * offset, length) instead, and its answer carries only status and timing.
 * The regular GEMM calls do this by themselves; nothing else changes.
 *
 * - While a submitted GEMM uses a region, its B and C must not change and
 *   its D is not complete before mfma_wait returns it.
 * - Regions belong to the connection: they go with mfma_close (their
 *   memory is unmapped then) and do not survive a reconnect of an
 *   endpoint list (GEMMs naming them then fail with NOT_FOUND).
 * - Over TCP, mfma_region_create fails with
 *   MFMA_EREMOTE(MFMA_CODE_FAILED_PRECONDITION).
 * - The daemon bounds them: limits.max_regions_per_conn,
 *   limits.max_region_mb_per_conn, limits.max_pinned_mb; a refusal names
 *   the limit (RESOURCE_EXHAUSTED). */
typedef struct mfma_region mfma_region;

/* Creates a region of `bytes` bytes (rounded up to the page size) and
 * registers it; *region then gives its memory (mfma_region_data), zeroed,
 * readable and writable. */
int mfma_region_create(mfma_client *client, size_t bytes, mfma_region **region,
		       struct mfma_error *err);
/* Unregisters it (answered once no request uses it) and unmaps it.  NULL
 * is fine.  The memory is unmapped even when the daemon could not be
 * told (a broken connection), and the error is returned. */
int mfma_region_destroy(mfma_client *client, mfma_region *region, struct mfma_error *err);
void *mfma_region_data(const mfma_region *region);
size_t mfma_region_size(const mfma_region *region);

/* ---- ping ---- */

/* Sends `len` bytes (may be 0) and checks that they come back unchanged;
 * *round_trip_ns (may be NULL) receives the time it took. */
int mfma_ping(mfma_client *client, const void *payload, size_t len, uint64_t *round_trip_ns,
	      struct mfma_error *err);

/* Asks the daemon to drain, as SIGUSR1 does: it reports not ready, stops
 * accepting connections, finishes what is in flight and exits 0.  Returns
 * once the daemon has said it will. */
int mfma_drain(mfma_client *client, struct mfma_error *err);

/* ---- weights ---- */

struct mfma_weight_info {
	const char *name;
	uint32_t rows, cols;
	enum mfma_type dtype;
	bool sparse;         /* held in 2:4 form */
	uint64_t bytes;      /* host-format bytes per device */
	size_t n_devices;
	const uint32_t *devices;
	uint64_t requests;   /* GEMMs answered on it */
	uint64_t launches;   /* the launches they took: requests / launches is the mean batch */
};

/* A weight the daemon's configuration declares (weights.declare) and where
 * it stands; the daemon is ready only when every one is resident. */
enum mfma_declared_state {
	MFMA_DECLARED_UNKNOWN = 0,
	MFMA_DECLARED_LOADING = 1,  /* its file is being read or made resident */
	MFMA_DECLARED_RESIDENT = 2,
	MFMA_DECLARED_FAILED = 3,   /* message says why */
};

struct mfma_declared_weight {
	const char *name;
	const char *file;
	enum mfma_declared_state state;
	const char *message;        /* "" unless it failed */
};

struct mfma_load_args {
	const char *name;
	struct mfma_operand a; /* dense (with sparsity) or 2:4; not a weight */
	int device;            /* -1: every device */
	bool replace;          /* replace an existing weight of that name */
};

void mfma_load_args_init(struct mfma_load_args *args);

struct mfma_load_result {
	struct mfma_weight_info weight;
	void *priv;
};

void mfma_load_result_free(struct mfma_load_result *result);
/* Whether the daemon stored the weight (weights.persist), so that a
 * restart restores it: 1 stored, 0 not (it serves, but a full disk or an
 * I/O error kept its file from being written: the daemon's log says why),
 * -1 the daemon does not store weights (or did not say). */
int mfma_load_result_stored(const struct mfma_load_result *result);

/* result may be NULL when the caller does not need the description. */
int mfma_load_weight(mfma_client *client, const struct mfma_load_args *args,
		     struct mfma_load_result *result, struct mfma_error *err);

int mfma_unload_weight(mfma_client *client, const char *name, struct mfma_error *err);

struct mfma_weight_list {
	size_t n_weights;
	struct mfma_weight_info *weights;
	void *priv;
	size_t n_declared;          /* the declared weights, resident or not */
	struct mfma_declared_weight *declared;
};

void mfma_weight_list_free(struct mfma_weight_list *list);

int mfma_list_weights(mfma_client *client, struct mfma_weight_list *list,
		      struct mfma_error *err);

/* ---- status ---- */

struct mfma_device_status {
	uint32_t index;
	const char *backend, *arch, *name;
	uint64_t mem_total;
	uint64_t mem_used;   /* weight bytes resident */
	uint32_t queue_depth;
	uint32_t in_flight;
	size_t n_variants;
	const char *const *variants;
	uint64_t completed, failed;
	/* The device's kernel providers, each "name", "name:pinned" or
	 * "name:excluded" (the daemon's cuda.providers / hip.providers); none
	 * for the CPU backend. */
	size_t n_providers;
	const char *const *providers;
	/* Where the device's worker thread has spent its time since the
	 * daemon started, ns: waiting for work, preparing jobs, in the
	 * backend's GEMM call, waiting for a launch left running, finishing
	 * answers (0 from a daemon that does not report them). */
	uint64_t worker_idle_ns, worker_prepare_ns, worker_launch_ns, worker_wait_ns,
		worker_answers_ns;
	/* GEMMs the daemon's loop thread started itself on the idle device
	 * (limits.loop_start), among completed and failed (0 from a daemon
	 * that does not report them). */
	uint64_t loop_starts;
	/* Why the device takes no work: it failed to open, or lost its
	 * context since (a GPU fault; until the daemon restarts).  "" while
	 * it serves. */
	const char *fault;
};

struct mfma_counters {
	uint64_t requests, ok, failed, busy;
	uint64_t connections_open, connections_total;
	uint64_t in_flight, malformed;
};

struct mfma_status {
	const char *version;
	uint64_t uptime_ns;
	size_t n_devices;
	struct mfma_device_status *devices;
	size_t n_weights;
	struct mfma_weight_info *weights;
	struct mfma_counters counters;
	uint64_t weight_budget; /* bytes the daemon may hold in weights (0 = no limit) */
	uint64_t weight_bytes;  /* bytes held now */
	void *priv;
	size_t n_declared;      /* the declared weights, resident or not */
	struct mfma_declared_weight *declared;
};

void mfma_status_free(struct mfma_status *status);

int mfma_status(mfma_client *client, struct mfma_status *status, struct mfma_error *err);

/* ---- without the daemon ---- */

/* The connection's socket, for a caller's own event loop (poll it for
 * reading, then call mfma_wait with timeout 0); -1 once it broke.  The
 * library may already hold answers it read while sending, so call
 * mfma_wait(..., 0, ...) before sleeping on the socket. */
int mfma_fileno(const mfma_client *client);

/* The canonical 2:4 codec of struct mfma_sparse24, the daemon's own.
 * dense is rows x cols of dtype t (f32, f16, bf16, i8; cols a multiple of
 * 4); values has room for rows x cols/2 elements, meta for
 * rows x ((cols/4 + 7) / 8) uint32.  prune keeps the two largest
 * magnitudes of every group of 4 (ties to the lower position); compress
 * refuses (-EINVAL, naming the row and group) a matrix that is not 2:4
 * already; decompress writes zeros where nothing was kept. */
int mfma_sparse24_prune(const void *dense, enum mfma_type t, uint32_t rows, uint32_t cols,
			void *values, uint32_t *meta, struct mfma_error *err);
int mfma_sparse24_compress(const void *dense, enum mfma_type t, uint32_t rows, uint32_t cols,
			   void *values, uint32_t *meta, struct mfma_error *err);
int mfma_sparse24_decompress(const void *values, const uint32_t *meta, enum mfma_type t,
			     uint32_t rows, uint32_t cols, void *dense, struct mfma_error *err);

/* The largest relative Frobenius error, ||D - R||_F / ||R||_F against a
 * float64 reference R, that a correct answer of output type `out` with an
 * inner dimension k can have: 2*u_out + (k + 2) * 2^-24, where u_out is
 * 2^-24 for f32, 2^-11 for f16, 2^-8 for bf16; 0 (exact) for i32.  For
 * k = 4096 and f32 output that is 2.4e-4, while losing one partial sum
 * of 16 terms gives about 6e-2.  mfmactl --check uses it. */
double mfma_check_tolerance(enum mfma_type out, uint32_t k);

#ifdef __cplusplus
}
#endif

#endif
