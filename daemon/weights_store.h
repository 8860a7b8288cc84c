/* Weights that survive a restart: each ready weight is kept in the state
 * directory (weights.state_dir, by default systemd's $STATE_DIRECTORY) in
 * its canonical host form, with its format version and a checksum, and is
 * loaded again at start before the daemon says READY=1.
 *
 * A load writes NAME.mfw.tmp on the threadpool while it prepares the
 * weight; the loop renames it over NAME.mfw once the weight is resident
 * (so a replace is atomic on disk too) or removes it when the load fails.
 * An unload removes NAME.mfw. */
#ifndef MFMAD_WEIGHTS_STORE_H
#define MFMAD_WEIGHTS_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon.h"
#include "mfma_dtype.h"

#define WSTORE_VERSION 1

struct wstore_weight {
	char name[128];
	uint32_t m, k;
	enum mfma_dtype dtype;
	bool sparse;
	int device;     /* the one the client loaded it onto, or -1: every device */
	void *values;   /* the dense A, or the 2:4 values */
	size_t values_bytes;
	void *meta;     /* canonical meta when sparse */
	size_t meta_bytes;
	uint64_t min_free; /* bytes the file system must keep free once the file is written */
};

/* The weights directory into buf, or NULL when nothing is persisted. */
const char *wstore_dir(const struct daemon *d, char *buf, size_t len);

/* Threadpool: writes NAME.mfw.tmp.  0, or a negative errno (logged):
 * -ENOSPC, unwritten, where the file would leave less than w->min_free
 * bytes free in dir's file system. */
int wstore_write(const char *dir, const struct wstore_weight *w);
/* Loop, once a load is over: NAME.mfw.tmp becomes NAME.mfw (resident and
 * written by wstore_write) or is removed (not resident); a weight resident
 * but not written removes NAME.mfw, so that a restart does not restore the
 * weight it replaced.  Whether the weight has its file now. */
bool wstore_finish(const char *dir, const char *name, bool resident, bool written);
/* Loop: removes NAME.mfw; 1 when there was one, else 0. */
int wstore_remove(const char *dir, const char *name);

/* Reads and checks one file (magic, version, sizes, checksum); pure but
 * for the read.  A weight of more than max_bytes (the largest device
 * budget) is refused from its header, -EFBIG, before anything is
 * allocated.  0 with *w filled (free with wstore_weight_free), or
 * -EINVAL / -errno with a sentence in err. */
int wstore_read(const char *path, uint64_t max_bytes, struct wstore_weight *w, char *err,
		size_t errlen);
void wstore_weight_free(struct wstore_weight *w);

/* Reads every stored weight in dir (removing the .tmp of loads that did
 * not finish, logging files that do not check out or hold more than
 * max_bytes) and hands each to fn, which may take its buffers (values and
 * meta set to NULL) and ends the walk by returning more than 0; returns
 * how many fn took (returned 0 for). */
int wstore_each(const char *dir, uint64_t max_bytes,
		int (*fn)(void *arg, struct wstore_weight *w), void *arg);

#endif
