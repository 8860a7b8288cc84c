/* Configuration parsing: defaults, every group, and errors with file:line. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend.h"
#include "config.h"
#include "log.h"
#include "mfma.pb-c.h"
#include "mfma_dtype.h"

static int parse(struct mfmad_config *c, const char *text, char *err, size_t errlen)
{
	config_defaults(c);
	return config_load_string(c, text, "test.conf", err, errlen);
}

static void test_defaults_and_values(void **state)
{
	(void)state;
	struct mfmad_config c;
	char err[512] = "";
	assert_int_equal(parse(&c, "", err, sizeof(err)), 0);
	assert_int_equal(c.max_inflight_per_conn, 64);
	assert_int_equal(c.max_connections_per_user, 64);
	assert_int_equal(c.max_connections_per_address, 0);
	assert_int_equal(c.cpu, BACKEND_AUTO);
	assert_int_equal(parse(&c, "limits = { max_connections_per_user = 0; };", err, sizeof(err)), 0);
	assert_int_equal(c.max_connections_per_user, 0);
	assert_int_equal(parse(&c, "limits = { max_connections_per_user = -1; };", err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(parse(&c, "limits = { max_connections_per_address = 8; };", err, sizeof(err)), 0);
	assert_int_equal(c.max_connections_per_address, 8);
	assert_int_equal(parse(&c, "limits = { max_connections_per_address = 1048577; };", err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "max_connections_per_address"));
	assert_int_equal(parse(&c,
			       "log_level = \"debug\";\n"
			       "listen = { unix = \"/tmp/s.sock\"; unix_mode = \"0600\"; tcp = true; "
			       "tcp_port = 9000; };\n"
			       "limits = { max_frame_mb = 8; max_inflight = 3; default_timeout_ms = 250; };\n"
			       "weights = { budget_mb = 100; };\n"
			       "cpu = { enabled = true; threads = 2; devices = 2; };\n"
			       "hip = { enabled = false; };\n"
			       "cuda = { enabled = \"auto\"; };\n"
			       "metrics = { enabled = true; port = 9999; };\n",
			       err, sizeof(err)),
			 0);
	assert_int_equal(c.log_level, LOG_LVL_DEBUG);
	assert_string_equal(c.unix_path, "/tmp/s.sock");
	assert_int_equal(c.unix_mode, 0600);
	assert_true(c.tcp_enabled);
	assert_int_equal(c.tcp_port, 9000);
	assert_int_equal(c.max_frame_bytes, 8u << 20);
	assert_int_equal(c.max_inflight, 3);
	assert_int_equal(c.default_timeout_ms, 250);
	assert_int_equal(c.weight_budget_bytes, 100ull << 20);
	assert_int_equal(c.cpu, BACKEND_ON);
	assert_int_equal(c.cpu_threads, 2);
	assert_int_equal(c.cpu_devices, 2);
	assert_int_equal(c.hip, BACKEND_OFF);
	assert_int_equal(c.cuda, BACKEND_AUTO);
	assert_true(c.metrics_enabled);
	assert_int_equal(c.metrics_port, 9999);
}

struct bad_case {
	const char *text;
	const char *want; /* substring of the error */
};

