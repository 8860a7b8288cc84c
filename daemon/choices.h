/* The cache of measured provider choices, kept in the state directory
 * (STATE/choices) so that a restart does not time the candidates again.
 * The pure part (the table, the file's text) is choice_cache.c; this is
 * its shell: the lock the device workers take, the file read at start and
 * written, off the loop, after each measured choice.
 *
 * A damaged, stale (another format version) or oversized file is ignored
 * with a log line and replaced by the next write. */
#ifndef MFMAD_CHOICES_H
#define MFMAD_CHOICES_H

#include "backend.h"
#include "daemon.h"

/* Loop, before the devices open: reads the file (when there is a state
 * directory) and makes d->choices.  0, or -ENOMEM. */
int choices_start(struct daemon *d);
/* The hook the backends get (backend_config.choices), NULL for none. */
const struct backend_choices *choices_hook(const struct daemon *d);
/* After the last uv_run (every worker stopped, its async handle closed):
 * writes what is not written yet and frees it.  Accepts d->choices NULL. */
void choices_free(struct daemon *d);

#endif
