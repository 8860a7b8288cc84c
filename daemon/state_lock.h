/* The state directory's lock: one mfmad at a time keeps its weights and
 * its measured choices there.  Two daemons given the same directory (a
 * second instance started by hand beside the service, two nodes on one
 * shared volume) would write the same files and remove each other's
 * loads under way (a start removes the weights' *.mfw.tmp), so the
 * second one refuses to start, naming the first.
 *
 * The lock is flock(2) on STATE/lock, a file holding the holder's pid
 * (the kernel drops the lock when the holder exits, however it exits, so
 * a lock file left by a crash never blocks).  Where the file cannot be
 * written (a read-only state directory, which still serves its stored
 * weights), the directory itself is locked and the holder goes unnamed. */
#ifndef MFMAD_STATE_LOCK_H
#define MFMAD_STATE_LOCK_H

#include <stddef.h>
#include <sys/types.h>

/* Takes the lock of directory dir.  Returns the descriptor that holds it
 * (close-on-exec; the lock lasts until it is closed), -EBUSY when another
 * process holds it (*holder: its pid, or 0 when not known), or another
 * negative errno when dir cannot be opened. */
int state_lock_take(const char *dir, pid_t *holder);

#endif
