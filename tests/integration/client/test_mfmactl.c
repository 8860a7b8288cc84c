/* mfmactl, the built binary, against the real mfmad: every command, the
 * files it writes checked independently of it (npy parsing and the
 * float64 reference here), --json output validated as JSON, and the
 * documented exit codes: 1 daemon error, 2 usage, 3 no daemon, 4 failed
 * --check (against a fake daemon that answers wrong). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "cpu_gemm.h"
#include "frame.h"
#include "harness.h"
#include "mfmad_build.h"
#include "json.h"
#include "mfma.pb-c.h"
#include "mfma.h"
#include "npy.h"
#include "sparse24.h"

#define OUT_MAX (1 << 20)

struct env {
	struct mfmad_proc d;
	bool have_daemon;
	char dir[64];
	char *out; /* stdout of the last command */
};

static int setup_dir(struct env *e)
{
	snprintf(e->dir, sizeof(e->dir), "/tmp/mfmactl-test-XXXXXX");
	e->out = malloc(OUT_MAX);
	return mkdtemp(e->dir) && e->out ? 0 : -1;
}

static int setup(void **state)
{
	struct env *e = calloc(1, sizeof(*e));
	if (!e || setup_dir(e) < 0 || harness_start(&e->d, NULL, NULL) != 0)
		return -1;
	e->have_daemon = true;
	*state = e;
	return 0;
}

static int setup_no_daemon(void **state)
{
	struct env *e = calloc(1, sizeof(*e));
	if (!e || setup_dir(e) < 0)
		return -1;
	*state = e;
	return 0;
}

static int teardown(void **state)
{
	struct env *e = *state;
	int rc = e->have_daemon ? harness_stop(&e->d) : 0;
	DIR *dir = opendir(e->dir);
	if (dir) {
		struct dirent *de;
		char path[512];
		while ((de = readdir(dir)))
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
				snprintf(path, sizeof(path), "%s/%s", e->dir, de->d_name);
				unlink(path);
			}
		closedir(dir);
	}
	rmdir(e->dir);
	free(e->out);
	free(e);
	return rc == 0 ? 0 : -1;
}

/* Runs mfmactl with `-e ENDPOINT` (when there is a daemon) and the given
 * arguments (NULL-terminated); stdout lands in e->out.  Returns the exit
 * status. */
static int ctl(struct env *e, ...)
{
	const char *argv[64];
	int n = 0;
	va_list ap;
	argv[n++] = getenv("MFMACTL_BIN");
	assert_non_null(argv[0]);
	if (e->have_daemon) {
		argv[n++] = "-e";
		argv[n++] = e->d.endpoint;
	}
	va_start(ap, e);
	const char *a;
	while ((a = va_arg(ap, const char *)) && n < 63)
		argv[n++] = a;
	va_end(ap);
	argv[n] = NULL;
	return harness_run(argv, e->out, OUT_MAX);
}

static const char *path(struct env *e, const char *name)
{
	static char buf[4][256];
	static int next;
	char *p = buf[next++ % 4];
	snprintf(p, 256, "%s/%s", e->dir, name);
	return p;
}

static void expect_json(const char *text)
{
	char err[256];
	if (json_validate(text, strlen(text), err, sizeof(err)) != 0)
		fail_msg("not JSON (%s):\n%s", err, text);
}

static void expect_in(const char *text, const char *needle)
{
	if (!strstr(text, needle))
		fail_msg("'%s' not in:\n%s", needle, text);
}

/* The unsigned number after "key": in text, after the first "within":
 * (the object the key belongs to); fails the test where there is none. */
static unsigned long long json_number(const char *text, const char *within, const char *key)
{
	const char *at = strstr(text, within);
	if (at)
		at = strstr(at, key);
	if (!at)
		fail_msg("%s ... %s not in:\n%s", within, key, text);
	return strtoull(at + strlen(key), NULL, 10);
}

/* Every "quoted" word of the JSON section of `mfmactl CMD --help` is a
 * key of the --json output in e->out (except those in skip: quoted values,
 * keys of parts absent here), so that the help does not name keys the
 * output lacks (bench's "sparse", printed as "a").  Reruns mfmactl: e->out
 * is the help afterwards. */
static void expect_help_keys(struct env *e, const char *cmd, const char *const *skip)
{
	char *json = strdup(e->out);
	assert_non_null(json);
	assert_int_equal(ctl(e, cmd, "--help", NULL), 0);
	const char *at = strstr(e->out, "\nJSON\n");
	assert_non_null(at);
	const char *end = strstr(at + 6, "\n\n");
	if (!end)
		end = at + strlen(at);
	size_t keys = 0;
	for (const char *q = strchr(at, '"'); q && q < end; q = strchr(q, '"')) {
		const char *close = strchr(q + 1, '"');
		assert_non_null(close);
		char key[64], needle[72];
		snprintf(key, sizeof(key), "%.*s", (int)(close - q - 1), q + 1);
		q = close + 1;
		bool skipped = false;
		for (size_t i = 0; skip && skip[i]; i++)
			skipped |= !strcmp(skip[i], key);
		if (skipped)
			continue;
		snprintf(needle, sizeof(needle), "\"%s\":", key);
		if (!strstr(json, needle))
			fail_msg("mfmactl %s --help names \"%s\", not in its --json output:\n%s", cmd,
				 key, json);
		keys++;
	}
	assert_true(keys > 0);
	free(json);
}

/* A .npy file read back with our parser; data is malloc'd. */
struct npy_mat {
	struct npy_info info;
	uint8_t *file;
	const void *data;
};

static struct npy_mat read_npy(const char *p)
{
	struct npy_mat m = { 0 };
	FILE *f = fopen(p, "rb");
	struct stat st;
	char err[256];
	assert_non_null(f);
	assert_int_equal(fstat(fileno(f), &st), 0);
	m.file = malloc((size_t)st.st_size + 1);
	assert_non_null(m.file);
	assert_int_equal(fread(m.file, 1, (size_t)st.st_size, f), (size_t)st.st_size);
	fclose(f);
	if (npy_parse(m.file, (size_t)st.st_size, &m.info, err, sizeof(err)) != 0)
		fail_msg("%s: %s", p, err);
	/* Our writer pads the header to 64 bytes: the data is aligned. */
	assert_int_equal(m.info.data_offset % 64, 0);
	m.data = m.file + m.info.data_offset;
	return m;
}

/* ---- usage and help (no daemon needed) ---- */

