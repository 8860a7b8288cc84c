/* Scratch memory for the CPU GEMMs, kept per calling thread between
 * calls.
 *
 * Packing B into freshly allocated buffers on every call spent more time
 * in page faults (first touch of new pages) than in the multiply-adds for
 * problems up to a few hundred rows.  Each thread that calls the GEMMs
 * (one worker per device in the daemon) therefore keeps one block that
 * only grows; the pool threads that help a call use parts of their
 * caller's block.  Being thread-local, two callers never share a block.
 * The block is freed when its thread exits, and after a call that needed
 * more than CPU_WS_KEEP: such calls are big enough that faulting their
 * scratch in again costs little next to their arithmetic. */
#include <pthread.h>
#include <stdlib.h>

#include "cpu_internal.h"

static _Thread_local void *ws_ptr;
static _Thread_local size_t ws_size;
static pthread_key_t ws_key;
static pthread_once_t ws_once = PTHREAD_ONCE_INIT;
static int ws_key_ok;

#define CPU_WS_KEEP ((size_t)32 << 20)

static void ws_destroy(void *p)
{
	free(p);
}

static void ws_init(void)
{
	ws_key_ok = pthread_key_create(&ws_key, ws_destroy) == 0;
}

void *cpu_workspace(size_t bytes)
{
	if (bytes <= ws_size && ws_ptr)
		return ws_ptr;
	pthread_once(&ws_once, ws_init);
	free(ws_ptr);
	ws_size = 0;
	/* Grow by at least half again, so a slowly growing sequence of
	 * shapes does not reallocate (and fault in) every time; but not past
	 * what cpu_workspace_trim keeps for a request that fits under it, or
	 * the trim would free (and the next call fault in again) every block
	 * asked for between two thirds of CPU_WS_KEEP and all of it. */
	size_t want = bytes + bytes / 2;
	if (bytes <= CPU_WS_KEEP && want > CPU_WS_KEEP)
		want = CPU_WS_KEEP;
	want = (want + 63) / 64 * 64;
	ws_ptr = aligned_alloc(64, want ? want : 64);
	if (ws_ptr)
		ws_size = want;
	/* Without a key the block is not freed at thread exit; the daemon's
	 * threads live as long as the process, so that costs nothing there. */
	if (ws_key_ok)
		pthread_setspecific(ws_key, ws_ptr);
	return ws_ptr;
}

void cpu_workspace_trim(void)
{
	if (ws_size <= CPU_WS_KEEP)
		return;
	free(ws_ptr);
	ws_ptr = NULL;
	ws_size = 0;
	if (ws_key_ok)
		pthread_setspecific(ws_key, NULL);
}

size_t cpu_workspace_size(void)
{
	return ws_size;
}
