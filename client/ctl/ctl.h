/* mfmactl: what the command files share.  Each command is one function
 * `int ctl_cmd_NAME(struct ctl *, int argc, char **argv)` that returns the
 * process exit code; argv[0] is the command's name. */
#ifndef MFMA_CTL_H
#define MFMA_CTL_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "json.h"
#include "mfma.h"
#include "mfma_dtype.h"

/* mfmactl works in the kernels' enum mfma_dtype (the .npy files, the CPU
 * reference, the 2:4 codec); the library's public enum mfma_type has the
 * same numbers (client/lib/requests.c asserts it).  These cross over. */
static inline enum mfma_type ctl_type(enum mfma_dtype t)
{
	return (enum mfma_type)t;
}

static inline enum mfma_dtype ctl_dtype(enum mfma_type t)
{
	return (enum mfma_dtype)t;
}

/* Exit codes, documented in `mfmactl --help`; scripts rely on them. */
enum {
	CTL_EXIT_OK = 0,
	CTL_EXIT_DAEMON = 1,    /* the daemon answered with an error */
	CTL_EXIT_USAGE = 2,     /* bad option or argument, unreadable or invalid input file */
	CTL_EXIT_TRANSPORT = 3, /* cannot connect, connection lost, timed out */
	CTL_EXIT_CHECK = 4,     /* submit --check: the result is over the tolerance */
	CTL_EXIT_LOCAL = 5,     /* a local failure: out of memory, cannot write the output */
};

struct ctl {
	const char *endpoint; /* NULL: MFMA_ENDPOINT, else the default socket */
	bool json;
	int timeout_ms;       /* < 0: forever */
	int spin_us;          /* --spin-us; < 0: the library's (MFMA_SPIN_US, else 0) */
	const char *token_file; /* NULL: MFMA_TOKEN_FILE, else no token */
	struct mfma_tls tls;  /* --tls-ca/--tls-cert/--tls-key; NULL fields: MFMA_TLS_* */
	struct json j;        /* stdout, when json */
	int progress_pct;     /* last percentage shown, -1: none */
};

/* Options every command accepts after its name as well as before it. */
#define CTL_COMMON_SHORT "he:"
#define CTL_COMMON_LONG                                                   \
	{ "help", no_argument, NULL, 'h' },                               \
	{ "endpoint", required_argument, NULL, 'e' },                     \
	{ "json", no_argument, NULL, CTL_OPT_JSON },                      \
	{ "timeout", required_argument, NULL, CTL_OPT_TIMEOUT },          \
	{ "spin-us", required_argument, NULL, CTL_OPT_SPIN_US },          \
	{ "token-file", required_argument, NULL, CTL_OPT_TOKEN_FILE },    \
	{ "tls-ca", required_argument, NULL, CTL_OPT_TLS_CA },            \
	{ "tls-cert", required_argument, NULL, CTL_OPT_TLS_CERT },        \
	{ "tls-key", required_argument, NULL, CTL_OPT_TLS_KEY }
enum {
	CTL_OPT_JSON = 1000,
	CTL_OPT_TIMEOUT,
	CTL_OPT_SPIN_US,
	CTL_OPT_TOKEN_FILE,
	CTL_OPT_TLS_CA,
	CTL_OPT_TLS_CERT,
	CTL_OPT_TLS_KEY,
	CTL_OPT_FIRST_COMMAND_OPTION
};

/* Handles an option outside the command's own: a common one (returns
 * CTL_CONTINUE), -h (prints the command's help, returns 0), a bad value or
 * getopt's '?' (returns 2).  A command returns anything but CTL_CONTINUE
 * as its exit code. */
#define CTL_CONTINUE (-1)
int ctl_common_option(struct ctl *ctl, const char *cmd, int opt, const char *arg);

/* "mfmactl CMD: message" and a hint to --help on stderr; returns 2. */
int ctl_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reports a failed library call (stderr, and a JSON error object on stdout
 * under --json) and returns the exit code it maps to: 1 for a daemon
 * error, 3 for the transport, 5 for local failures. */
int ctl_fail(struct ctl *ctl, const char *what, int rc, const struct mfma_error *err);

/* A local failure that is not the library's: message on stderr (and JSON
 * under --json); returns `code`. */
int ctl_fail_local(struct ctl *ctl, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Shows the progress of sending a large request on stderr, when stderr is
 * a terminal and the output is not JSON (submit and load use it). */
void ctl_progress(struct ctl *ctl, mfma_client *client);

/* Connects with the endpoint and timeout options; an exit code. */
int ctl_connect(struct ctl *ctl, mfma_client **client);

void ctl_print_help(const char *cmd);

/* ---- matrices in .npy files (ctl_io.c) ---- */

struct ctl_matrix {
	uint32_t rows, cols;
	enum mfma_dtype dtype;
	void *data;
	size_t bytes;
	void *alloc; /* what to free */
};

/* Reads a .npy file as dtype `want` (MFMA_DT_NONE: whatever it holds).
 * With convert, f32 data is rounded to a wanted f16 or bf16; otherwise
 * a mismatch is an error.  0, or -errno with a sentence. */
int ctl_read_matrix(const char *path, enum mfma_dtype want, bool convert, struct ctl_matrix *m,
		    char *err, size_t errlen);
int ctl_write_matrix(const char *path, enum mfma_dtype t, uint32_t rows, uint32_t cols,
		     const void *data, char *err, size_t errlen);
void ctl_matrix_free(struct ctl_matrix *m);
/* A zero-filled matrix (for building inputs); 0 or -ENOMEM. */
int ctl_matrix_alloc(struct ctl_matrix *m, enum mfma_dtype t, uint32_t rows, uint32_t cols);

static inline struct mfma_matrix ctl_as_mfma(const struct ctl_matrix *m)
{
	struct mfma_matrix x = { m->rows, m->cols, ctl_type(m->dtype), m->data, m->bytes };
	return x;
}

/* The canonical 2:4 form of a matrix, in buffers mfmactl owns. */
struct ctl_packed {
	void *values;
	uint32_t *meta;
	size_t values_bytes, meta_bytes;
};
/* Allocates pk for the 2:4 form of a (K a multiple of 4); 0 or -ENOMEM. */
int ctl_packed_alloc(struct ctl_packed *pk, const struct ctl_matrix *a);
/* The A operand of a GEMM or a weight from a dense matrix: as it is, or
 * flagged VALIDATE_24 / PRUNE_24, or compressed here to the canonical 2:4
 * form (CTL_SPARSE_PACKED; the buffers go to pk).  0 or -errno with a
 * sentence. */
int ctl_make_operand(const struct ctl_matrix *a, int sparse_mode, struct mfma_operand *op,
		     struct ctl_packed *pk, char *err, size_t errlen);
void ctl_packed_free(struct ctl_packed *pk);

/* A weight as a table row / JSON object (ctl_cmds.c); load_ns, when not
 * 0, is the load's round trip (load --json: "load_ns"). */
void ctl_print_weights(const struct mfma_weight_info *w, size_t n);
/* stored: load's mfma_load_result_stored, or -1 (not printed). */
void ctl_json_weight(struct json *j, const struct mfma_weight_info *w, uint64_t load_ns,
		     int stored);

/* ---- the commands ---- */

int ctl_cmd_ping(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_drain(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_status(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_submit(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_load(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_unload(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_weights(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_random(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_bench(struct ctl *ctl, int argc, char **argv);

#endif
