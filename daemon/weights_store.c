#include "weights_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "fnv.h"
#include "log.h"
#include "mfma.pb-c.h"
#include "sparse24.h"

/* The file: this header (little-endian), then the values, then the meta.
 * The checksum (FNV-1a, 64 bits) covers the header with its checksum
 * field zero, and the data. */
struct wstore_header {
	char magic[8]; /* "MFMAWGT\0" */
	uint32_t version;
	uint32_t m, k, dtype, sparse;
	uint32_t device; /* the load's device + 1; 0: every device (as before it was kept) */
	uint64_t values_bytes, meta_bytes;
	uint64_t checksum;
	char name[128];
};

static const char magic[8] = "MFMAWGT";

static uint64_t checksum(const struct wstore_header *hd, const void *v, const void *m)
{
	struct wstore_header h = *hd;
	h.checksum = 0;
	uint64_t c = fnv64(FNV64_INIT, &h, sizeof(h));
	c = fnv64(c, v, hd->values_bytes);
	return fnv64(c, m, hd->meta_bytes);
}

const char *wstore_dir(const struct daemon *d, char *buf, size_t len)
{
	if (!d->cfg.weights_persist)
		return NULL;
	char base[256];
	if (!config_state_dir(&d->cfg, base, sizeof(base)))
		return NULL;
	int w = snprintf(buf, len, "%s/weights", base);
	return w > 0 && (size_t)w < len ? buf : NULL;
}

static int write_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;
	while (n) {
		ssize_t w = write(fd, b, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -errno;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Makes the directory's entries (a rename, an unlink) durable: without it
 * a power cut can bring back a weight that was unloaded or replaced. */
static void sync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return;
	(void)fsync(fd);
	close(fd);
}

int wstore_write(const char *dir, const struct wstore_weight *w)
{
	char path[512];
	/* Clients' matrices: the daemon's alone (the socket's group, which
	 * every client of the service is in, may not read them).  An older
	 * directory of looser mode is tightened. */
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		int e = errno;
		log_warn("weight '%s' is not persisted: cannot create %s: %s", w->name, dir, strerror(e));
		return -e;
	}
	(void)chmod(dir, 0700);
	/* A full disk breaks more than this daemon: the file is not
	 * written where it would leave less than weights.persist_min_free_mb
	 * free (a replaced weight's file, freed after the rename, is not
	 * counted). */
	struct statvfs vs;
	const uint64_t need = sizeof(struct wstore_header) + w->values_bytes + w->meta_bytes;
	if (w->min_free && statvfs(dir, &vs) == 0) {
		const uint64_t avail = (uint64_t)vs.f_bavail * vs.f_frsize;
		if (avail < need || avail - need < w->min_free) {
			log_warn("weight '%s' is not persisted: its file of %" PRIu64 " MiB would leave %" PRIu64
				 " MiB free in %s, under weights.persist_min_free_mb = %" PRIu64,
				 w->name, (need + (1u << 20) - 1) >> 20, avail > need ? (avail - need) >> 20 : 0, dir,
				 w->min_free >> 20);
			return -ENOSPC;
		}
	}
	snprintf(path, sizeof(path), "%s/%s.mfw.tmp", dir, w->name);
	struct wstore_header h = { .version = WSTORE_VERSION, .m = w->m, .k = w->k,
				   .dtype = (uint32_t)w->dtype, .sparse = w->sparse,
				   .device = w->device >= 0 ? (uint32_t)w->device + 1 : 0,
				   .values_bytes = w->values_bytes, .meta_bytes = w->meta_bytes };
	memcpy(h.magic, magic, sizeof(h.magic));
	snprintf(h.name, sizeof(h.name), "%s", w->name);
	h.checksum = checksum(&h, w->values, w->meta);
	/* A new file of the daemon's own: whatever was left at the name (a
	 * link planted there, say) is removed, never written through. */
	if (unlink(path) < 0 && errno != ENOENT) {
		int e = errno;
		log_warn("weight '%s' is not persisted: cannot remove %s: %s", w->name, path,
			 strerror(e));
		return -e;
	}
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	int rc = fd < 0 ? -errno : 0;
	if (rc == 0)
		rc = write_all(fd, &h, sizeof(h));
	if (rc == 0)
		rc = write_all(fd, w->values, w->values_bytes);
	if (rc == 0 && w->meta_bytes)
		rc = write_all(fd, w->meta, w->meta_bytes);
	/* On disk before the rename makes it the weight's file. */
	if (rc == 0 && fsync(fd) < 0)
		rc = -errno;
	if (fd >= 0)
		close(fd);
	if (rc < 0) {
		log_warn("weight '%s' is not persisted: writing %s: %s", w->name, path, strerror(-rc));
		unlink(path);
	}
	return rc;
}

