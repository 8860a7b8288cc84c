/* Names the calling thread as it shows in top -H, ps -L and profiles
 * ("mfmad-dev0", "mfmad-post0.1", "mfmad-read2"), cut to the 15
 * characters a Linux thread's name holds. */
#ifndef MFMAD_THREAD_NAME_H
#define MFMAD_THREAD_NAME_H

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

__attribute__((format(printf, 1, 2))) static inline void thread_name(const char *fmt, ...)
{
	char name[64];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(name, sizeof(name), fmt, ap);
	va_end(ap);
	name[15] = '\0';
	pthread_setname_np(pthread_self(), name);
}

#endif
