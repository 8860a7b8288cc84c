/* What one client can make the daemon hold, bounded (found by review):
 * each case makes the real daemon hold a resource the way a hostile
 * client would and checks the bound, measured from /proc (memory,
 * descriptors) or the daemon's log. */
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/mman.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "frame.h"
#include "harness.h"
#include "mfma.h"
#include "mfma.pb-c.h"
#include "rawwire.h"

/* Under AddressSanitizer or ThreadSanitizer RSS says little (freed blocks
 * wait in a quarantine, shadow memory grows with the heap): the RSS bounds
 * are printed but only checked in the normal build, as test_hostile does. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RSS_CHECK(cond) ((void)(cond))
#else
#define RSS_CHECK(cond) assert_true(cond)
#endif

/* A line of /proc/PID/status ("VmHWM", "VmRSS") in MiB, or -1. */
static long status_mib(pid_t pid, const char *key)
{
	long kb = harness_proc_status(pid, key);
	return kb < 0 ? -1 : kb / 1024;
}

/* The answer to frame (len bytes, header included) on a fresh
 * connection. */
static Mfma__V1__Response *roundtrip(const struct mfmad_proc *d, const uint8_t *frame, size_t len)
{
	int fd = harness_connect_raw(d);
	assert_true(fd >= 0);
	assert_int_equal(harness_write_all(fd, frame, len), 0);
	Mfma__V1__Response *r = rw_read(fd, 30000);
	close(fd);
	return r;
}

/* ---- decoding ---- */

/* A frame of id 7 and then `fields` unknown fields of two bytes each
 * (field 11, a varint 0): what protobuf-c keeps of each (a record, a
 * copy of its bytes, the scanner's slot) is some 50 times its two bytes. */
static uint8_t *unknown_fields_frame(size_t fields, size_t *len)
{
	size_t body = 2 + 2 * fields;
	uint8_t *f = malloc(FRAME_HEADER_SIZE + body);
	assert_non_null(f);
	frame_header_put(f, (uint32_t)body);
	uint8_t *p = f + FRAME_HEADER_SIZE;
	*p++ = 1 << 3; /* id */
	*p++ = 7;
	for (size_t i = 0; i < fields; i++) {
		*p++ = 11 << 3;
		*p++ = 0;
	}
	*len = FRAME_HEADER_SIZE + body;
	return f;
}

/* A 16 MiB frame of unknown fields, under limits.max_memory_mb = 128: its
 * decode took some 750 MiB that no limit counted (a 256 MiB frame, the
 * default max_frame_mb, some 12 GiB).  It is now refused before it is
 * decoded, naming the bound, and a frame with a few unknown fields is
 * still told which field it did not know. */
static void test_decode_fields(void **state)
{
	(void)state;
	struct mfmad_proc d;
	assert_int_equal(harness_start(&d, "limits = { max_memory_mb = 128; };", NULL), 0);
	long hwm0 = status_mib(d.pid, "VmHWM");
	size_t len;
	uint8_t *f = unknown_fields_frame((16u << 20) / 2, &len);
	Mfma__V1__Response *r = roundtrip(&d, f, len);
	long hwm = status_mib(d.pid, "VmHWM");
	printf("a %zu MiB frame of 2-byte unknown fields: peak RSS %ld -> %ld MiB (+%ld; "
	       "limits.max_memory_mb = 128); code %d, \"%s\"\n",
	       len >> 20, hwm0, hwm, hwm - hwm0, (int)r->status->code, r->status->message);
	RSS_CHECK(hwm - hwm0 <= 64);
	assert_int_equal(r->status->code, MFMA__V1__CODE__MALFORMED);
	assert_non_null(strstr(r->status->message, "fields"));
	assert_int_equal(r->id, 0);
	mfma__v1__response__free_unpacked(r, NULL);
	free(f);

	/* A few unknown fields: the request type it does not know, named. */
	f = unknown_fields_frame(3, &len);
	r = roundtrip(&d, f, len);
	assert_int_equal(r->status->code, MFMA__V1__CODE__INVALID_ARGUMENT);
	assert_non_null(strstr(r->status->message, "unknown request type (field 11)"));
	mfma__v1__response__free_unpacked(r, NULL);
	free(f);
	assert_int_equal(harness_stop(&d), 0);
}