static void test_help_and_usage(void **state)
{
	struct env *e = *state;
	assert_int_equal(ctl(e, "--help", NULL), 0);
	expect_in(e->out, "EXIT STATUS");
	expect_in(e->out, "MFMA_ENDPOINT");
	expect_in(e->out, "EXAMPLES");
	static const char *const cmds[] = { "ping", "status", "submit", "load", "unload",
					    "weights", "random", "bench" };
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		assert_int_equal(ctl(e, cmds[i], "--help", NULL), 0);
		expect_in(e->out, "SYNOPSIS");
		expect_in(e->out, cmds[i]);
		assert_int_equal(ctl(e, "help", cmds[i], NULL), 0);
		expect_in(e->out, "SYNOPSIS");
	}
	assert_int_equal(ctl(e, "submit", "--help", NULL), 0);
	expect_in(e->out, "--check");
	expect_in(e->out, "--out-dtype");
	assert_int_equal(ctl(e, "--version", NULL), 0);
	expect_in(e->out, "mfmactl " MFMAD_VERSION "\nlibmfmaclient " MFMAD_VERSION "\n");
	assert_int_equal(ctl(e, "-V", NULL), 0);
	expect_in(e->out, "mfmactl ");

	assert_int_equal(ctl(e, NULL), 2);
	assert_int_equal(ctl(e, "frobnicate", NULL), 2);
	assert_int_equal(ctl(e, "ping", "--bogus", NULL), 2);
	assert_int_equal(ctl(e, "ping", "-c", "zero", NULL), 2);
	assert_int_equal(ctl(e, "submit", "-a", "x.npy", NULL), 2);
	assert_int_equal(ctl(e, "submit", "-a", "x.npy", "--weight", "w", "-b", "y.npy", NULL), 2);
	assert_int_equal(ctl(e, "random", "-o", path(e, "r.npy"), "--shape", "0x4", "--dtype",
			     "f32", NULL), 2);
	assert_int_equal(ctl(e, "random", "-o", path(e, "r.npy"), "--shape", "4x6", "--dtype",
			     "f32", "--sparse24", NULL), 2);
	assert_int_equal(ctl(e, "--timeout", "-5", "ping", NULL), 2);
	/* An input file that is missing or not .npy is a usage error too. */
	assert_int_equal(ctl(e, "submit", "-a", path(e, "missing.npy"), "-b", path(e, "m2.npy"),
			     NULL), 2);
	FILE *f = fopen(path(e, "junk.npy"), "w");
	fputs("not numpy", f);
	fclose(f);
	assert_int_equal(ctl(e, "--json", "load", "w", path(e, "junk.npy"), NULL), 2);
	expect_json(e->out);
	expect_in(e->out, "not a .npy file");
	/* A usage error with --json is a JSON error too. */
	assert_int_equal(ctl(e, "--json", "submit", "-b", path(e, "m2.npy"), NULL), 2);
	expect_json(e->out);
	expect_in(e->out, "\"name\": \"USAGE\"");
	expect_in(e->out, "give -a A.npy or --weight NAME");
	/* --json read before the command: a usage error found before the
	 * command runs (none, an unknown one, a bad common option) is JSON
	 * too, where it once crashed mfmactl (SIGSEGV, status 139). */
	assert_int_equal(ctl(e, "--json", NULL), 2);
	expect_json(e->out);
	expect_in(e->out, "no command given");
	assert_int_equal(ctl(e, "--json", "frobnicate", NULL), 2);
	expect_json(e->out);
	expect_in(e->out, "unknown command 'frobnicate'");
	assert_int_equal(ctl(e, "--json", "--timeout", "soon", "ping", NULL), 2);
	expect_json(e->out);
	expect_in(e->out, "--timeout 'soon'");
	/* getopt's own refusals, which print only to stderr. */
	assert_int_equal(ctl(e, "--json", "ping", "--bogus", NULL), 2);
	expect_json(e->out);
	expect_in(e->out, "\"name\": \"USAGE\"");
	/* `help --help` is the help; `help` of an unknown command is only the
	 * error, not the whole help before it. */
	assert_int_equal(ctl(e, "help", "--help", NULL), 0);
	expect_in(e->out, "EXIT STATUS");
	assert_int_equal(ctl(e, "help", "frobnicate", NULL), 2);
	assert_null(strstr(e->out, "COMMANDS"));
	/* bench takes --sparse's mode after '=' (alone it is packed): the
	 * spelling submit and load take says which form to use. */
	assert_int_equal(ctl(e, "--json", "bench", "--sparse", "prune", NULL), 2);
	expect_in(e->out, "--sparse=prune");
}

static void test_no_daemon(void **state)
{
	struct env *e = *state;
	char ep[128];
	snprintf(ep, sizeof(ep), "unix:%s/none.sock", e->dir);
	assert_int_equal(ctl(e, "-e", ep, "ping", NULL), 3);
	assert_int_equal(ctl(e, "-e", ep, "--json", "status", NULL), 3);
	expect_json(e->out);
	expect_in(e->out, "\"error\"");
	expect_in(e->out, "none.sock");
	/* The endpoint from the environment, and -e after the command. */
	setenv("MFMA_ENDPOINT", ep, 1);
	assert_int_equal(ctl(e, "weights", "--json", NULL), 3);
	expect_in(e->out, "none.sock");
	unsetenv("MFMA_ENDPOINT");
	assert_int_equal(ctl(e, "unload", "w", "-e", ep, NULL), 3);
}

/* ---- random ---- */

static void test_random(void **state)
{
	struct env *e = *state;
	static const struct {
		const char *dtype;
		enum npy_type t;
	} cases[] = { { "f32", NPY_F4 }, { "f16", NPY_F2 }, { "bf16", NPY_U2 }, { "i8", NPY_I1 } };
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		enum mfma_dtype dt = mfma_dtype_parse(cases[i].dtype);
		for (int sp = 0; sp < 2; sp++) {
			const char *p = path(e, "r.npy");
			if (sp)
				assert_int_equal(ctl(e, "--json", "random", "-o", p, "--shape", "13x24",
						     "--dtype", cases[i].dtype, "--sparse24", "--seed",
						     "9", NULL), 0);
			else
				assert_int_equal(ctl(e, "random", "--json", "-o", p, "--shape", "13x23",
						     "--dtype", cases[i].dtype, "--seed", "9", NULL),
						 0);
			expect_json(e->out);
			expect_in(e->out, "\"seed\": 9");
			struct npy_mat m = read_npy(p);
			assert_int_equal(m.info.type, cases[i].t);
			assert_int_equal(m.info.rows, 13);
			assert_int_equal(m.info.cols, sp ? 24 : 23);
			size_t nz = 0, count = (size_t)m.info.rows * m.info.cols;
			for (size_t k = 0; k < count; k++)
				nz += mfma_load_f64(m.data, dt, k) != 0.0;
			if (sp) {
				assert_int_equal(nz, count / 2);
				assert_int_equal(sparse24_validate(m.data, dt, 13, 24, NULL, NULL), 0);
			} else {
				assert_int_equal(nz, count);
			}
			free(m.file);
		}
	}
	/* The same seed gives the same file; another seed another. */
	assert_int_equal(ctl(e, "random", "-o", path(e, "s1.npy"), "--shape", "5x8", "--dtype",
			     "f16", "--seed", "77", NULL), 0);
	assert_int_equal(ctl(e, "random", "-o", path(e, "s2.npy"), "--shape", "5x8", "--dtype",
			     "f16", "--seed", "77", NULL), 0);
	assert_int_equal(ctl(e, "random", "-o", path(e, "s3.npy"), "--shape", "5x8", "--dtype",
			     "f16", "--seed", "78", NULL), 0);
	struct npy_mat a = read_npy(path(e, "s1.npy")), b = read_npy(path(e, "s2.npy")),
		       c = read_npy(path(e, "s3.npy"));
	assert_memory_equal(a.data, b.data, 80);
	assert_memory_not_equal(a.data, c.data, 80);
	free(a.file);
	free(b.file);
	free(c.file);
}