bool wstore_finish(const char *dir, const char *name, bool resident, bool written)
{
	char tmp[512], path[512];
	snprintf(tmp, sizeof(tmp), "%s/%s.mfw.tmp", dir, name);
	snprintf(path, sizeof(path), "%s/%s.mfw", dir, name);
	if (!resident) {
		unlink(tmp); /* NAME.mfw, if any, is the weight still serving */
		return false;
	}
	if (written) {
		if (rename(tmp, path) == 0) {
			sync_dir(dir);
			return true;
		}
		log_warn("weight '%s' is not persisted: rename to %s: %s", name, path, strerror(errno));
		unlink(tmp);
	}
	/* The weight serves with no file of its own: an older file at its
	 * name (the weight it replaced) is what a restart would bring back
	 * under the name, a matrix the client replaced.  Better not restored
	 * than restored stale. */
	if (unlink(path) == 0) {
		sync_dir(dir);
		log_warn("weight '%s': %s, an older weight's file, is removed; a restart will not "
			 "restore '%s'", name, path, name);
	} else {
		/* On a read-only file system unlink says EROFS whether or not
		 * the file is there: only one that is there is worth a line. */
		const int e = errno;
		if (e != ENOENT && access(path, F_OK) == 0)
			log_warn("weight '%s': cannot remove %s, an older weight's file, which a restart "
				 "would restore in its place: %s", name, path, strerror(e));
	}
	return false;
}

int wstore_remove(const char *dir, const char *name)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s.mfw", dir, name);
	if (unlink(path) == 0) {
		sync_dir(dir);
		return 1;
	}
	if (errno != ENOENT)
		log_warn("cannot remove %s: %s", path, strerror(errno));
	return 0;
}

void wstore_weight_free(struct wstore_weight *w)
{
	if (!w)
		return;
	free(w->values);
	free(w->meta);
	memset(w, 0, sizeof(*w));
}