static void test_errors_name_line_and_reason(void **state)
{
	(void)state;
	static const struct bad_case cases[] = {
		{ "log_level = \"loud\";", "test.conf:1: log_level = \"loud\" is not one of" },
		{ "\n\nfoo = 1;", "test.conf:3: unknown setting 'foo'" },
		{ "limits = {\n  max_frobs = 1;\n};", "test.conf:2: unknown setting 'limits.max_frobs'" },
		{ "limits = { max_frame_mb = 0; };", "limits.max_frame_mb = 0 is out of range 1..2047" },
		{ "limits = { max_inflight = \"many\"; };", "limits.max_inflight must be an integer" },
		{ "listen = { tcp = 1; };", "listen.tcp must be true or false" },
		{ "listen = { tcp_port = 70000; };", "listen.tcp_port = 70000 is out of range" },
		{ "listen = { unix_mode = \"rw\"; };", "is not an octal mode" },
		{ "cpu = { enabled = \"sometimes\"; };", "cpu.enabled must be true, false or \"auto\"" },
		{ "cpu = 3;", "cpu must be a group" },
		{ "limits = { max_inflight = 3 ", "test.conf:1: syntax error" },
		{ "weights = { declare = { name = \"a\"; }; };", "weights.declare must be a list" },
		{ "weights = { declare = ( 3 ); };", "weights.declare[0] must be a group" },
		{ "weights = { declare = ( { file = \"/w.npy\"; } ); };",
		  "weights.declare[0] needs a name" },
		{ "weights = { declare = ( { name = \"a\"; } ); };", "weights.declare[0] needs a file" },
		{ "weights = { declare = ( { name = \"a b\"; file = \"/w.npy\"; } ); };",
		  "weights.declare[0].name: weight name 'a b' has character 0x20" },
		{ "weights = { declare = ( { name = \"a\"; file = \"w.npy\"; } ); };",
		  "weights.declare[0].file = \"w.npy\" must be an absolute path" },
		{ "weights = { declare = ( { name = \"a\"; file = \"/w\"; sparse = \"half\"; } ); };",
		  "weights.declare[0].sparse = \"half\": expected none, validate, prune or packed" },
		{ "weights = { declare = ( { name = \"a\"; file = \"/w\"; dtype = \"i32\"; } ); };",
		  "weights.declare[0].dtype = \"i32\": expected f32, f16, bf16 or i8" },
		{ "weights = { declare = ( { name = \"a\"; file = \"/w\"; device = 99; } ); };",
		  "weights.declare[0].device = 99 is out of range -1..31" },
		{ "weights = { declare = ( { name = \"a\"; file = \"/w\"; prune = true; } ); };",
		  "weights.declare[0].prune is not a setting of a declared weight" },
		{ "weights = { declare = ( { name = \"a\"; file = \"/w\"; },\n"
		  "                         { name = \"a\"; file = \"/v\"; } ); };",
		  "test.conf:2: weights.declare[1].name = \"a\" is declared twice (also weights.declare[0])" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct mfmad_config c;
		char err[512] = "";
		assert_int_equal(parse(&c, cases[i].text, err, sizeof(err)), -EINVAL);
		if (!strstr(err, cases[i].want))
			fail_msg("case %zu: error \"%s\" lacks \"%s\"", i, err, cases[i].want);
	}
}

static void test_declare(void **state)
{
	(void)state;
	struct mfmad_config c;
	char err[512] = "";
	assert_int_equal(parse(&c, "", err, sizeof(err)), 0);
	assert_int_equal(c.ndeclared, 0);
	assert_int_equal(parse(&c,
			       "weights = { declare = (\n"
			       "  { name = \"ffn.up\"; file = \"/var/w/up.npy\"; sparse = \"prune\";\n"
			       "    dtype = \"f16\"; device = 0; },\n"
			       "  { name = \"ffn.down\"; file = \"/var/w/down.npy\"; sparse = \"packed\"; },\n"
			       "  { name = \"emb\"; file = \"/var/w/emb.npy\"; }\n"
			       "); };\n",
			       err, sizeof(err)),
			 0);
	assert_int_equal(c.ndeclared, 3);
	assert_string_equal(c.declared[0].name, "ffn.up");
	assert_string_equal(c.declared[0].file, "/var/w/up.npy");
	assert_int_equal(c.declared[0].sparsity, MFMA__V1__SPARSITY__PRUNE_24);
	assert_int_equal(c.declared[0].dtype, MFMA_DT_F16);
	assert_int_equal(c.declared[0].device, 0);
	assert_int_equal(c.declared[1].sparsity, MFMA__V1__SPARSITY__VALIDATE_24);
	assert_int_equal(c.declared[1].device, -1);
	assert_int_equal(c.declared[2].sparsity, MFMA__V1__SPARSITY__DENSE);
	assert_int_equal(c.declared[2].dtype, MFMA_DT_NONE);

	/* The list is bounded, and the refusal names the limit. */
	char *text = malloc(16384);
	assert_non_null(text);
	size_t off = (size_t)snprintf(text, 16384, "weights = { declare = (");
	for (int i = 0; i <= CONFIG_DECLARE_MAX; i++)
		off += (size_t)snprintf(text + off, 16384 - off, "%s{ name = \"w%d\"; file = \"/w\"; }",
					i ? ", " : "", i);
	snprintf(text + off, 16384 - off, "); };");
	assert_int_equal(parse(&c, text, err, sizeof(err)), -EINVAL);
	char want[64];
	snprintf(want, sizeof(want), "has %d entries; the limit is %d", CONFIG_DECLARE_MAX + 1,
		 CONFIG_DECLARE_MAX);
	assert_non_null(strstr(err, want));
	free(text);
}

static void test_missing_file(void **state)
{
	(void)state;
	struct mfmad_config c;
	char err[512];
	config_defaults(&c);
	assert_int_equal(config_load_file(&c, "/nonexistent/mfmad.conf", err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "/nonexistent/mfmad.conf"));
	assert_non_null(strstr(err, "No such file or directory"));
}

/* The shipped, documented file parses and equals the built-in defaults. */
static void test_shipped_file_is_the_defaults(void **state)
{
	(void)state;
	struct mfmad_config c, def;
	char err[512] = "";
	config_defaults(&c);
	config_defaults(&def);
	assert_int_equal(config_load_file(&c, SHIPPED_CONF, err, sizeof(err)), 0);
	assert_memory_equal(&c, &def, sizeof(c));
}

static void test_restart_only(void **state)
{
	(void)state;
	struct mfmad_config a, b;
	char buf[256];
	config_defaults(&a);
	b = a;
	b.max_inflight = 7;
	b.log_level = LOG_LVL_DEBUG;
	assert_int_equal(config_restart_only_changes(&a, &b, buf, sizeof(buf)), 0);
	snprintf(b.unix_path, sizeof(b.unix_path), "/tmp/other.sock");
	b.cpu_threads = 1;
	assert_int_equal(config_restart_only_changes(&a, &b, buf, sizeof(buf)), 2);
	assert_non_null(strstr(buf, "listen.unix"));
	assert_non_null(strstr(buf, "cpu.*"));
}

/* cuda.warmup: on by default, a boolean, live on SIGHUP (no restart). */
static void test_cuda_warmup(void **state)
{
	(void)state;
	struct mfmad_config c, d;
	char err[512], buf[256];
	config_defaults(&c);
	assert_true(c.cuda_warmup);
	assert_int_equal(parse(&c, "cuda = { warmup = false; };\n", err, sizeof(err)), 0);
	assert_false(c.cuda_warmup);
	config_defaults(&d);
	assert_int_equal(config_restart_only_changes(&d, &c, buf, sizeof(buf)), 0);
	assert_int_equal(parse(&c, "\ncuda = { warmup = 1; };\n", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "test.conf:2: cuda.warmup must be true or false"));
	assert_int_equal(parse(&c, "cuda = { warm = true; };\n", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "unknown setting 'cuda.warm'"));
}

/* limits.pinned_reads_mb: 64 MiB by default, 0 turns it off, at most
 * 4096; the arena is mapped at start, so a change takes a restart. */
static void test_pinned_reads(void **state)
{
	(void)state;
	struct mfmad_config c, d;
	char err[512], buf[256];
	config_defaults(&c);
	assert_int_equal(c.pinned_read_bytes, 64ull << 20);
	assert_int_equal(parse(&c, "limits = { pinned_reads_mb = 0; };\n", err, sizeof(err)), 0);
	assert_int_equal(c.pinned_read_bytes, 0);
	assert_int_equal(parse(&c, "limits = { pinned_reads_mb = 4096; };\n", err, sizeof(err)), 0);
	assert_int_equal(c.pinned_read_bytes, 4096ull << 20);
	config_defaults(&d);
	assert_int_equal(config_restart_only_changes(&d, &c, buf, sizeof(buf)), 1);
	assert_string_equal(buf, "limits.pinned_reads_mb");
	assert_int_equal(parse(&c, "\nlimits = { pinned_reads_mb = 4097; };\n", err, sizeof(err)),
			 -EINVAL);
	assert_non_null(
		strstr(err, "test.conf:2: limits.pinned_reads_mb = 4097 is out of range 0..4096"));
	assert_int_equal(parse(&c, "limits = { pinned_reads_mb = \"1\"; };\n", err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "limits.pinned_reads_mb must be an integer"));
}

/* batching.overlap: on by default, a boolean, live on SIGHUP. */
static void test_batch_overlap(void **state)
{
	(void)state;
	struct mfmad_config c, d;
	char err[512], buf[256];
	config_defaults(&c);
	assert_true(c.batch_overlap);
	assert_int_equal(parse(&c, "batching = { overlap = false; };\n", err, sizeof(err)), 0);
	assert_false(c.batch_overlap);
	config_defaults(&d);
	assert_int_equal(config_restart_only_changes(&d, &c, buf, sizeof(buf)), 0);
	assert_int_equal(parse(&c, "batching = { overlap = 1; };\n", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "batching.overlap must be true or false"));
}

/* A boolean read at start (section.key, the field at offset field of
 * struct mfmad_config): its default def, the other value parsed, the
 * change named as one that takes a restart, a non-boolean refused with the
 * key named. */
static void check_restart_bool(const char *section, const char *key, bool def, size_t field)
{
	struct mfmad_config c, d;
	char text[128], err[512], buf[256], name[64], why[96];
	snprintf(name, sizeof(name), "%s.%s", section, key);
	const bool *v = (const bool *)((const char *)&c + field);
	config_defaults(&c);
	assert_true(*v == def);
	snprintf(text, sizeof(text), "%s = { %s = %s; };\n", section, key, def ? "false" : "true");
	assert_int_equal(parse(&c, text, err, sizeof(err)), 0);
	assert_true(*v == !def);
	config_defaults(&d);
	assert_int_equal(config_restart_only_changes(&d, &c, buf, sizeof(buf)), 1);
	assert_string_equal(buf, name);
	snprintf(text, sizeof(text), "%s = { %s = \"yes\"; };\n", section, key);
	assert_int_equal(parse(&c, text, err, sizeof(err)), -EINVAL);
	snprintf(why, sizeof(why), "%s must be true or false", name);
	assert_non_null(strstr(err, why));
}

/* cuda.copy_stream: off by default, a boolean, a restart. */
static void test_cuda_copy_stream(void **state)
{
	(void)state;
	check_restart_bool("cuda", "copy_stream", false,
			   offsetof(struct mfmad_config, cuda_copy_stream));
}

/* cuda.dma_parts_kb: KiB, 0 (none, the default) up to 1 TiB, a restart. */
static void test_cuda_dma_parts_kb(void **state)
{
	(void)state;
	struct mfmad_config c, d;
	char err[512], buf[256];
	config_defaults(&c);
	assert_int_equal(c.cuda_dma_part_bytes, 0);
	assert_int_equal(parse(&c, "cuda = { dma_parts_kb = 64; };\n", err, sizeof(err)), 0);
	assert_int_equal(c.cuda_dma_part_bytes, 64 << 10);
	config_defaults(&d);
	assert_int_equal(config_restart_only_changes(&d, &c, buf, sizeof(buf)), 1);
	assert_string_equal(buf, "cuda.dma_parts_kb");
	assert_int_equal(parse(&c, "cuda = { dma_parts_kb = 1073741824; };\n", err, sizeof(err)), 0);
	assert_int_equal(c.cuda_dma_part_bytes, 1ull << 40);
	assert_int_equal(parse(&c, "cuda = { dma_parts_kb = -1; };\n", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "cuda.dma_parts_kb"));
	assert_int_equal(parse(&c, "cuda = { dma_parts_kb = true; };\n", err, sizeof(err)), -EINVAL);
}

/* cuda.out_stream: on by default, a boolean, a restart. */
static void test_cuda_out_stream(void **state)
{
	(void)state;
	check_restart_bool("cuda", "out_stream", true, offsetof(struct mfmad_config, cuda_out_stream));
}

/* cuda.region_copies: on by default, a boolean, a restart. */
static void test_cuda_region_copies(void **state)
{
	(void)state;
	check_restart_bool("cuda", "region_copies", true,
			   offsetof(struct mfmad_config, cuda_region_copies));
}

/* cuda.gate: on by default, a boolean, a restart. */
static void test_cuda_gate(void **state)
{
	(void)state;
	check_restart_bool("cuda", "gate", true, offsetof(struct mfmad_config, cuda_gate));
}

/* cuda.tile_out: on by default, a boolean, a restart. */
static void test_cuda_tile_out(void **state)
{
	(void)state;
	check_restart_bool("cuda", "tile_out", true, offsetof(struct mfmad_config, cuda_tile_out));
}

/* limits.post_threads: 4 by default, 1..16, a restart. */
static void test_post_threads(void **state)
{
	(void)state;
	struct mfmad_config c, d;
	char err[512], buf[256];
	config_defaults(&c);
	assert_int_equal(c.post_threads, 4);
	assert_int_equal(parse(&c, "limits = { post_threads = 16; };\n", err, sizeof(err)), 0);
	assert_int_equal(c.post_threads, 16);
	config_defaults(&d);
	assert_int_equal(config_restart_only_changes(&d, &c, buf, sizeof(buf)), 1);
	assert_string_equal(buf, "limits.post_threads");
	assert_int_equal(parse(&c, "limits = { post_threads = 0; };\n", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "limits.post_threads = 0 is out of range 1..16"));
	assert_int_equal(parse(&c, "limits = { post_threads = 17; };\n", err, sizeof(err)), -EINVAL);
}

/* cuda.pinned_answers_mb: 64 MiB per device by default, 0 turns it off, at
 * most 4096; read when the devices open, so a change takes a restart. */
static void test_cuda_pinned_answers(void **state)
{
	(void)state;
	struct mfmad_config c, d;
	char err[512], buf[256];
	config_defaults(&c);
	assert_int_equal(c.cuda_pinned_answer_bytes, 64ull << 20);
	assert_int_equal(parse(&c, "cuda = { pinned_answers_mb = 0; };\n", err, sizeof(err)), 0);
	assert_int_equal(c.cuda_pinned_answer_bytes, 0);
	assert_int_equal(parse(&c, "cuda = { pinned_answers_mb = 4096; };\n", err, sizeof(err)), 0);
	assert_int_equal(c.cuda_pinned_answer_bytes, 4096ull << 20);
	config_defaults(&d);
	assert_int_equal(config_restart_only_changes(&d, &c, buf, sizeof(buf)), 1);
	assert_string_equal(buf, "cuda.pinned_answers_mb");
	assert_int_equal(parse(&c, "\ncuda = { pinned_answers_mb = 4097; };\n", err, sizeof(err)),
			 -EINVAL);
	assert_non_null(
		strstr(err, "test.conf:2: cuda.pinned_answers_mb = 4097 is out of range 0..4096"));
	assert_int_equal(parse(&c, "cuda = { pinned_answers_mb = -1; };\n", err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "cuda.pinned_answers_mb = -1 is out of range"));
	assert_int_equal(parse(&c, "cuda = { pinned_answers_mb = \"64\"; };\n", err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "cuda.pinned_answers_mb must be an integer"));
}

/* limits.worker_poll_us: off by default, at most 10 ms. */
static void test_worker_poll(void **state)
{
	(void)state;
	struct mfmad_config c;
	char err[512];
	config_defaults(&c);
	assert_int_equal(c.worker_poll_us, 0);
	assert_int_equal(parse(&c, "limits = { worker_poll_us = 250; };\n", err, sizeof(err)), 0);
	assert_int_equal(c.worker_poll_us, 250);
	assert_true(parse(&c, "limits = { worker_poll_us = 10001; };\n", err, sizeof(err)) < 0);
	assert_non_null(strstr(err, "worker_poll_us"));
}

/* limits.send_buffer_kb: 1 MiB by default, 0 for the system's, at most
 * 1 GiB. */
static void test_send_buffer(void **state)
{
	(void)state;
	struct mfmad_config c;
	char err[512];
	config_defaults(&c);
	assert_int_equal(c.send_buffer_bytes, 1u << 20);
	assert_int_equal(parse(&c, "limits = { send_buffer_kb = 0; };\n", err, sizeof(err)), 0);
	assert_int_equal(c.send_buffer_bytes, 0);
	assert_int_equal(parse(&c, "limits = { send_buffer_kb = 4096; };\n", err, sizeof(err)), 0);
	assert_int_equal(c.send_buffer_bytes, 4096u * 1024);
	assert_true(parse(&c, "limits = { send_buffer_kb = 1048577; };\n", err, sizeof(err)) < 0);
	assert_non_null(strstr(err, "send_buffer_kb"));
}

/* limits.loop_poll_us: off by default, 0 to 10 ms, the refusal naming the
 * key and the value. */
static void test_loop_poll(void **state)
{
	(void)state;
	struct mfmad_config c;
	char err[512];
	config_defaults(&c);
	assert_int_equal(c.loop_poll_us, 0);
	assert_int_equal(parse(&c, "limits = { loop_poll_us = 200; };\n", err, sizeof(err)), 0);
	assert_int_equal(c.loop_poll_us, 200);
	assert_int_equal(parse(&c, "limits = { loop_poll_us = 10000; };\n", err, sizeof(err)), 0);
	assert_int_equal(c.loop_poll_us, 10000);
	assert_int_equal(parse(&c, "limits = { loop_poll_us = 0; };\n", err, sizeof(err)), 0);
	assert_int_equal(c.loop_poll_us, 0);
	assert_true(parse(&c, "limits = { loop_poll_us = 10001; };\n", err, sizeof(err)) < 0);
	assert_non_null(strstr(err, "loop_poll_us"));
	assert_non_null(strstr(err, "10001"));
	assert_true(parse(&c, "limits = { loop_poll_us = -1; };\n", err, sizeof(err)) < 0);
	assert_non_null(strstr(err, "loop_poll_us"));
	assert_true(parse(&c, "limits = { loop_poll_us = \"fast\"; };\n", err, sizeof(err)) < 0);
	assert_non_null(strstr(err, "loop_poll_us"));
	/* The two polls are separate settings. */
	config_defaults(&c);
	assert_int_equal(parse(&c, "limits = { loop_poll_us = 300; worker_poll_us = 100; };\n",
			       err, sizeof(err)), 0);
	assert_int_equal(c.loop_poll_us, 300);
	assert_int_equal(c.worker_poll_us, 100);
}

/* The largest request frame: limits.max_frame_mb, or what the buffer and
 * memory caps leave for a frame and its length, naming the key. */
static void test_read_frame_limit(void **state)
{
	(void)state;
	struct mfmad_config c;
	char err[512];
	const char *key = NULL;
	config_defaults(&c);
	assert_int_equal(config_read_frame_limit(&c, &key), 256ull << 20);
	assert_string_equal(key, "limits.max_frame_mb");
	assert_int_equal(parse(&c, "limits = { max_buffered_mb = 1; };\n", err, sizeof(err)), 0);
	assert_int_equal(config_read_frame_limit(&c, &key), (1ull << 20) - 4);
	assert_string_equal(key, "limits.max_buffered_mb");
	assert_int_equal(parse(&c, "limits = { max_memory_mb = 16; };\n", err, sizeof(err)), 0);
	assert_int_equal(config_read_frame_limit(&c, &key), (16ull << 20) - 4);
	assert_string_equal(key, "limits.max_memory_mb");
	assert_int_equal(parse(&c, "limits = { max_frame_mb = 8; max_memory_mb = 16; };\n", err,
			       sizeof(err)), 0);
	assert_int_equal(config_read_frame_limit(&c, NULL), 8ull << 20);
}

/* limits.reader_threads: "auto" by default, which is none below 8 cores, else
 * a quarter of them, at most 4; a number 0 to 64 is taken as it is, other
 * values refused by name; restart-only.  reader_min_kb and
 * reader_when_busy: bounds and types, live on SIGHUP. */
static void test_readers(void **state)
{
	(void)state;
	struct mfmad_config c, d;
	char err[512], buf[256];
	config_defaults(&c);
	assert_int_equal(c.reader_threads, -1);
	assert_int_equal(config_reader_threads(&c, 16), 4);
	assert_int_equal(config_reader_threads(&c, 2), 0);
	assert_int_equal(c.reader_min_bytes, 8 << 10);
	assert_true(c.reader_when_busy);
	assert_int_equal(parse(&c, "limits = { reader_threads = \"auto\"; };\n", err, sizeof(err)), 0);
	assert_int_equal(config_reader_threads(&c, 2), 0);
	assert_int_equal(config_reader_threads(&c, 7), 0);
	assert_int_equal(config_reader_threads(&c, 8), 2);
	assert_int_equal(config_reader_threads(&c, 12), 3);
	assert_int_equal(config_reader_threads(&c, 16), 4);
	assert_int_equal(config_reader_threads(&c, 192), 4);
	assert_int_equal(parse(&c, "limits = { reader_threads = \"auto\"; };\n", err, sizeof(err)), 0);
	assert_int_equal(c.reader_threads, -1);
	assert_int_equal(parse(&c, "limits = { reader_threads = 0; };\n", err, sizeof(err)), 0);
	assert_int_equal(config_reader_threads(&c, 64), 0);
	assert_int_equal(parse(&c, "limits = { reader_threads = 2; reader_min_kb = 1; "
				   "reader_when_busy = false; };\n", err, sizeof(err)), 0);
	assert_int_equal(config_reader_threads(&c, 2), 2);
	assert_int_equal(c.reader_min_bytes, 1024);
	assert_false(c.reader_when_busy);
	assert_int_equal(parse(&c, "limits = { reader_threads = 64; reader_min_kb = 1048576; };\n",
			       err, sizeof(err)), 0);
	assert_int_equal(config_reader_threads(&c, 2), 64);
	assert_int_equal(c.reader_min_bytes, 1ull << 30);
	static const char *const bad[] = {
		"limits = { reader_threads = 65; };\n",
		"limits = { reader_threads = -1; };\n",
		"limits = { reader_threads = \"many\"; };\n",
		"limits = { reader_threads = true; };\n",
		"limits = { reader_min_kb = 0; };\n",
		"limits = { reader_min_kb = 1048577; };\n",
		"limits = { reader_min_kb = \"64\"; };\n",
		"limits = { reader_when_busy = 1; };\n",
	};
	static const char *const key[] = { "reader_threads", "reader_threads", "reader_threads",
					   "reader_threads", "reader_min_kb", "reader_min_kb",
					   "reader_min_kb", "reader_when_busy" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		assert_true(parse(&c, bad[i], err, sizeof(err)) < 0);
		if (!strstr(err, key[i]))
			fail_msg("%s: the error does not name %s: %s", bad[i], key[i], err);
		assert_non_null(strstr(err, "limits."));
	}
	assert_non_null(strstr(err, "reader_when_busy"));
	parse(&c, "limits = { reader_threads = \"many\"; };\n", err, sizeof(err));
	assert_non_null(strstr(err, "\"many\""));
	/* The pool's size takes a restart; the other two do not. */
	config_defaults(&c);
	d = c;
	d.reader_min_bytes = 4096;
	d.reader_when_busy = false;
	assert_int_equal(config_restart_only_changes(&c, &d, buf, sizeof(buf)), 0);
	d.reader_threads = 4;
	assert_int_equal(config_restart_only_changes(&c, &d, buf, sizeof(buf)), 1);
	assert_non_null(strstr(buf, "limits.reader_threads"));
}

/* cuda.providers / hip.providers: names checked against the family's
 * list, the refusal listing the known ones; a pin that is also excluded is
 * refused; a change takes a restart. */
static void test_providers(void **state)
{
	(void)state;
	struct mfmad_config c, def;
	char err[512] = "";
	assert_int_equal(parse(&c, "", err, sizeof(err)), 0);
	assert_int_equal(c.cuda_providers.prefer, -1);
	assert_int_equal(c.cuda_providers.exclude, 0);
	assert_int_equal(c.hip_providers.prefer, -1);
	assert_int_equal(parse(&c,
			       "cuda = { providers = { exclude = [\"cusparselt\", \"cublaslt\"]; "
			       "prefer = \"wgmma\"; }; };\n"
			       "hip = { providers = { prefer = \"ours\"; }; };\n",
			       err, sizeof(err)),
			 0);
	assert_int_equal(c.cuda_providers.exclude,
			 (1u << providers_index(PROVIDERS_CUDA, "cusparselt")) |
				 (1u << providers_index(PROVIDERS_CUDA, "cublaslt")));
	assert_int_equal(c.cuda_providers.prefer, providers_index(PROVIDERS_CUDA, "wgmma"));
	assert_int_equal(c.hip_providers.prefer, 0);
	assert_int_equal(c.hip_providers.exclude, 0);
	/* No pin and nothing excluded, as --check-config prints it. */
	assert_int_equal(parse(&c, "cuda = { providers = { exclude = []; prefer = \"\"; }; };\n",
			       err, sizeof(err)),
			 0);
	assert_int_equal(c.cuda_providers.prefer, -1);
	assert_int_equal(c.cuda_providers.exclude, 0);

	assert_int_equal(parse(&c, "cuda = { providers = { exclude = [\"cusparse\"]; }; };\n", err,
			       sizeof(err)),
			 -EINVAL);
	assert_string_equal(err, "test.conf:1: cuda.providers.exclude[0] = \"cusparse\" is not a "
				 "cuda provider (known: wgmma, ours, cublaslt, cusparselt)");
	assert_int_equal(parse(&c, "\nhip = { providers = { prefer = \"hipblaslt\"; }; };\n", err,
			       sizeof(err)),
			 -EINVAL);
	assert_string_equal(err, "test.conf:2: hip.providers.prefer = \"hipblaslt\" is not a hip "
				 "provider (known: ours)");
	assert_int_equal(parse(&c, "cuda = { providers = { exclude = [\"ours\"]; prefer = \"ours\"; "
				   "}; };\n",
			       err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "cuda.providers.prefer = \"ours\" is also in "
				    "cuda.providers.exclude"));
	assert_int_equal(parse(&c, "cuda = { providers = { pin = \"ours\"; }; };\n", err,
			       sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "unknown setting 'cuda.providers.pin'"));
	assert_int_equal(parse(&c, "cuda = { providers = { exclude = \"ours\"; }; };\n", err,
			       sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "must be a list of names"));
	assert_int_equal(parse(&c, "cuda = { providers = { exclude = [1]; }; };\n", err,
			       sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "cuda.providers.exclude[0] must be a string"));
	assert_int_equal(parse(&c, "cuda = { providers = \"ours\"; };\n", err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "cuda.providers must be a group"));

	/* The backends' checks of their tables, and the status strings. */
	assert_int_equal(providers_check(PROVIDERS_CUDA, 0, 4, "wgmma", err, sizeof(err)), 0);
	assert_int_equal(providers_check(PROVIDERS_CUDA, 1, 4, "wgmma", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "cuda: provider 1 is wgmma in the backend's table but ours in "
				 "providers.c (a build error: keep the two lists alike)");
	assert_int_equal(providers_check(PROVIDERS_HIP, 0, 2, "ours", err, sizeof(err)), -EINVAL);
	struct provider_policy pol = { .exclude = 1u << 2, .prefer = 0 };
	char desc[128] = "";
	for (size_t i = 0; i < 4; i++)
		providers_describe(&pol, PROVIDERS_CUDA, i, desc, sizeof(desc));
	assert_string_equal(desc, "wgmma:pinned,ours,cublaslt:excluded,cusparselt");
	/* A list that is full keeps the names that fit, each whole. */
	char small[24] = "";
	for (size_t i = 0; i < 4; i++)
		providers_describe(&pol, PROVIDERS_CUDA, i, small, sizeof(small));
	assert_string_equal(small, "wgmma:pinned,ours");
	assert_false(backend_list_add(small, sizeof(small), "abcdef"));
	assert_true(backend_list_add(small, sizeof(small), "abcde"));
	assert_string_equal(small, "wgmma:pinned,ours,abcde");

	char buf[256];
	config_defaults(&def);
	assert_int_equal(parse(&c, "cuda = { providers = { exclude = [\"cusparselt\"]; }; };\n",
			       err, sizeof(err)),
			 0);
	assert_int_equal(config_restart_only_changes(&def, &c, buf, sizeof(buf)), 1);
	assert_string_equal(buf, "cuda.providers");
}

/* The state directory: weights.state_dir, else the first of
 * $STATE_DIRECTORY's paths. */
static void test_state_dir(void **state)
{
	(void)state;
	struct mfmad_config c;
	char buf[256];
	config_defaults(&c);
	unsetenv("STATE_DIRECTORY");
	assert_null(config_state_dir(&c, buf, sizeof(buf)));
	setenv("STATE_DIRECTORY", "/var/lib/mfmad:/var/lib/other", 1);
	assert_string_equal(config_state_dir(&c, buf, sizeof(buf)), "/var/lib/mfmad");
	snprintf(c.weights_state_dir, sizeof(c.weights_state_dir), "/srv/state");
	assert_string_equal(config_state_dir(&c, buf, sizeof(buf)), "/srv/state");
	unsetenv("STATE_DIRECTORY");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults_and_values),
		cmocka_unit_test(test_errors_name_line_and_reason),
		cmocka_unit_test(test_declare),
		cmocka_unit_test(test_missing_file),
		cmocka_unit_test(test_shipped_file_is_the_defaults),
		cmocka_unit_test(test_restart_only),
		cmocka_unit_test(test_worker_poll),
		cmocka_unit_test(test_send_buffer),
		cmocka_unit_test(test_cuda_warmup),
		cmocka_unit_test(test_cuda_pinned_answers),
		cmocka_unit_test(test_pinned_reads),
		cmocka_unit_test(test_post_threads),
		cmocka_unit_test(test_batch_overlap),
		cmocka_unit_test(test_cuda_copy_stream),
		cmocka_unit_test(test_cuda_region_copies),
		cmocka_unit_test(test_cuda_out_stream),
		cmocka_unit_test(test_cuda_gate),
		cmocka_unit_test(test_cuda_tile_out),
		cmocka_unit_test(test_cuda_dma_parts_kb),
		cmocka_unit_test(test_loop_poll),
		cmocka_unit_test(test_readers),
		cmocka_unit_test(test_read_frame_limit),
		cmocka_unit_test(test_providers),
		cmocka_unit_test(test_state_dir),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