/* The files -o writes: a shape too large to address is refused (it
 * wrapped to 0 bytes and random wrote past a 1-byte buffer); a file is
 * replaced whole, keeping its mode, with no temporary left; a device that
 * fails the write stays (the failed write removed the path: /dev/full
 * itself, run as root); a symbolic link is written through, not replaced. */
static void test_output_files(void **state)
{
	struct env *e = *state;
	assert_int_equal(ctl(e, "random", "-o", path(e, "huge.npy"), "--shape",
			     "2147483648x2147483648", "--dtype", "f32", NULL), 5);
	assert_int_equal(access(path(e, "huge.npy"), F_OK), -1);
	/* A directory that is not there: the error names the path given
	 * first, not only the temporary file beside it. */
	char nodir[128];
	snprintf(nodir, sizeof(nodir), "%s/nodir/x.npy", e->dir);
	assert_int_equal(ctl(e, "--json", "random", "-o", nodir, "--shape", "2x2", "--dtype", "f32",
			     NULL), 5);
	expect_json(e->out);
	char said[256];
	snprintf(said, sizeof(said), "\"message\": \"%s: No such file or directory (creating ", nodir);
	expect_in(e->out, said);

	const char *r = path(e, "r.npy");
	assert_int_equal(ctl(e, "random", "-o", r, "--shape", "5x8", "--dtype", "f16", NULL), 0);
	assert_int_equal(chmod(r, 0640), 0);
	assert_int_equal(ctl(e, "random", "-o", r, "--shape", "3x4", "--dtype", "f32", NULL), 0);
	struct npy_mat m = read_npy(r);
	assert_int_equal(m.info.rows, 3);
	assert_int_equal(m.info.cols, 4);
	free(m.file);
	struct stat st;
	assert_int_equal(stat(r, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0640);
	int entries = 0;
	DIR *dir = opendir(e->dir);
	assert_non_null(dir);
	for (struct dirent *de; (de = readdir(dir));)
		entries += de->d_name[0] != '.';
	closedir(dir);
	assert_int_equal(entries, 1); /* r.npy alone */

	const char *link = path(e, "link.npy");
	assert_int_equal(symlink(r, link), 0);
	assert_int_equal(ctl(e, "random", "-o", link, "--shape", "2x4", "--dtype", "f32", NULL), 0);
	assert_int_equal(lstat(link, &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	m = read_npy(r);
	assert_int_equal(m.info.rows, 2);
	free(m.file);

	/* A device whose every write fails, as /dev/full (root only). */
	const char *full = path(e, "full");
	if (geteuid() != 0 || mknod(full, S_IFCHR | 0666, makedev(1, 7)) != 0) {
		print_message("  (not root: the failing device is not made)\n");
		return;
	}
	assert_int_equal(ctl(e, "random", "-o", full, "--shape", "64x64", "--dtype", "f32", NULL), 5);
	assert_int_equal(lstat(full, &st), 0);
	assert_true(S_ISCHR(st.st_mode));
}

/* ---- submit ---- */

/* D.npy against alpha*A.B + beta*C computed here from the files. */
static void verify_d(struct env *e, const char *an, const char *bn, const char *cn, float alpha,
		     float beta, enum mfma_dtype in, enum mfma_dtype out, bool prune)
{
	struct npy_mat a = read_npy(path(e, an)), b = read_npy(path(e, bn)),
		       d = read_npy(path(e, "D.npy")), c = { 0 };
	if (cn)
		c = read_npy(path(e, cn));
	uint32_t m = a.info.rows, k = a.info.cols, n = b.info.cols;
	assert_int_equal(d.info.rows, m);
	assert_int_equal(d.info.cols, n);
	assert_int_equal(d.info.type, npy_type_of(out));
	const void *adata = a.data;
	void *pruned = NULL;
	if (prune) {
		size_t es = mfma_dtype_size(in);
		void *values = malloc(sparse24_values_bytes(m, k, es));
		uint32_t *meta = malloc(sparse24_meta_bytes(m, k));
		pruned = malloc((size_t)m * k * es);
		assert_int_equal(sparse24_prune(a.data, in, m, k, values, meta), 0);
		assert_int_equal(sparse24_decompress(values, meta, in, m, k, pruned, NULL, NULL), 0);
		free(values);
		free(meta);
		adata = pruned;
	}
	struct mfma_gemm g = { .m = m, .n = n, .k = k, .in_dtype = in, .out_dtype = out,
			       .alpha = alpha, .beta = cn ? beta : 0.0f, .a = adata, .b = b.data,
			       .c = cn ? c.data : NULL, .d = (void *)(uintptr_t)d.data };
	double *ref = malloc((size_t)m * n * sizeof(double));
	assert_int_equal(cpu_gemm_ref_f64(&g, ref), 0);
	double err = cpu_rel_frobenius(d.data, out, ref, (size_t)m * n);
	/* libmfmaclient's rule (what --check applies): by output type and K. */
	double tol = out == MFMA_DT_I32 ? 0.0 : mfma_check_tolerance((enum mfma_type)out, k);
	if (tol == 0.0 ? err != 0.0 : !(err < tol))
		fail_msg("%s: relative error %g over %g", mfma_dtype_name(in), err, tol);
	free(ref);
	free(pruned);
	free(a.file);
	free(b.file);
	free(c.file);
	free(d.file);
}

static void test_submit_every_dtype(void **state)
{
	struct env *e = *state;
	static const struct {
		const char *in, *out_flag;
		enum mfma_dtype din, dout;
	} cases[] = {
		{ "f32", NULL, MFMA_DT_F32, MFMA_DT_F32 },
		{ "f16", NULL, MFMA_DT_F16, MFMA_DT_F32 },
		{ "bf16", NULL, MFMA_DT_BF16, MFMA_DT_F32 },
		{ "i8", NULL, MFMA_DT_I8, MFMA_DT_I32 },
		{ "f16", "f16", MFMA_DT_F16, MFMA_DT_F16 },
		{ "bf16", "bf16", MFMA_DT_BF16, MFMA_DT_BF16 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *dt = cases[i].in;
		assert_int_equal(ctl(e, "random", "-o", path(e, "A.npy"), "--shape", "37x45",
				     "--dtype", dt, "--seed", "1", NULL), 0);
		assert_int_equal(ctl(e, "random", "-o", path(e, "B.npy"), "--shape", "45x29",
				     "--dtype", dt, "--seed", "2", NULL), 0);
		const char *outf = cases[i].out_flag ? "--out-dtype" : "--check";
		const char *outv = cases[i].out_flag ? cases[i].out_flag : "--check";
		/* bf16 files are <u2 and must be declared. */
		const char *dflag = cases[i].din == MFMA_DT_BF16 ? "--dtype" : "--check";
		const char *dval = cases[i].din == MFMA_DT_BF16 ? "bf16" : "--check";
		int rc = ctl(e, "submit", "-a", path(e, "A.npy"), "-b", path(e, "B.npy"), "-o",
			     path(e, "D.npy"), "--check", outf, outv, dflag, dval, NULL);
		if (rc != 0)
			fail_msg("submit %s: exit %d\n%s", dt, rc, e->out);
		expect_in(e->out, "check: relative Frobenius error");
		expect_in(e->out, ": ok");
		expect_in(e->out, "kernel");
		expect_in(e->out, "round trip");
		expect_in(e->out, "GFLOP/s");
		verify_d(e, "A.npy", "B.npy", NULL, 1.0f, 0.0f, cases[i].din, cases[i].dout, false);
	}
	/* Without --dtype a <u2 file is refused with the hint. */
	assert_int_equal(ctl(e, "submit", "-a", path(e, "A.npy"), "-b", path(e, "B.npy"), NULL), 2);
}

static void test_submit_sparse_c_and_json(void **state)
{
	struct env *e = *state;
	assert_int_equal(ctl(e, "random", "-o", path(e, "S.npy"), "--shape", "33x64", "--dtype",
			     "f16", "--sparse24", "--seed", "3", NULL), 0);
	assert_int_equal(ctl(e, "random", "-o", path(e, "A.npy"), "--shape", "33x64", "--dtype",
			     "f16", "--seed", "4", NULL), 0);
	assert_int_equal(ctl(e, "random", "-o", path(e, "B.npy"), "--shape", "64x17", "--dtype",
			     "f16", "--seed", "5", NULL), 0);
	assert_int_equal(ctl(e, "random", "-o", path(e, "C.npy"), "--shape", "33x17", "--dtype",
			     "f32", "--seed", "6", NULL), 0);
	static const char *const modes[] = { "validate", "packed" };
	for (size_t i = 0; i < 2; i++) {
		int rc = ctl(e, "submit", "-a", path(e, "S.npy"), "-b", path(e, "B.npy"), "--sparse",
			     modes[i], "--check", "-o", path(e, "D.npy"), NULL);
		if (rc != 0)
			fail_msg("--sparse %s: exit %d\n%s", modes[i], rc, e->out);
		verify_d(e, "S.npy", "B.npy", NULL, 1.0f, 0.0f, MFMA_DT_F16, MFMA_DT_F32, false);
	}
	assert_int_equal(ctl(e, "--json", "submit", "-a", path(e, "A.npy"), "-b", path(e, "B.npy"),
			     "--sparse", "prune", "--check", "-o", path(e, "D.npy"), NULL), 0);
	expect_json(e->out);
	expect_in(e->out, "\"ok\": true");
	expect_in(e->out, "\"kernel_ns\"");
	expect_in(e->out, "\"round_trip_ns\"");
	verify_d(e, "A.npy", "B.npy", NULL, 1.0f, 0.0f, MFMA_DT_F16, MFMA_DT_F32, true);
	/* A dense A is not 2:4: validate is refused by the daemon (1), packed
	 * here before sending (2). */
	assert_int_equal(ctl(e, "submit", "-a", path(e, "A.npy"), "-b", path(e, "B.npy"),
			     "--sparse", "validate", NULL), 1);
	assert_int_equal(ctl(e, "submit", "-a", path(e, "A.npy"), "-b", path(e, "B.npy"),
			     "--sparse", "packed", NULL), 2);
	/* C with alpha and beta. */
	assert_int_equal(ctl(e, "submit", "-a", path(e, "A.npy"), "-b", path(e, "B.npy"), "-c",
			     path(e, "C.npy"), "--alpha", "0.5", "--beta", "-2", "--check", "-o",
			     path(e, "D.npy"), NULL), 0);
	verify_d(e, "A.npy", "B.npy", "C.npy", 0.5f, -2.0f, MFMA_DT_F16, MFMA_DT_F32, false);
	/* -c alone means beta 1. */
	assert_int_equal(ctl(e, "submit", "-a", path(e, "A.npy"), "-b", path(e, "B.npy"), "-c",
			     path(e, "C.npy"), "--check", "-o", path(e, "D.npy"), NULL), 0);
	verify_d(e, "A.npy", "B.npy", "C.npy", 1.0f, 1.0f, MFMA_DT_F16, MFMA_DT_F32, false);
	/* An f32 file sent as f16 with --dtype (rounded here). */
	assert_int_equal(ctl(e, "random", "-o", path(e, "F.npy"), "--shape", "64x17", "--dtype",
			     "f32", "--seed", "7", NULL), 0);
	assert_int_equal(ctl(e, "submit", "-a", path(e, "A.npy"), "-b", path(e, "F.npy"), NULL), 2);
	assert_int_equal(ctl(e, "--json", "submit", "-a", path(e, "A.npy"), "-b", path(e, "F.npy"),
			     "--dtype", "f16", "--check", NULL), 0);
	expect_in(e->out, "\"dtype\": \"f16\"");
	/* Shapes that do not fit: the daemon's error, exit 1. */
	assert_int_equal(ctl(e, "--json", "submit", "-a", path(e, "A.npy"), "-b", path(e, "C.npy"),
			     "--dtype", "f16", NULL), 1);
	expect_json(e->out);
	expect_in(e->out, "INVALID_ARGUMENT");
}

/* ---- weights ---- */

static void test_weights_commands(void **state)
{
	struct env *e = *state;
	assert_int_equal(ctl(e, "random", "-o", path(e, "W.npy"), "--shape", "40x32", "--dtype",
			     "bf16", "--sparse24", "--seed", "8", NULL), 0);
	assert_int_equal(ctl(e, "random", "-o", path(e, "B.npy"), "--shape", "32x9", "--dtype",
			     "bf16", "--seed", "9", NULL), 0);
	assert_int_equal(ctl(e, "load", "w0", path(e, "W.npy"), "--dtype", "bf16", "--sparse",
			     "validate", NULL), 0);
	expect_in(e->out, "loaded w0: 40x32 bf16 2:4");
	/* The load's round trip (warming included on a GPU). */
	expect_in(e->out, " ms\n");
	expect_in(e->out, ", in ");
	assert_int_equal(ctl(e, "--json", "load", "w1", path(e, "W.npy"), "--dtype", "bf16", NULL),
			 0);
	expect_json(e->out);
	expect_in(e->out, "\"name\": \"w1\"");
	expect_in(e->out, "\"sparse\": false");
	assert_int_equal(ctl(e, "load", "w1", path(e, "W.npy"), "--dtype", "bf16", NULL), 1);
	assert_int_equal(ctl(e, "load", "w1", path(e, "W.npy"), "--dtype", "bf16", "--replace",
			     "--sparse", "packed", NULL), 0);

	assert_int_equal(ctl(e, "weights", NULL), 0);
	expect_in(e->out, "NAME");
	expect_in(e->out, "w0");
	expect_in(e->out, "40x32");
	expect_in(e->out, "2:4");
	assert_int_equal(ctl(e, "weights", "--json", NULL), 0);
	expect_json(e->out);
	expect_in(e->out, "\"w1\"");
	/* No weights.declare here: the declared list is empty. */
	static const char *const weights_skip[] = { "file", "state", "message", NULL };
	expect_help_keys(e, "weights", weights_skip);

	assert_int_equal(ctl(e, "submit", "--weight", "w0", "-b", path(e, "B.npy"), "--dtype",
			     "bf16", "-o", path(e, "D.npy"), NULL), 0);
	verify_d(e, "W.npy", "B.npy", NULL, 1.0f, 0.0f, MFMA_DT_BF16, MFMA_DT_F32, false);

	assert_int_equal(ctl(e, "status", NULL), 0);
	expect_in(e->out, "weights: 2 resident");
	expect_in(e->out, "w1");

	assert_int_equal(ctl(e, "unload", "w0", NULL), 0);
	expect_in(e->out, "unloaded w0");
	assert_int_equal(ctl(e, "--json", "unload", "w1", NULL), 0);
	expect_json(e->out);
	/* Unknown weights: the daemon's NOT_FOUND, exit 1. */
	assert_int_equal(ctl(e, "unload", "w0", NULL), 1);
	assert_int_equal(ctl(e, "--json", "submit", "--weight", "w0", "-b", path(e, "B.npy"),
			     "--dtype", "bf16", NULL), 1);
	expect_json(e->out);
	expect_in(e->out, "NOT_FOUND");
	/* An empty name, which the library refuses before sending: a bad
	 * argument (2), not a connection that failed (3, as it was). */
	assert_int_equal(ctl(e, "--json", "load", "", path(e, "W.npy"), "--dtype", "bf16", NULL),
			 2);
	expect_json(e->out);
	expect_in(e->out, "\"name\": \"USAGE\"");
	expect_in(e->out, "the weight name is empty");
	assert_int_equal(ctl(e, "unload", "", NULL), 2);
	assert_int_equal(ctl(e, "submit", "--weight", "", "-b", path(e, "B.npy"), "--dtype", "bf16",
			     NULL), 2);
	assert_int_equal(ctl(e, "weights", NULL), 0);
	expect_in(e->out, "no resident weights");
}

/* --timeout expiring exits 3 whoever found the deadline passed: the
 * library in the middle of sending 8 MiB (DEADLINE_EXCEEDED, which exited
 * 1 as a daemon's error), the daemon, or the wait. */
static void test_timeout_exits_3(void **state)
{
	struct env *e = *state;
	const char *big = path(e, "big.npy");
	assert_int_equal(ctl(e, "random", "-o", big, "--shape", "1024x1024", "--dtype", "f32", NULL),
			 0);
	assert_int_equal(ctl(e, "--timeout", "1", "submit", "-a", big, "-b", big, NULL), 3);
	assert_int_equal(ctl(e, "--json", "--timeout", "1", "submit", "-a", big, "-b", big, NULL),
			 3);
	expect_json(e->out);
	expect_in(e->out, "\"error\"");
}

/* ---- status, ping, bench ---- */

static void test_status_ping_bench(void **state)
{
	struct env *e = *state;
	assert_int_equal(ctl(e, "ping", "-c", "3", "-s", "100", NULL), 0);
	expect_in(e->out, "seq=3 bytes=100");
	expect_in(e->out, "3 pings: min");
	assert_int_equal(ctl(e, "--json", "ping", "-c", "2", NULL), 0);
	expect_json(e->out);
	expect_in(e->out, "\"round_trip_ns\"");

	assert_int_equal(ctl(e, "status", NULL), 0);
	expect_in(e->out, "DEV");
	expect_in(e->out, "cpu");
	expect_in(e->out, "requests:");
	assert_int_equal(ctl(e, "status", "--json", NULL), 0);
	expect_json(e->out);
	expect_in(e->out, "\"devices\"");
	expect_in(e->out, "\"variants\"");
	expect_in(e->out, "\"counters\"");
	/* No GEMM on a resident weight yet: none started by the loop. */
	expect_in(e->out, "\"loop_starts\": 0");
	/* A CPU device has no providers: nothing of theirs is printed. */
	static const char *const status_skip[] = { "state", "available", "pinned", "excluded",
						    NULL };
	expect_help_keys(e, "status", status_skip);

	assert_int_equal(ctl(e, "bench", "-n", "40", "-j", "4", "--m", "33", "--n", "17", "--k",
			     "64", "--dtype", "f32", NULL), 0);
	expect_in(e->out, "requests/s");
	expect_in(e->out, "p99");
	/* The slowest answer, with the server's phases of it and the size
	 * of its launch. */
	expect_in(e->out, "  slowest      ");
	expect_in(e->out, " in its launch, ");
	assert_int_equal(ctl(e, "--json", "bench", "-n", "30", "-j", "6", "--connections", "2",
			     "--m", "16", "--n", "8", "--k", "32", "--sparse", NULL), 0);
	expect_json(e->out);
	expect_in(e->out, "\"requests\": 30");
	/* Its round trip is the latency's maximum, the server timed it, and
	 * a launch answered at least that request. */
	{
		const unsigned long long max = json_number(e->out, "\"latency_ns\"", "\"max\": ");
		const unsigned long long rt = json_number(e->out, "\"slowest\"", "\"round_trip_ns\": ");
		const unsigned long long total = json_number(e->out, "\"slowest\"", "\"total_ns\": ");
		assert_true(max > 0);
		assert_true(rt == max);
		assert_true(total > 0);
		assert_true(json_number(e->out, "\"slowest\"", "\"batch_requests\": ") >= 1);
		expect_in(strstr(e->out, "\"slowest\""), ".sp24.f16\"");
	}
	expect_in(e->out, "\"errors\": 0");
	expect_in(e->out, "\"connections\": 2");
	/* Not corked unless asked, nor a D of its own. */
	expect_in(e->out, "\"cork\": false");
	expect_in(e->out, "\"own_d\": false");
	/* Every answer's variant tallied: here one CPU 2:4 kernel answered
	 * all 30 (f16 2:4 on the CPU backend). */
	expect_in(e->out, "\"variants\": {");
	expect_in(e->out, ".sp24.f16\": 30");
	/* Connections default to one per request in flight, at most 64 (the
	 * daemon's default limits.max_connections_per_user). */
	assert_int_equal(ctl(e, "--json", "bench", "-n", "80", "-j", "80", "--m", "8", "--n", "1",
			     "--k", "8", NULL), 0);
	expect_in(e->out, "\"connections\": 64");
	expect_in(e->out, "\"errors\": 0");
	/* The batching figures against the daemon's own count: requests per
	 * launch is requests over launches (it had been weighted by each
	 * launch's size), and the kernels' GFLOP/s counts a batch's kernel
	 * once (it had counted it for every request, falling under the wall
	 * rate). */
	assert_int_equal(ctl(e, "random", "-o", path(e, "mb.npy"), "--shape", "256x256", "--dtype",
			     "f16", NULL), 0);
	assert_int_equal(ctl(e, "--json", "load", "mb", path(e, "mb.npy"), NULL), 0);
	expect_json(e->out);
	assert_true(json_number(e->out, "\"mb\"", "\"load_ns\": ") > 0);
	assert_int_equal(ctl(e, "--json", "bench", "--weight", "mb", "--n", "16", "-n", "400",
			     "-j", "8", "--warmup", "0", NULL), 0);
	{
		const char *p = strstr(e->out, "\"mean_batch\": ");
		const char *gw = strstr(e->out, "\"gflops_wall\": ");
		const char *gk = strstr(e->out, "\"gflops_kernel\": ");
		assert_true(p && gw && gk);
		const double mean = strtod(p + 14, NULL);
		const double wall = strtod(gw + 15, NULL), kern = strtod(gk + 17, NULL);
		assert_int_equal(ctl(e, "--json", "weights", NULL), 0);
		const unsigned long long req = json_number(e->out, "\"mb\"", "\"requests\": ");
		const unsigned long long launches = json_number(e->out, "\"mb\"", "\"launches\": ");
		print_message("  bench: %.3f requests per launch, daemon %llu / %llu; GFLOP/s "
			      "wall %.2f, kernels %.2f\n", mean, req, launches, wall, kern);
		assert_int_equal(req, 400);
		assert_true(launches > 0);
		assert_true(fabs(mean - (double)req / (double)launches) < 1e-6 * mean);
		assert_true(kern >= wall);
	}
	assert_int_equal(ctl(e, "unload", "mb", NULL), 0);
	assert_int_equal(ctl(e, "bench", "-n", "20", "-j", "2", "--resident", "--sparse=prune",
			     "--m", "24", "--k", "40", "--n", "8", "--dtype", "i8", NULL), 0);
	expect_in(e->out, "resident 2:4");
	/* --resident cleans up after itself. */
	assert_int_equal(ctl(e, "weights", "--json", NULL), 0);
	expect_in(e->out, "\"weights\": []");
	/* The client's spin window: a global option, reported by bench. */
	assert_int_equal(ctl(e, "--spin-us", "300", "--json", "bench", "-n", "20", "--m", "8",
			     "--n", "4", "--k", "16", "--dtype", "f32", NULL), 0);
	expect_json(e->out);
	expect_in(e->out, "\"spin_us\": 300");
	expect_in(e->out, "\"errors\": 0");
	assert_int_equal(ctl(e, "bench", "--spin-us", "50", "-n", "5", "--m", "8", "--n", "4",
			     "--k", "16", NULL), 0);
	expect_in(e->out, "client spin 50 us");
	assert_int_equal(ctl(e, "--json", "bench", "-n", "5", "--m", "8", "--n", "4", "--k", "16",
			     NULL), 0);
	expect_in(e->out, "\"spin_us\": 0");
	assert_int_equal(ctl(e, "--spin-us", "1000001", "ping", NULL), 2);
	assert_int_equal(ctl(e, "--spin-us", "-5", "ping", NULL), 2);
	assert_int_equal(ctl(e, "bench", "-n", "5", "--weight", "nope", NULL), 1);
	assert_int_equal(ctl(e, "bench", "-n", "5", "-j", "2", "--connections", "3", NULL), 2);
	/* --check: every answer of a batched load on a resident weight
	 * against float64, a B per connection; bytes and a region. */
	assert_int_equal(ctl(e, "--json", "bench", "--check", "-n", "200", "-j", "16", "--resident",
			     "--sparse", "--m", "40", "--k", "132", "--n", "3", "--dtype", "bf16", NULL),
			 0);
	expect_json(e->out);
	expect_in(e->out, "\"answers\": 200");
	expect_in(e->out, "\"failed\": 0");
	/* Without --samples: no latency_samples_ns. */
	static const char *const bench_skip[] = { "latency_samples_ns", NULL };
	expect_help_keys(e, "bench", bench_skip);
	/* The same corked (four connections of four slots): every answer
	 * right. */
	assert_int_equal(ctl(e, "--json", "bench", "--check", "--cork", "-n", "200", "-j", "16",
			     "--connections", "4", "--resident", "--sparse", "--m", "40", "--k", "132",
			     "--n", "3", "--dtype", "bf16", NULL),
			 0);
	expect_in(e->out, "\"cork\": true");
	expect_in(e->out, "\"answers\": 200");
	expect_in(e->out, "\"failed\": 0");
	assert_int_equal(ctl(e, "--json", "bench", "--check", "--cork", "--shm", "-n", "60", "-j",
			     "8", "--connections", "2", "--resident", "--m", "24", "--k", "40", "--n",
			     "5", "--dtype", "f32", NULL),
			 0);
	expect_in(e->out, "\"cork\": true");
	expect_in(e->out, "\"answers\": 60");
	expect_in(e->out, "\"failed\": 0");
	/* --own-d: each slot's D its own, the answers copied there as they
	 * are read (four connections of four slots, f16 with D of 1.4 KiB,
	 * past the answer's 1 KiB block): every answer right. */
	assert_int_equal(ctl(e, "--json", "bench", "--check", "--own-d", "-n", "200", "-j", "16",
			     "--connections", "4", "--resident", "--sparse", "--m", "180", "--k",
			     "64", "--n", "4", "--dtype", "f16", NULL),
			 0);
	expect_in(e->out, "\"own_d\": true");
	expect_in(e->out, "\"answers\": 200");
	expect_in(e->out, "\"failed\": 0");
	assert_int_equal(ctl(e, "bench", "--check", "--shm", "-n", "64", "-j", "8", "--resident",
			     "--m", "24", "--k", "40", "--n", "5", "--dtype", "f32", NULL), 0);
	expect_in(e->out, "check        64 answers against float64, 0 over the tolerance");
	assert_int_equal(ctl(e, "bench", "--check", "--weight", "w", NULL), 2);
	assert_int_equal(ctl(e, "bench", "--check", "--sparse=prune", NULL), 2);
}

/* ---- exit 4: a daemon that answers wrong ---- */

struct liar {
	int lfd;
	char sock[100];
	pthread_t tid;
	int accepts; /* connections the client makes; the GEMM comes on one of them */
};

/* Answers one GEMM with a D of the right shape and the wrong values. */
static void *liar_main(void *arg)
{
	struct liar *l = arg;
	struct pollfd pf[4];
	int n = 0;
	for (; n < l->accepts && n < 4; n++) {
		pf[n] = (struct pollfd){ .fd = accept(l->lfd, NULL, NULL), .events = POLLIN };
		if (pf[n].fd < 0)
			break;
	}
	int fd = -1;
	if (n > 0 && poll(pf, (nfds_t)n, 10000) > 0)
		for (int i = 0; i < n && fd < 0; i++)
			if (pf[i].revents & POLLIN)
				fd = pf[i].fd;
	for (int i = 0; i < n; i++)
		if (pf[i].fd != fd)
			close(pf[i].fd);
	uint8_t hdr[4];
	if (fd < 0)
		return NULL;
	if (recv(fd, hdr, 4, MSG_WAITALL) == 4) {
		uint32_t len = frame_header_get(hdr);
		uint8_t *buf = malloc(len + 1);
		if (buf && recv(fd, buf, len, MSG_WAITALL) == (ssize_t)len) {
			Mfma__V1__Request *req = mfma__v1__request__unpack(NULL, len, buf);
			if (req && req->body_case == MFMA__V1__REQUEST__BODY_GEMM) {
				uint32_t m = req->gemm->a->dense->rows, n = req->gemm->b->cols;
				float *d = malloc((size_t)m * n * 4 + 1);
				for (size_t i = 0; d && i < (size_t)m * n; i++)
					d[i] = 0.5f;
				Mfma__V1__Response resp = MFMA__V1__RESPONSE__INIT;
				Mfma__V1__GemmResult gr = MFMA__V1__GEMM_RESULT__INIT;
				Mfma__V1__Matrix dm = MFMA__V1__MATRIX__INIT;
				dm.has_rows = dm.has_cols = dm.has_dtype = dm.has_data = 1;
				dm.rows = m;
				dm.cols = n;
				dm.dtype = MFMA__V1__DTYPE__F32;
				dm.data.len = (size_t)m * n * 4;
				dm.data.data = (uint8_t *)d;
				gr.d = &dm;
				resp.has_id = 1;
				resp.id = req->id;
				resp.body_case = MFMA__V1__RESPONSE__BODY_GEMM;
				resp.gemm = &gr;
				size_t rl = mfma__v1__response__get_packed_size(&resp);
				uint8_t *out = malloc(rl + 4);
				if (out && d) {
					frame_header_put(out, (uint32_t)rl);
					mfma__v1__response__pack(&resp, out + 4);
					if (send(fd, out, rl + 4, MSG_NOSIGNAL) < 0)
						perror("liar: send");
				}
				free(out);
				free(d);
			}
			if (req)
				mfma__v1__request__free_unpacked(req, NULL);
		}
		free(buf);
	}
	close(fd);
	return NULL;
}

/* A liar listening at dir/liar.sock for a client that makes `accepts`
 * connections. */
static void liar_start(struct env *e, struct liar *l, int accepts)
{
	snprintf(l->sock, sizeof(l->sock), "%s/liar.sock", e->dir);
	unlink(l->sock);
	l->accepts = accepts;
	l->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", l->sock);
	assert_int_equal(bind(l->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(l->lfd, 4), 0);
	assert_int_equal(pthread_create(&l->tid, NULL, liar_main, l), 0);
}

static void test_check_failure_exits_4(void **state)
{
	struct env *e = *state;
	struct liar l;
	char ep[160];
	liar_start(e, &l, 1);
	assert_int_equal(ctl(e, "random", "-o", path(e, "A.npy"), "--shape", "9x12", "--dtype",
			     "f32", "--seed", "1", NULL), 0);
	assert_int_equal(ctl(e, "random", "-o", path(e, "B.npy"), "--shape", "12x5", "--dtype",
			     "f32", "--seed", "2", NULL), 0);
	snprintf(ep, sizeof(ep), "unix:%s", l.sock);
	int rc = ctl(e, "-e", ep, "--json", "submit", "-a", path(e, "A.npy"), "-b",
		     path(e, "B.npy"), "--check", NULL);
	pthread_join(l.tid, NULL);
	close(l.lfd);
	assert_int_equal(rc, 4);
	expect_json(e->out);
	expect_in(e->out, "\"ok\": false");

	/* bench --check: its control connection, then one that sends the
	 * GEMM and gets the wrong D. */
	liar_start(e, &l, 2);
	rc = ctl(e, "-e", ep, "--json", "bench", "--check", "-n", "1", "--warmup", "0", "--m", "9",
		 "--k", "12", "--n", "5", "--dtype", "f32", NULL);
	pthread_join(l.tid, NULL);
	close(l.lfd);
	assert_int_equal(rc, 4);
	expect_json(e->out);
	expect_in(e->out, "\"answers\": 1");
	expect_in(e->out, "\"failed\": 1");
}

/* What the daemon says is made printable on a terminal: a declared
 * weight's file named with ESC [2J and BEL (its failure message, in
 * status, repeats the name) prints as '?' under a pseudo-terminal
 * (script(1)), and as it is into a pipe or a file.  It reached the
 * terminal as it was: a daemon could clear the screen, set the window's
 * title or hide what it printed. */
static void test_terminal_safe(void **state)
{
	struct env *e = *state;
	if (access("/usr/bin/script", X_OK) != 0) {
		print_message("no script(1) for a pseudo-terminal; skipped\n");
		skip();
	}
	assert_int_equal(harness_stop(&e->d), 0);
	e->have_daemon = false;
	char conf[256];
	snprintf(conf, sizeof(conf),
		 "weights = { declare = ( { name = \"w\"; file = \"%s/\033[2Jx\007.npy\"; } ); };",
		 e->dir);
	assert_int_equal(harness_start(&e->d, conf, NULL), 0);
	e->have_daemon = true;
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "%s -e %s status", getenv("MFMACTL_BIN"), e->d.endpoint);
	const char *argv[] = { "/usr/bin/script", "-qc", cmd, "/dev/null", NULL };
	harness_run(argv, e->out, OUT_MAX);
	expect_in(e->out, "/?[2Jx?.npy");
	assert_null(strchr(e->out, '\033'));
	assert_null(strchr(e->out, '\007'));
	ctl(e, "status", NULL);
	expect_in(e->out, "/\033[2Jx\007.npy");
}

/* ---- bad local input, and output that cannot be written ---- */

/* A file that is not .npy is refused from its first bytes: mfmactl read a
 * whole file before looking at its header, so that a 64 GiB file given
 * by mistake exited 5 ("out of memory reading 68719476736 bytes") where
 * the machine had not that much, and was read whole where it had. */
static void test_input_read_bounded(void **state)
{
	struct env *e = *state;
	const char *big = path(e, "big.img");
	int fd = open(big, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)64 << 30), 0);
	close(fd);
	assert_int_equal(ctl(e, "random", "-o", path(e, "B.npy"), "--shape", "4x4", "--dtype",
			     "f32", NULL), 0);
	assert_int_equal(ctl(e, "--json", "submit", "-a", big, "-b", path(e, "B.npy"), NULL), 2);
	expect_json(e->out);
	expect_in(e->out, "not a .npy file");
	/* A .npy header for 2x2 followed by 64 GiB: refused by its size. */
	assert_int_equal(ctl(e, "random", "-o", path(e, "s.npy"), "--shape", "2x2", "--dtype",
			     "f32", NULL), 0);
	assert_int_equal(truncate(path(e, "s.npy"), (off_t)64 << 30), 0);
	assert_int_equal(ctl(e, "--json", "load", "w", path(e, "s.npy"), NULL), 2);
	expect_json(e->out);
	expect_in(e->out, "needs 16 data bytes, the file has 6871947");
	unlink(big);
	unlink(path(e, "s.npy"));
}

/* A token file that cannot be read says why: a directory was "empty
 * file". */
static void test_token_file_error(void **state)
{
	struct env *e = *state;
	assert_int_equal(ctl(e, "--json", "--token-file", e->dir, "ping", NULL), 2);
	expect_json(e->out);
	expect_in(e->out, "Is a directory");
}

/* Standard output that cannot be written fails the command (5): `mfmactl
 * --json status > /dev/full` exited 0 with nothing written. */
static void test_stdout_write_error(void **state)
{
	struct env *e = *state;
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "%s -e %s --json status > /dev/full", getenv("MFMACTL_BIN"),
		 e->d.endpoint);
	const char *argv[] = { "/bin/sh", "-c", cmd, NULL };
	assert_int_equal(harness_run(argv, e->out, OUT_MAX), 5);
	snprintf(cmd, sizeof(cmd), "%s random -o %s --shape 2x2 --dtype f32 > /dev/full",
		 getenv("MFMACTL_BIN"), path(e, "r.npy"));
	assert_int_equal(harness_run(argv, e->out, OUT_MAX), 5);
}

/* On a terminal, a request that fails while it is being sent clears the
 * progress line before the error: the message was written after
 * "sending 8.26 MiB of 128 MiB (6%)", on the same line. */
static void test_progress_cleared_on_error(void **state)
{
	struct env *e = *state;
	if (access("/usr/bin/script", X_OK) != 0) {
		print_message("no script(1) for a pseudo-terminal; skipped\n");
		skip();
	}
	const char *big = path(e, "big.npy");
	assert_int_equal(ctl(e, "random", "-o", big, "--shape", "2048x2048", "--dtype", "f32", NULL),
			 0);
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "%s -e %s --timeout 1 submit -a %s -b %s",
		 getenv("MFMACTL_BIN"), e->d.endpoint, big, big);
	const char *argv[] = { "/usr/bin/script", "-qc", cmd, "/dev/null", NULL };
	harness_run(argv, e->out, OUT_MAX);
	expect_in(e->out, "sending ");
	expect_in(e->out, "\r\033[Kmfmactl: submit: ");
}

