/* The daemon's configuration: libconfig file, then command-line flags.
 * Parsing is pure (no side effects beyond the struct) so it is unit
 * tested on strings; every key of conf/mfmad.conf is documented there. */
#ifndef MFMAD_CONFIG_H
#define MFMAD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "providers.h"

enum backend_enable { BACKEND_OFF = 0, BACKEND_ON = 1, BACKEND_AUTO = 2 };

/* weights.declare: at most this many entries (the refusal names it). */
#define CONFIG_DECLARE_MAX 64

/* One declared weight: what `mfmactl load NAME FILE --sparse S --dtype T
 * --device D` would send, read by the daemon itself. */
struct weight_decl {
	char name[128];
	char file[256];     /* an absolute path to a .npy file */
	int sparsity;       /* the wire's Sparsity: DENSE, VALIDATE_24 or PRUNE_24 */
	int dtype;          /* enum mfma_dtype; MFMA_DT_NONE: the file's own */
	int device;         /* -1: every device that runs it */
};

struct mfmad_config {
	int log_level;                 /* enum log_level */
	char unix_path[108];           /* "" = the default for this user */
	int unix_mode;                 /* permission bits of the socket */
	bool tcp_enabled;
	char tcp_address[64];
	int tcp_port;
	bool tcp_allow_remote;         /* allow a non-loopback tcp_address */
	char token_file[256];          /* TCP clients must send its token first; "" = none */
	char tls_cert[256];            /* TCP listeners speak TLS with this chain; "" = plaintext */
	char tls_key[256];             /* ... and this key */
	char tls_client_ca[256];       /* TLS clients must show a certificate these CAs signed */
	char unix_users[256];          /* peers allowed on the Unix socket: names or uids, "," */
	char unix_group[64];           /* ... or members of this group; both "" = any */

	uint64_t max_frame_bytes;
	uint32_t max_inflight_per_conn;
	uint32_t max_inflight;
	uint64_t max_inflight_bytes;
	uint32_t max_connections;
	uint32_t max_connections_per_user; /* Unix peers by uid; 0: no limit */
	uint32_t max_connections_per_address; /* TCP peers by address (IPv6: /64); 0: no limit */
	uint64_t max_buffered_bytes;   /* partial frames of every connection together */
	uint64_t max_unsent_bytes;     /* answers waiting for one client, at their real cost */
	uint64_t send_buffer_bytes;    /* a Unix-socket connection's kernel send buffer; 0: the system's */
	uint64_t max_memory_bytes;     /* all a client can make the daemon hold, together */
	uint64_t read_timeout_ms;      /* a started frame must complete; 0 = none */
	uint64_t idle_timeout_ms;      /* no request and nothing pending; 0 = none */
	uint64_t write_timeout_ms;     /* answers not taken; 0 = none */
	uint32_t max_dim;
	uint32_t max_regions_per_conn;  /* shared-memory regions one connection may register */
	uint64_t max_region_bytes_per_conn; /* their bytes together */
	uint64_t max_pinned_bytes;     /* regions of every connection together (pinned on GPUs) */
	uint32_t default_priority;     /* what priority 0 means; 1 is the highest */
	uint64_t default_timeout_ms;   /* 0 = none */
	uint64_t priority_aging_ms;    /* waiting this long is worth one priority level; 0 = strict */
	uint64_t worker_poll_us;       /* an idle device worker polls this long before it sleeps */
	uint64_t loop_poll_us;         /* the loop busy-polls this long after a wake-up before it blocks */
	bool loop_start;               /* the loop starts an idle device's lone resident GEMM (live) */
	int reader_threads;            /* threads that read large frames off the loop; -1: auto */
	uint64_t reader_min_bytes;     /* frames of this size and more go to them */
	bool reader_when_busy;         /* only while other connections have work in flight */
	unsigned post_threads;         /* per device: threads that write its answers (restart) */
#define CONFIG_POST_THREADS_MAX 16
	uint64_t pinned_read_bytes;    /* request frames read into memory the GPUs register; 0 = off (restart) */

