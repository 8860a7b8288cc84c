/* The measured choices among a device's kernel providers, as a table and
 * as the text of the file that keeps them across restarts.  Pure: no I/O,
 * no lock; choices.c is the shell (the lock, the file, the loop).
 *
 * The file (a text file, so that an operator can read it):
 *
 *   mfmad-choices 1 <checksum, 16 hex digits>\n
 *   <device>\t<m>\t<k>\t<dtype>\t<sparse>\t<n_max>\t<out>\t<order>\n   (one per choice)
 *
 * The checksum is FNV-1a (64 bits) of every byte after the first line.
 * dtype and out are dtype names ("f16"), sparse is 0 or 1, order is
 * provider names, comma-separated, fastest first. */
#ifndef MFMAD_CHOICE_CACHE_H
#define MFMAD_CHOICE_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

#define CHOICE_CACHE_VERSION 1
/* The most choices kept: past it the oldest makes room.  A client can
 * make the daemon measure (and so keep) one choice per weight shape, N
 * bucket and output type; this bounds the memory and the file. */
#define CHOICE_CACHE_MAX 4096
/* An order's longest text. */
#define CHOICE_ORDER_MAX 128
/* The largest file read: CHOICE_CACHE_MAX lines of at most ~400 bytes. */
#define CHOICE_FILE_MAX (2u << 20)

struct choice_entry {
	struct backend_choice_key key;
	char order[CHOICE_ORDER_MAX];
};

struct choice_cache {
	struct choice_entry *e; /* oldest first */
	size_t n, max;
};

/* An empty cache of at most max choices (0: CHOICE_CACHE_MAX). */
int choice_cache_init(struct choice_cache *c, size_t max);
void choice_cache_free(struct choice_cache *c);

/* The order kept for key, or NULL. */
const char *choice_cache_get(const struct choice_cache *c, const struct backend_choice_key *key);
/* Why a lookup missed: the device of the newest choice kept for key's
 * weight shape, N bucket and output type under another device key
 * (another GPU, driver, mfmad, build of the kernels or library version),
 * or NULL. */
const char *choice_cache_other_device(const struct choice_cache *c,
				      const struct backend_choice_key *key);
/* Keeps order for key (replacing the one there).  0; 1 when the oldest
 * choice was dropped to make room; -EINVAL for a key or an order that the
 * file could not hold (a tab or a newline, too long, empty). */
int choice_cache_put(struct choice_cache *c, const struct backend_choice_key *key,
		     const char *order);

/* The file's text for c into buf (len bytes): the length it needs, like
 * snprintf; the text is whole only when that is < len. */
size_t choice_cache_format(const struct choice_cache *c, char *buf, size_t len);
/* Reads a file's text (len bytes, not NUL-terminated) into c, which
 * should be empty.  0, or -EINVAL with a sentence in err naming what is
 * wrong (the version, the checksum, a line); c is then emptied. */
int choice_cache_parse(struct choice_cache *c, const char *text, size_t len, char *err,
		       size_t errlen);

#endif