/* Ctrl-C during bench --resident unloads the weight it loaded: it was
 * left resident (mfmactl-bench-PID), holding its memory until unloaded
 * by hand.  mfmactl still ends by the signal. */
static void test_bench_interrupted_unloads(void **state)
{
	struct env *e = *state;
	const char *argv[] = { getenv("MFMACTL_BIN"), "-e", e->d.endpoint, "bench", "-n",
			       "100000000", "--resident", "--m", "64", "--k", "64", "--n", "8",
			       "--dtype", "f32", NULL };
	posix_spawnattr_t at;
	sigset_t def;
	sigemptyset(&def);
	sigaddset(&def, SIGINT);
	posix_spawnattr_init(&at);
	posix_spawnattr_setsigdefault(&at, &def);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF);
	pid_t pid;
	assert_int_equal(posix_spawn(&pid, argv[0], NULL, &at, (char *const *)argv, environ), 0);
	posix_spawnattr_destroy(&at);
	bool loaded = false;
	for (int i = 0; i < 200 && !loaded; i++) {
		usleep(50000);
		assert_int_equal(ctl(e, "--json", "weights", NULL), 0);
		loaded = strstr(e->out, "mfmactl-bench-") != NULL;
	}
	assert_true(loaded);
	usleep(200000); /* into the measured loop */
	assert_int_equal(kill(pid, SIGINT), 0);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGINT);
	assert_int_equal(ctl(e, "--json", "weights", NULL), 0);
	expect_in(e->out, "\"weights\": []");
}