/* ---- descriptors ---- */

/* The descriptors the daemon has open. */
static int open_fds(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *dir = opendir(path);
	int n = 0;
	for (struct dirent *e; dir && (e = readdir(dir));)
		n += e->d_name[0] != '.';
	if (dir)
		closedir(dir);
	return n;
}

/* A 4 KiB memfd sealed against resizing. */
static int small_memfd(void)
{
	int fd = memfd_create("mfma-bounds", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 4096), 0);
	assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
	return fd;
}

/* A frame (header included) of req, id id. */
static uint8_t *pack(Mfma__V1__Request *req, uint64_t id, size_t *len)
{
	req->has_id = 1;
	req->id = id;
	size_t n = mfma__v1__request__get_packed_size(req);
	uint8_t *f = malloc(FRAME_HEADER_SIZE + n);
	assert_non_null(f);
	frame_header_put(f, (uint32_t)n);
	mfma__v1__request__pack(req, f + FRAME_HEADER_SIZE);
	*len = FRAME_HEADER_SIZE + n;
	return f;
}

/* r's status code (0 where it has none) and its message in msg; frees r. */
static int answer_code(Mfma__V1__Response *r, char *msg, size_t msglen)
{
	const int code = r->status ? (int)r->status->code : 0;
	snprintf(msg, msglen, "%s", r->status && r->status->message ? r->status->message : "");
	mfma__v1__response__free_unpacked(r, NULL);
	return code;
}

/* RegisterRegion of memfd on sock: its answer's code, or -1 when the
 * connection closed first. */
static int register_region(int sock, uint64_t id, int memfd, char *msg, size_t msglen)
{
	Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
	Mfma__V1__RegisterRegion rr = MFMA__V1__REGISTER_REGION__INIT;
	req.body_case = MFMA__V1__REQUEST__BODY_REGISTER_REGION;
	req.register_region = &rr;
	size_t len;
	uint8_t *f = pack(&req, id, &len);
	long sent = harness_send_fds(sock, f, len, &memfd, 1);
	free(f);
	if (sent != (long)len)
		return -1;
	uint8_t *buf = NULL;
	long n = harness_read_frame(sock, &buf, 10000);
	if (n < 0)
		return -1;
	Mfma__V1__Response *r = mfma__v1__response__unpack(NULL, (size_t)n, buf);
	free(buf);
	assert_non_null(r);
	return answer_code(r, msg, msglen);
}

/* Regions within every region limit, under the soft descriptor limit of
 * a daemon started by hand (the shells' 1024, here 128 with
 * limits.max_connections = 16): each region kept its memfd's descriptor
 * open besides the mapping, which max_connections x max_regions_per_conn
 * (16 x 16) outgrows, though the limit is fitted to max_connections
 * alone.  Past it every client's new connection was reset unanswered and
 * unlogged, and a registration's descriptor lost, its connection closed
 * for "more than 8 file descriptors".  The mapping keeps the memfd: the
 * descriptor is closed once it is mapped. */
static void test_region_descriptors(void **state)
{
	(void)state;
	struct mfmad_proc d;
	assert_int_equal(harness_start_nofile(&d, "limits = { max_connections = 16; "
						  "max_regions_per_conn = 16; };", NULL, 128), 0);
	int fds0 = open_fds(d.pid);
	enum { CONNS = 12, PER = 16 };
	int sock[CONNS];
	int ok = 0;
	char msg[400] = "";
	for (int i = 0; i < CONNS; i++) {
		sock[i] = harness_connect_raw(&d);
		assert_true(sock[i] >= 0);
		for (int j = 0; j < PER; j++) {
			int m = small_memfd();
			int code = register_region(sock[i], (uint64_t)j + 1, m, msg, sizeof(msg));
			close(m);
			if (code != MFMA__V1__CODE__OK) {
				printf("connection %d, region %d: %s\n", i, j,
				       code < 0 ? "closed unanswered" : msg);
				break;
			}
			ok++;
		}
	}
	int fds = open_fds(d.pid);
	/* Another client, and the daemon's log. */
	Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
	Mfma__V1__Ping ping = MFMA__V1__PING__INIT;
	req.body_case = MFMA__V1__REQUEST__BODY_PING;
	req.ping = &ping;
	size_t len;
	uint8_t *f = pack(&req, 77, &len);
	int g = harness_connect_raw(&d);
	uint8_t *buf = NULL;
	long n = g >= 0 && harness_write_all(g, f, len) == 0 ? harness_read_frame(g, &buf, 5000) : -1;
	printf("%d of %d regions of 4 KiB registered on %d connections (soft descriptor limit 128): "
	       "the daemon holds %d descriptors (%d idle); another client's ping %s\n",
	       ok, CONNS * PER, CONNS, fds, fds0, n > 0 ? "answered" : "not answered");
	assert_int_equal(ok, CONNS * PER);
	assert_true(fds <= fds0 + CONNS + 4);
	assert_true(n > 0);
	free(buf);
	free(f);
	if (g >= 0)
		close(g);
	for (int i = 0; i < CONNS; i++)
		close(sock[i]);
	assert_int_equal(harness_stop(&d), 0);
}