	uint64_t weight_budget_bytes;  /* per device; 0 = 75% of the device's memory */
	uint32_t weight_max_count;     /* weights.max_count: clients' weights, loading or resident */
	bool weights_persist;          /* keep loaded weights across restarts */
	uint64_t persist_min_free_bytes; /* a weight's file is not written if it would leave less free */
	char weights_state_dir[256];   /* "" = $STATE_DIRECTORY (systemd), else none */
	uint32_t ndeclared;            /* weights.declare, loaded at start and on SIGHUP */
	struct weight_decl declared[CONFIG_DECLARE_MAX];

	bool batch_enabled;            /* GEMMs on one resident weight share launches */
	uint32_t batch_max_columns;    /* the most columns (N) one launch joins */
	uint64_t batch_max_queue_delay_us; /* 0: batch only what is already queued */
	bool batch_overlap;            /* a batch's launch left running while the next starts */

	enum backend_enable cpu;       /* AUTO: only when no GPU device is found */
	int cpu_threads;               /* 0 = all cores */
	int cpu_devices;
	uint64_t cpu_inline_max_flops; /* the loop runs GEMMs up to this on an idle CPU device (live) */
	enum backend_enable hip, cuda;
	struct provider_policy hip_providers, cuda_providers; /* hip.providers, cuda.providers */
	bool cuda_warmup;              /* plan resident weights' widths at load (live on SIGHUP) */
	bool cuda_graphs;              /* replay library launches from CUDA graphs (restart) */
	bool cuda_copy_stream;         /* a batch's copy in on a stream of its own (restart) */
	bool cuda_region_copies;       /* regions' parts by the copy engines, copy stream (restart) */
	bool cuda_out_stream;          /* a batch's copy out beside the next GEMM (restart) */
	bool cuda_gate;                /* wgmma kernels launched before B is in (restart) */
	bool cuda_tile_out;            /* a lone wgmma kernel copies D out itself (restart) */
	uint64_t cuda_dma_part_bytes;  /* mapped parts up to this by the copy engines (restart) */
#define CONFIG_DMA_PART_BYTES 0 /* off: measured no faster on an H200 */
/* 2 m n k of the largest GEMM the loop runs itself on an idle CPU device
 * (cpu.inline_max_flops): 2 x 32 x 32 x 32, a few microseconds of the
 * loop against the 10-40 us of waking the device's worker. */
#define CONFIG_CPU_INLINE_MAX_FLOPS 65536
	uint32_t cuda_served_trial;    /* served launches per candidate in a choice's trial (restart) */
	uint64_t cuda_pinned_answer_bytes; /* per device, answer frames in pinned memory; 0 = off (restart) */

	uint64_t shutdown_grace_ms;
	bool metrics_enabled;
	char metrics_address[64];
	int metrics_port;
	bool metrics_allow_remote;
	uint64_t status_interval_ms;   /* systemd STATUS= refresh */
};

void config_defaults(struct mfmad_config *cfg);

/* Reads a libconfig file (or text) over the current values of cfg.  On
 * error returns -EINVAL (or -ENOENT for a missing file) and writes
 * "FILE:LINE: reason" to err; cfg is then unspecified, so callers parse
 * into a copy and keep the old one on failure. */
int config_load_file(struct mfmad_config *cfg, const char *path, char *err, size_t errlen);
int config_load_string(struct mfmad_config *cfg, const char *text, const char *name, char *err,
		       size_t errlen);

/* The state directory (weights.state_dir, else the first path of systemd's
 * $STATE_DIRECTORY) into buf, or NULL when there is none. */
const char *config_state_dir(const struct mfmad_config *cfg, char *buf, size_t len);

/* The reader threads limits.reader_threads asks for on a host of ncores
 * cores: "auto" is none below 8 cores (the loop is not what bounds a
 * small host), else a quarter of the cores, at most 4. */
unsigned config_reader_threads(const struct mfmad_config *cfg, long ncores);

/* The largest request frame a connection may read: limits.max_frame_mb,
 * unless limits.max_buffered_mb or limits.max_memory_mb is smaller, for a
 * frame and its length must fit in the read buffer those bound, and one
 * that cannot would wait for memory for ever.  *key (when key is not
 * NULL) is the setting that decides it. */
uint64_t config_read_frame_limit(const struct mfmad_config *cfg, const char **key);

/* Describes the settings that differ between a and b but cannot change
 * without a restart (socket, backends, threads) into buf; returns how many. */
int config_restart_only_changes(const struct mfmad_config *a, const struct mfmad_config *b,
				char *buf, size_t len);

#endif
