#include "log.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mfma_clock.h"

static _Atomic int cur_level = LOG_LVL_INFO;
static int journald;

static const char *const names[] = {
	[LOG_LVL_ERR] = "error", [LOG_LVL_WARNING] = "warning", [LOG_LVL_NOTICE] = "notice",
	[LOG_LVL_INFO] = "info", [LOG_LVL_DEBUG] = "debug",
};

void log_init(void)
{
	/* JOURNAL_STREAM is "DEV:INODE" of the stream journald gave us; only
	 * trust it when stderr is still that stream (not redirected). */
	const char *js = getenv("JOURNAL_STREAM");
	struct stat st;
	unsigned long long dev, ino;
	journald = 0;
	if (js && sscanf(js, "%llu:%llu", &dev, &ino) == 2 && fstat(STDERR_FILENO, &st) == 0)
		journald = (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void log_set_level(enum log_level lvl) { atomic_store(&cur_level, lvl); }
enum log_level log_get_level(void) { return (enum log_level)atomic_load(&cur_level); }

int log_level_parse(const char *name)
{
	for (int i = LOG_LVL_ERR; i <= LOG_LVL_DEBUG; i++)
		if (strcmp(name, names[i]) == 0)
			return i;
	if (strcmp(name, "warn") == 0)
		return LOG_LVL_WARNING;
	return -1;
}

const char *log_level_name(enum log_level lvl)
{
	return lvl >= LOG_LVL_ERR && lvl <= LOG_LVL_DEBUG ? names[lvl] : "?";
}

void log_msg(enum log_level lvl, const char *fmt, ...)
{
	if ((int)lvl > atomic_load(&cur_level))
		return;
	char line[2048];
	size_t n;
	if (journald) {
		n = (size_t)snprintf(line, sizeof(line), "<%d>", (int)lvl);
	} else {
		struct timespec ts;
		struct tm tm;
		clock_gettime(CLOCK_REALTIME, &ts);
		localtime_r(&ts.tv_sec, &tm);
		n = strftime(line, sizeof(line), "%Y-%m-%d %H:%M:%S", &tm);
		n += (size_t)snprintf(line + n, sizeof(line) - n, ".%03ld %-7s ",
				      ts.tv_nsec / 1000000, log_level_name(lvl));
	}
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		return;
	n += (size_t)m < sizeof(line) - n - 1 ? (size_t)m : sizeof(line) - n - 2;
	line[n++] = '\n';
	/* One write per line so concurrent threads do not interleave. */
	ssize_t w = write(STDERR_FILENO, line, n);
	(void)w;
}

static void limit_flush_at(struct log_limit *l, uint64_t now, const char *what)
{
	if (!l->skipped || now - l->start_ns < 1000000000ull)
		return;
	log_msg(LOG_LVL_INFO, "%" PRIu64 " more %s in the last second, not logged", l->skipped,
		what);
	l->skipped = 0;
}

void log_limit_flush(struct log_limit *l, const char *what)
{
	limit_flush_at(l, mfma_clock_ns(), what);
}

void log_limited(struct log_limit *l, uint32_t burst, enum log_level lvl, const char *what,
		 const char *fmt, ...)
{
	uint64_t now = mfma_clock_ns();
	if (now - l->start_ns >= 1000000000ull) {
		limit_flush_at(l, now, what);
		l->start_ns = now;
		l->logged = 0;
	}
	if (l->logged >= burst) {
		l->skipped++;
		return;
	}
	l->logged++;
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_msg(lvl, "%s", msg);
}
