/* Declared weights (weights.declare): the weights the configuration says
 * this node serves, read from .npy files by the daemon itself at start and
 * on every reload (SIGHUP).
 *
 * Each declaration is read, decoded and turned into a LoadWeight on the
 * libuv threadpool, then loaded through the registry like a client's
 * load (weights.c: prepared off the loop, made resident by each device's
 * worker, replaced atomically).  A declaration that fails is logged once
 * per attempt and shown in status with its message; the node reports not
 * ready (/readyz) until every declaration is resident.  On a reload, new
 * declarations load, those whose settings or file (device, inode, size,
 * modification time) changed load again and replace the old weight, and
 * removed ones are unloaded.  Weights that clients loaded under other
 * names are left alone; a client cannot load, replace or unload a
 * declared name.  Declared weights are not written to the state
 * directory: the configuration brings them back. */
#ifndef MFMAD_DECLARE_H
#define MFMAD_DECLARE_H

#include <stdbool.h>
#include <stddef.h>

#include "daemon.h"
#include "mfma.pb-c.h"

/* Brings the loaded declarations in line with d->cfg (new, changed,
 * removed).  At start, call declare_wait after it. */
void declare_apply(struct daemon *d);
/* Runs the loop until no declaration is being read or loaded (start-up,
 * before the listeners: a client never finds a declared weight missing). */
void declare_wait(struct daemon *d);

/* The declarations as wire messages for status and list replies; the
 * strings point into the registry, so reply before anything else runs. */
struct declare_list {
	size_t n;
	Mfma__V1__DeclaredWeight *info;
	Mfma__V1__DeclaredWeight **ptrs;
};
int declare_list(const struct daemon *d, struct declare_list *l);
void declare_list_free(struct declare_list *l);

/* After the loop has ended: frees what is left. */
void declare_free(struct daemon *d);

#endif