/* ---- the log ---- */

/* After `ms` of a client causing `n` lines (in the log, `named`), at most
 * `burst` a second were written, and a line counting the others came (in
 * the tick after its second's end). */
static void expect_rate_limited(const struct mfmad_proc *d, const char *what, int n, uint64_t ms,
				const char *named, const char *counting, int burst)
{
	usleep(1200 * 1000);
	int lines = harness_log_count(d, named);
	int summary = harness_log_count(d, counting);
	printf("%d %s in %" PRIu64 " ms: %d log lines naming it, %d counting the others\n", n,
	       what, ms, lines, summary);
	assert_true(lines <= burst * (int)(ms / 1000 + 2));
	assert_true(summary >= 1);
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* One client closed again and again for a descriptor sent with a ping:
 * each close wrote an info line, some 15,000 a second from one Python
 * loop (1.7 MiB/s of log), where journald's own rate limit then drops
 * the daemon's other lines too.  Closes are logged at most 10 a second,
 * then one line says how many were not. */
static void test_close_lines_rate_limited(void **state)
{
	(void)state;
	struct mfmad_proc d;
	assert_int_equal(harness_start(&d, NULL, NULL), 0);
	Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
	Mfma__V1__Ping ping = MFMA__V1__PING__INIT;
	req.body_case = MFMA__V1__REQUEST__BODY_PING;
	req.ping = &ping;
	size_t len;
	uint8_t *f = pack(&req, 5, &len);
	int passed = small_memfd();
	int n = 0;
	uint64_t t0 = now_ms();
	while (now_ms() - t0 < 2000) {
		int s = harness_connect_raw(&d);
		assert_true(s >= 0);
		assert_int_equal(harness_send_fds(s, f, len, &passed, 1), (long)len);
		assert_int_equal(harness_wait_closed(s, 5000), 1);
		close(s);
		n++;
	}
	assert_true(n >= 100);
	expect_rate_limited(&d, "connections closed for a descriptor", n, now_ms() - t0,
			    "not register_region", "more connection(s) closed", 10);
	close(passed);
	free(f);
	assert_int_equal(harness_stop(&d), 0);
}

/* A client loading and unloading a tiny weight in a loop wrote two lines a
 * round: they are written at most 20 a second, then one line counts the
 * others. */
static void test_weight_lines_rate_limited(void **state)
{
	(void)state;
	struct mfmad_proc d;
	mfma_client *c;
	struct mfma_error err;
	assert_int_equal(harness_start(&d, "weights = { persist = false; };", NULL), 0);
	assert_int_equal(mfma_connect(d.endpoint, &c, &err), 0);
	float a[4 * 4] = { 1, 2, 3, 4 };
	struct mfma_load_args la;
	mfma_load_args_init(&la);
	la.name = "churn";
	la.a.kind = MFMA_OPERAND_DENSE;
	la.a.dense = (struct mfma_matrix){ .rows = 4, .cols = 4, .dtype = MFMA_TYPE_F32,
					   .data = a, .bytes = sizeof(a) };
	int rounds = 0;
	uint64_t t0 = now_ms();
	while (now_ms() - t0 < 1500) {
		if (mfma_load_weight(c, &la, NULL, &err) != 0 || mfma_unload_weight(c, "churn", &err))
			fail_msg("load/unload round %d: %s", rounds, err.message);
		rounds++;
	}
	assert_true(rounds >= 40);
	expect_rate_limited(&d, "loads and unloads of one weight", rounds, now_ms() - t0,
			    "weight 'churn'", "more weight load(s) and unload(s)", 20);
	mfma_close(c);
	assert_int_equal(harness_stop(&d), 0);
}

/* Room for the descriptors clients may send ahead of the frames that
 * claim them (CONN_MAX_FDS = 8 a Unix connection) as well as for the
 * connections: started under a soft limit of 256 with the default
 * max_connections (256), the daemon raises it to 256 x 9 + 64 = 2368
 * where the hard limit allows (it raised it to 320 before). */
static void test_fd_room(void **state)
{
	(void)state;
	struct rlimit old;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	if (old.rlim_max != RLIM_INFINITY && old.rlim_max < 2368) {
		print_message("  (hard descriptor limit %llu: cannot run)\n",
			      (unsigned long long)old.rlim_max);
		skip();
	}
	struct mfmad_proc d;
	assert_int_equal(harness_start_nofile(&d, NULL, NULL, 256), 0);
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/limits", (int)d.pid);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	unsigned long long soft = 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Max open files %llu", &soft) == 1)
			break;
	fclose(f);
	printf("soft descriptor limit 256 at start, max_connections 256: the daemon's is %llu\n",
	       soft);
	assert_true(soft >= 2368);
	assert_int_equal(harness_stop(&d), 0);
}

