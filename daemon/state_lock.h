/* The state directory's lock: one mfmad at a time keeps its weights and
 * its measured choices there.  Two daemons given the same directory (a
 * second instance started by hand beside the service, two nodes on one
 * shared volume) would write the same files and remove each other's
 * loads under way (a start removes the weights' *.mfw.tmp), so the
 * second one refuses to start, naming the first.
 *
 * The lock is flock(2) on STATE/lock, a file holding the holder's pid
 * (the kernel drops the lock when the holder exits, however it exits, so
 * a lock file left by a crash never blocks).  A state directory this
 * daemon cannot write (a fleet's weight volume mounted read-only, whose
 * stored weights every node restores) is not locked: nothing in it is
 * written or removed, so any number of daemons may share it. */
#ifndef MFMAD_STATE_LOCK_H
#define MFMAD_STATE_LOCK_H

#include <stddef.h>
#include <sys/types.h>

/* Takes the lock of directory dir.  Returns the descriptor that holds it
 * (close-on-exec; the lock lasts until it is closed), -EBUSY when another
 * process holds it (*holder: its pid, or 0 when not known), -EROFS or
 * -EACCES when the lock file cannot be made or opened for writing (the
 * directory is read-only to this daemon), or another negative errno. */
int state_lock_take(const char *dir, pid_t *holder);

#endif
