/* What one client can make the daemon hold, bounded (found by review):
 * each case makes the real daemon hold a resource the way a hostile
 * client would and checks the bound, measured from /proc (memory,
 * descriptors) or the daemon's log. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "frame.h"
#include "harness.h"
#include "mfma.pb-c.h"

/* Under AddressSanitizer RSS says little (freed blocks wait in its
 * quarantine, and its shadow grows with the heap): the RSS bounds are
 * printed but only checked in the normal build, as test_hostile does. */
#if defined(__SANITIZE_ADDRESS__)
#define RSS_CHECK(cond) ((void)(cond))
#else
#define RSS_CHECK(cond) assert_true(cond)
#endif

/* A line of /proc/PID/status ("VmHWM", "VmRSS") in MiB, or -1. */
static long status_mib(pid_t pid, const char *key)
{
	char path[64], line[256], fmt[32];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	snprintf(fmt, sizeof(fmt), "%s: %%ld kB", key);
	FILE *f = fopen(path, "r");
	long kb = -1;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, fmt, &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb < 0 ? -1 : kb / 1024;
}

/* The answer to frame (len bytes, header included) on a fresh
 * connection. */
static Mfma__V1__Response *roundtrip(const struct mfmad_proc *d, const uint8_t *frame, size_t len)
{
	int fd = harness_connect_raw(d);
	assert_true(fd >= 0);
	assert_int_equal(harness_write_all(fd, frame, len), 0);
	uint8_t *buf = NULL;
	long n = harness_read_frame(fd, &buf, 30000);
	close(fd);
	assert_true(n >= 0);
	Mfma__V1__Response *r = mfma__v1__response__unpack(NULL, (size_t)n, buf);
	free(buf);
	assert_non_null(r);
	assert_non_null(r->status);
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

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN); /* the daemon closes some of these clients mid-write */
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_decode_fields, harness_stop_leftover),
	};
	return cmocka_run_group_tests_name("bounds", tests, NULL, NULL);
}