/* ---- connections per user and per address ---- */

/* Where a test's connections go: the daemon's Unix socket, or (port > 0)
 * its TCP listener on 127.0.0.1 from the loopback address src. */
struct dialer {
	const struct mfmad_proc *d;
	int port;
	const char *src;
};

static int dial(const struct dialer *w)
{
	if (w->port <= 0)
		return harness_connect_raw(w->d);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_in from = { .sin_family = AF_INET }, to = { .sin_family = AF_INET };
	to.sin_port = htons((uint16_t)w->port);
	if (inet_pton(AF_INET, w->src, &from.sin_addr) != 1 || inet_pton(AF_INET, "127.0.0.1", &to.sin_addr) != 1 ||
	    bind(fd, (struct sockaddr *)&from, sizeof(from)) < 0 ||
	    connect(fd, (struct sockaddr *)&to, sizeof(to)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Pings on n new connections of this process (fds, at most 16), left
 * open for the caller to close: those answered with a pong in *ok, those
 * refused naming (limits.KEY) in *refused, the last such message in last
 * (when given). */
static void ping_open(const struct dialer *w, int n, int *fds, const char *key, int *ok, int *refused, char *last,
		      size_t lastlen)
{
	Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
	Mfma__V1__Ping ping = MFMA__V1__PING__INIT;
	req.body_case = MFMA__V1__REQUEST__BODY_PING;
	req.ping = &ping;
	size_t len;
	uint8_t *frame = pack(&req, 3, &len);
	char want[96];
	snprintf(want, sizeof(want), "(limits.%s)", key);
	assert_true(n <= 16);
	*ok = *refused = 0;
	for (int i = 0; i < n; i++) {
		fds[i] = dial(w);
		/* A refused connection may be closed before the ping is written
		 * (EPIPE): its answer is read all the same. */
		if (fds[i] >= 0)
			(void)harness_write_all(fds[i], frame, len);
		uint8_t *buf = NULL;
		long got = fds[i] >= 0 ? harness_read_frame(fds[i], &buf, 3000) : -1;
		Mfma__V1__Response *r =
			got >= 0 ? mfma__v1__response__unpack(NULL, (size_t)got, buf) : NULL;
		free(buf);
		if (r && r->body_case == MFMA__V1__RESPONSE__BODY_PONG)
			(*ok)++;
		else if (r && r->status && r->status->code == MFMA__V1__CODE__RESOURCE_EXHAUSTED &&
			 strstr(r->status->message, want)) {
			(*refused)++;
			if (last)
				snprintf(last, lastlen, "%s", r->status->message);
		}
		if (r)
			mfma__v1__response__free_unpacked(r, NULL);
	}
	free(frame);
}

static void close_all(const int *fds, int n)
{
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

/* ping_open, the connections kept open until all are answered, then
 * closed. */
static void ping_connections(const struct dialer *w, int n, const char *key, int *ok, int *refused, char *last,
			     size_t lastlen)
{
	int fds[16];
	ping_open(w, n, fds, key, ok, refused, last, lastlen);
	close_all(fds, n);
}

/* One local user cannot take every connection: with
 * limits.max_connections_per_user = 4, a client running as nobody keeps
 * 4 of 6 connections (the other two are refused, saying why), while root
 * keeps all of its 6 at the same time. */
static void test_connections_per_user(void **state)
{
	(void)state;
	if (geteuid() != 0) {
		print_message("  (not root: no other user to connect as)\n");
		skip();
	}
	struct mfmad_proc d;
	assert_int_equal(harness_start(&d, "limits = { max_connections_per_user = 4; };\n"
					   "listen = { unix_mode = \"0666\"; };", NULL), 0);
	assert_int_equal(chmod(d.dir, 0755), 0);
	int pipefd[2];
	assert_int_equal(pipe(pipefd), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int res[2] = { -1, -1 };
		close(pipefd[0]);
		const struct dialer as_nobody = { .d = &d };
		if (setgid(65534) == 0 && setuid(65534) == 0)
			ping_connections(&as_nobody, 6, "max_connections_per_user", &res[0], &res[1], NULL, 0);
		/* The parent reads the counts while these stay closed. */
		ssize_t w = write(pipefd[1], res, sizeof(res));
		_exit(w == (ssize_t)sizeof(res) ? 0 : 1);
	}
	close(pipefd[1]);
	int root_ok, root_refused;
	const struct dialer unix_socket = { .d = &d };
	ping_connections(&unix_socket, 6, "max_connections_per_user", &root_ok, &root_refused, NULL, 0);
	int res[2] = { -1, -1 };
	assert_int_equal(read(pipefd[0], res, sizeof(res)), (ssize_t)sizeof(res));
	close(pipefd[0]);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	printf("max_connections_per_user = 4: uid 65534 got %d of 6 connections (%d refused), "
	       "root %d of 6\n", res[0], res[1], root_ok);
	assert_int_equal(res[0], 4);
	assert_int_equal(res[1], 2);
	assert_int_equal(root_ok, 6);
	assert_int_equal(harness_stop(&d), 0);
}

/* One TCP peer cannot take every connection: with
 * limits.max_connections_per_address = 4, 127.0.0.1 keeps 4 of 6 (the
 * other two refused, naming the address and the key) while 127.0.0.2 and
 * the Unix socket are served beside them; a reload to 0 lifts it. */
static void test_connections_per_address(void **state)
{
	(void)state;
	struct mfmad_proc d;
	const int port = harness_free_port();
	char conf[256];
	snprintf(conf, sizeof(conf),
		 "listen = { tcp = true; tcp_port = %d; };\n"
		 "limits = { max_connections_per_address = 4; };", port);
	assert_int_equal(harness_start(&d, conf, NULL), 0);
	const struct dialer one = { .d = &d, .port = port, .src = "127.0.0.1" };
	const struct dialer two = { .d = &d, .port = port, .src = "127.0.0.2" };
	const struct dialer unix_socket = { .d = &d };
	/* One's six held open while the others connect. */
	int fds[6], ok1, refused1;
	char why[256] = "";
	ping_open(&one, 6, fds, "max_connections_per_address", &ok1, &refused1, why, sizeof(why));
	int ok2, refused2, oku, refusedu;
	ping_connections(&two, 3, "max_connections_per_address", &ok2, &refused2, NULL, 0);
	ping_connections(&unix_socket, 6, "max_connections_per_address", &oku, &refusedu, NULL, 0);
	printf("max_connections_per_address = 4: 127.0.0.1 got %d of 6 (%d refused: \"%s\"), "
	       "127.0.0.2 %d of 3, the Unix socket %d of 6 meanwhile\n", ok1, refused1, why, ok2, oku);
	assert_int_equal(ok1, 4);
	assert_int_equal(refused1, 2);
	assert_non_null(strstr(why, "too many connections: 127.0.0.1 has 4 open (limits.max_connections_per_address)"));
	assert_int_equal(ok2, 3);
	assert_int_equal(oku, 6);
	close_all(fds, 6);
	assert_true(harness_log_count(&d, "127.0.0.1 has 4 open (limits.max_connections_per_address)") >= 1);
	/* Off by a reload: the next connections are not counted. */
	snprintf(conf, sizeof(conf), "listen = { tcp = true; tcp_port = %d; };", port);
	assert_int_equal(harness_reconfigure(&d, conf), 0);
	int ok3, refused3;
	ping_connections(&one, 8, "max_connections_per_address", &ok3, &refused3, NULL, 0);
	assert_int_equal(ok3, 8);
	assert_int_equal(harness_stop(&d), 0);
}

/* ---- loads ---- */

/* A load of an 8 MiB A on fd, named name; its answer's code and, when it
 * is not OK, its message in why. */
static int load_8mib(int fd, uint64_t id, const char *name, char *why, size_t whylen)
{
	struct rw_mat a;
	rw_mat_init(&a, 2048, 1024, 3);
	Mfma__V1__LoadWeight lw;
	Mfma__V1__Request req;
	rw_load_request(&req, &lw, id, name, &a.op);
	rw_send(fd, &req);
	rw_mat_free(&a);
	return answer_code(rw_read(fd, 120000), why, whylen);
}

/* A client's load holds its request (protobuf-c's copy of A, and the 2:4
 * copy a check or a prune makes) until it is answered, and counted against
 * no memory limit: loads queued on a busy device held their matrices past
 * limits.max_inflight_mb and limits.max_memory_mb, as many 256 MiB frames
 * as weights.budget_mb takes (it counts the device's copy, not the host's).
 * A load now counts in flight as a GEMM's operands do: an 8 MiB load while
 * a GEMM of 32 MiB runs, under max_inflight_mb = 8, is refused naming the
 * limit (it was loaded); once the GEMM is answered the same load is taken. */
static void test_load_counts_in_flight(void **state)
{
	(void)state;
	struct mfmad_proc d;
	assert_int_equal(harness_start(&d, "cpu = { threads = 1; devices = 1; };\n"
					   "limits = { max_inflight_mb = 8; };", NULL), 0);
	int busy = harness_connect_raw(&d), fd = harness_connect_raw(&d);
	assert_true(busy >= 0 && fd >= 0);
	/* 2048^3, pruned to 2:4, on one thread: long enough to load beside. */
	rw_send_gemm(busy, 1, 2048, 2048, 2048, true, 0, 0);
	rw_wait_running(fd);
	char why[512];
	int code = load_8mib(fd, 100, "beside", why, sizeof(why));
	printf("an 8 MiB load beside a running GEMM, limits.max_inflight_mb = 8: code %d, \"%s\"\n",
	       code, why);
	Mfma__V1__Response *r = rw_read(busy, 120000);
	const int gemm_code = (int)r->status->code;
	mfma__v1__response__free_unpacked(r, NULL);
	assert_int_equal(gemm_code, MFMA__V1__CODE__OK);
	assert_int_equal(code, MFMA__V1__CODE__RESOURCE_EXHAUSTED);
	assert_non_null(strstr(why, "limits.max_inflight_mb = 8"));
	/* Alone, the first request in flight is always let in. */
	assert_int_equal(load_8mib(fd, 101, "alone", why, sizeof(why)), MFMA__V1__CODE__OK);
	close(fd);
	close(busy);
	assert_int_equal(harness_stop(&d), 0);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN); /* the daemon closes some of these clients mid-write */
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_decode_fields, harness_stop_leftover),
		cmocka_unit_test_teardown(test_region_descriptors, harness_stop_leftover),
		cmocka_unit_test_teardown(test_close_lines_rate_limited, harness_stop_leftover),
		cmocka_unit_test_teardown(test_connections_per_user, harness_stop_leftover),
		cmocka_unit_test_teardown(test_connections_per_address, harness_stop_leftover),
		cmocka_unit_test_teardown(test_weight_lines_rate_limited, harness_stop_leftover),
		cmocka_unit_test_teardown(test_fd_room, harness_stop_leftover),
		cmocka_unit_test_teardown(test_load_counts_in_flight, harness_stop_leftover),
	};
	return cmocka_run_group_tests_name("bounds", tests, NULL, NULL);
}