static int bad(char *err, size_t errlen, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int bad(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return rc;
}

int wstore_read(const char *path, uint64_t max_bytes, struct wstore_weight *w, char *err,
		size_t errlen)
{
	memset(w, 0, sizeof(*w));
	/* Only a regular file of the directory's own: a link is not followed,
	 * and a FIFO or device must not block the start on its open. */
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return errno == ELOOP ? bad(err, errlen, -ELOOP, "%s: a symbolic link, not followed",
					    path)
				      : bad(err, errlen, -errno, "%s: %s", path, strerror(errno));
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return bad(err, errlen, -EINVAL, "%s: not a regular file", path);
	}
	FILE *f = fdopen(fd, "rb");
	if (!f) {
		int e = errno;
		close(fd);
		return bad(err, errlen, -e, "%s: %s", path, strerror(e));
	}
	struct wstore_header h;
	int rc = 0;
	if (fread(&h, sizeof(h), 1, f) != 1) {
		rc = bad(err, errlen, -EINVAL, "%s: shorter than its header", path);
		goto out;
	}
	if (memcmp(h.magic, magic, sizeof(magic)) != 0) {
		rc = bad(err, errlen, -EINVAL, "%s: not a stored weight", path);
		goto out;
	}
	if (h.version != WSTORE_VERSION) {
		rc = bad(err, errlen, -EINVAL, "%s: format version %u; this daemon reads %d", path,
			 h.version, WSTORE_VERSION);
		goto out;
	}
	h.name[sizeof(h.name) - 1] = '\0';
	size_t es = h.dtype < 16 ? mfma_dtype_size((enum mfma_dtype)h.dtype) : 0;
	/* The sizes must be what the shape says, and the file that long
	 * (which bounds the allocations below by its size). */
	uint64_t want_v = h.sparse ? sparse24_values_bytes(h.m, h.k, es) : (uint64_t)h.m * h.k * es;
	uint64_t want_m = h.sparse ? sparse24_meta_bytes(h.m, h.k) : 0;
	if (es == 0 || h.m == 0 || h.k == 0 || h.m > (1u << 24) || h.k > (1u << 24) ||
	    h.values_bytes != want_v || h.meta_bytes != want_m ||
	    (uint64_t)st.st_size != sizeof(h) + want_v + want_m) {
		rc = bad(err, errlen, -EINVAL, "%s: the sizes do not match a %ux%u weight", path, h.m,
			 h.k);
		goto out;
	}
	/* A weight no device could hold is refused before it is read: read, it
	 * would take its size in memory only to be refused by the budget, and
	 * one larger than the daemon's memory killed every start. */
	if (want_v + want_m > max_bytes) {
		rc = bad(err, errlen, -EFBIG,
			 "%s: a %ux%u weight of %" PRIu64 " bytes, more than any device's weight "
			 "budget (%" PRIu64 " bytes, weights.budget_mb); not read", path, h.m, h.k,
			 want_v + want_m, max_bytes);
		goto out;
	}
	w->values = malloc(want_v ? want_v : 1);
	w->meta = malloc(want_m ? want_m : 1);
	if (!w->values || !w->meta) {
		rc = bad(err, errlen, -ENOMEM, "%s: out of memory", path);
		goto out;
	}
	if (fread(w->values, 1, want_v, f) != want_v || fread(w->meta, 1, want_m, f) != want_m) {
		rc = bad(err, errlen, -EIO, "%s: read error", path);
		goto out;
	}
	if (checksum(&h, w->values, w->meta) != h.checksum) {
		rc = bad(err, errlen, -EINVAL, "%s: checksum mismatch (the file is damaged)", path);
		goto out;
	}
	snprintf(w->name, sizeof(w->name), "%s", h.name);
	w->m = h.m;
	w->k = h.k;
	w->dtype = (enum mfma_dtype)h.dtype;
	w->sparse = h.sparse;
	/* One that no longer exists is the load's to refuse, by name. */
	w->device = h.device && h.device <= INT32_MAX ? (int)(h.device - 1) : -1;
	w->values_bytes = want_v;
	w->meta_bytes = want_m;
out:
	fclose(f);
	if (rc < 0)
		wstore_weight_free(w);
	return rc;
}

int wstore_each(const char *dir, uint64_t max_bytes,
		int (*fn)(void *arg, struct wstore_weight *w), void *arg)
{
	DIR *dp = opendir(dir);
	if (!dp) {
		if (errno != ENOENT)
			log_warn("cannot read the stored weights in %s: %s", dir, strerror(errno));
		return 0;
	}
	int count = 0;
	struct dirent *e;
	while ((e = readdir(dp))) {
		size_t n = strlen(e->d_name);
		char path[700];
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (n > 8 && strcmp(e->d_name + n - 8, ".mfw.tmp") == 0) {
			/* A load the daemon did not live to finish. */
			if (unlink(path) == 0)
				log_info("removed %s, the file of a load that a stop cut short", path);
			continue;
		}
		if (n <= 4 || strcmp(e->d_name + n - 4, ".mfw") != 0)
			continue;
		struct wstore_weight w;
		char err[600];
		if (wstore_read(path, max_bytes, &w, err, sizeof(err)) < 0) {
			log_warn("stored weight not restored: %s", err);
			continue;
		}
		/* The file's name is the weight's (an unload removes it by
		 * name): a file renamed by hand is not restored under the name
		 * in it, where no unload could ever remove it. */
		if (strlen(w.name) != n - 4 || strncmp(w.name, e->d_name, n - 4) != 0) {
			log_warn("stored weight not restored: %s holds weight '%s', and a stored "
				 "weight's file is named after it (%s.mfw)", path, w.name, w.name);
			wstore_weight_free(&w);
			continue;
		}
		int rc = fn(arg, &w);
		wstore_weight_free(&w);
		if (rc > 0)
			break;
		count += rc == 0;
	}
	closedir(dp);
	return count;
}
