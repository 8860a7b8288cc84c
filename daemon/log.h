/* Logging for the daemon process (never for library code).  Under
 * journald (JOURNAL_STREAM set and matching stderr) each line carries a
 * "<N>" priority prefix; otherwise a timestamp and the level name. */
#ifndef MFMAD_LOG_H
#define MFMAD_LOG_H

#include <stdint.h>

enum log_level { LOG_LVL_ERR = 3, LOG_LVL_WARNING = 4, LOG_LVL_NOTICE = 5, LOG_LVL_INFO = 6, LOG_LVL_DEBUG = 7 };

void log_init(void);
void log_set_level(enum log_level lvl);
enum log_level log_get_level(void);
/* Returns -1 for an unknown name. */
int log_level_parse(const char *name);
const char *log_level_name(enum log_level lvl);

void log_msg(enum log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Lines of one kind that a client can cause as fast as it connects (a
 * line for each would flood the log, where journald's own rate limit then
 * drops the daemon's other lines too): log_limited writes at most `burst`
 * of them a second and counts the others; log_limit_flush, once that
 * second is over, writes one line of how many `what` were not logged.
 * One thread's (the loop's): not locked. */
struct log_limit {
	uint64_t start_ns; /* the second counted */
	uint32_t logged;
	uint64_t skipped;
};
void log_limited(struct log_limit *l, uint32_t burst, enum log_level lvl, const char *what,
		 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
void log_limit_flush(struct log_limit *l, const char *what);

#define log_err(...) log_msg(LOG_LVL_ERR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LVL_WARNING, __VA_ARGS__)
#define log_notice(...) log_msg(LOG_LVL_NOTICE, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LVL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LVL_DEBUG, __VA_ARGS__)

#endif