int main(void)
{
	/* bench's spin_us is checked against --spin-us and the default. */
	unsetenv("MFMA_SPIN_US");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_help_and_usage, setup_no_daemon, teardown),
		cmocka_unit_test_setup_teardown(test_no_daemon, setup_no_daemon, teardown),
		cmocka_unit_test_setup_teardown(test_random, setup_no_daemon, teardown),
		cmocka_unit_test_setup_teardown(test_output_files, setup_no_daemon, teardown),
		cmocka_unit_test_setup_teardown(test_submit_every_dtype, setup, teardown),
		cmocka_unit_test_setup_teardown(test_submit_sparse_c_and_json, setup, teardown),
		cmocka_unit_test_setup_teardown(test_weights_commands, setup, teardown),
		cmocka_unit_test_setup_teardown(test_status_ping_bench, setup, teardown),
		cmocka_unit_test_setup_teardown(test_timeout_exits_3, setup, teardown),
		cmocka_unit_test_setup_teardown(test_terminal_safe, setup, teardown),
		cmocka_unit_test_setup_teardown(test_check_failure_exits_4, setup_no_daemon,
						teardown),
		cmocka_unit_test_setup_teardown(test_input_read_bounded, setup_no_daemon, teardown),
		cmocka_unit_test_setup_teardown(test_token_file_error, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stdout_write_error, setup, teardown),
		cmocka_unit_test_setup_teardown(test_progress_cleared_on_error, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bench_interrupted_unloads, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
