#include "regions.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conn.h"
#include "devices.h"
#include "log.h"
#include "scheduler.h"
#include "validate.h"

struct region {
	/* In its connection's list from registration until it is gone or
	 * the connection closes: an unregistered region that requests still
	 * use stays listed (and counted against the connection's limits),
	 * but no request finds it. */
	struct region *next;
	struct conn *conn;      /* the owner; NULL once unlisted */
	bool unregistered;      /* the client unregistered it */
	bool unreg_failed;      /* a device's unregistration could not run */
	uint64_t id;
	void *base;
	size_t len;
	dev_t file_dev;         /* the memfd's identity: two regions of one */
	ino_t file_ino;         /* file overlap where their offsets do */
	int refs;               /* the registration, each request using it, each device job */
	int jobs;               /* device jobs not yet done */
	struct request reg;     /* the RegisterRegion, answered when the devices are done */
	bool reg_pending;
	struct request unreg;   /* the UnregisterRegion, answered when it is gone */
	bool unreg_pending;
	void *handle[STATS_MAX_DEVICES]; /* host_register's, per device */
};

struct region_job {
	struct sched_job sj; /* first: the scheduler hands this back */
	struct region *rg;
	char err[256];
	int rc;
};

uint64_t regions_id(const struct region *rg)
{
	return rg->id;
}

/* Bytes of the regions connection c holds, and how many: those
 * registered and those unregistered that its requests still use (the
 * memory stays mapped and pinned for it until they are done). */
static uint64_t conn_bytes(struct conn *c, uint32_t *count)
{
	uint64_t sum = 0;
	*count = 0;
	for (struct region *rg = *conn_regions(c); rg; rg = rg->next) {
		sum += rg->len;
		(*count)++;
	}
	return sum;
}

static void detach(struct region *rg)
{
	if (!rg->conn)
		return;
	for (struct region **pp = conn_regions(rg->conn); *pp; pp = &(*pp)->next) {
		if (*pp == rg) {
			*pp = rg->next;
			break;
		}
	}
	rg->next = NULL;
	rg->conn = NULL;
}

static void destroy(struct daemon *d, struct region *rg)
{
	if (rg->base)
		munmap(rg->base, rg->len);
	d->region_bytes -= rg->len;
	d->regions--;
	if (rg->unreg_pending) {
		reply_status(d, &rg->unreg, MFMA__V1__CODE__OK, "region %" PRIu64 " unregistered",
			     rg->id);
		request_release(d, &rg->unreg);
	}
	if (rg->reg_pending)
		request_release(d, &rg->reg);
	free(rg);
}

/* ---- device jobs (register, unregister) ---- */

static void register_work(struct device *v, struct sched_job *sj)
{
	struct region_job *j = (struct region_job *)sj;
	j->rc = v->ops->host_register(v->bdev, j->rg->base, j->rg->len, BACKEND_HOST_REGION,
				      &j->rg->handle[v->index],
				      j->err, sizeof(j->err));
	devices_fault(v, j->rc, j->err);
}

static void unregister_work(struct device *v, struct sched_job *sj)
{
	struct region_job *j = (struct region_job *)sj;
	v->ops->host_unregister(v->bdev, j->rg->handle[v->index]);
	j->rg->handle[v->index] = NULL;
}

static void answer_register(struct daemon *d, struct region *rg)
{
	Mfma__V1__Response resp = MFMA__V1__RESPONSE__INIT;
	Mfma__V1__RegisterRegionResult res = MFMA__V1__REGISTER_REGION_RESULT__INIT;
	res.has_region = res.has_bytes = 1;
	res.region = rg->id;
	res.bytes = rg->len;
	resp.body_case = MFMA__V1__RESPONSE__BODY_REGISTER_REGION;
	resp.register_region = &res;
	reply(d, &rg->reg, &resp);
	request_release(d, &rg->reg);
	rg->reg_pending = false;
}

static void register_done(struct daemon *d, struct sched_job *sj, int status)
{
	struct region_job *j = (struct region_job *)sj;
	struct region *rg = j->rg;
	/* A device that cannot register the memory still copies from it
	 * through its staging buffers: slower, not wrong. */
	if (status == 0 && j->rc < 0)
		log_info("region %" PRIu64 ": device %d copies through staging: %s", rg->id, sj->dev,
			 j->err);
	free(j);
	if (--rg->jobs == 0 && rg->reg_pending)
		answer_register(d, rg);
	regions_unref(d, rg);
}

static void unregister_done(struct daemon *d, struct sched_job *sj, int status)
{
	struct region_job *j = (struct region_job *)sj;
	struct region *rg = j->rg;
	if (status < 0)
		log_err("region %" PRIu64 ": its unregistration on device %d could not run (%s); "
			"the mapping is kept", rg->id, sj->dev, strerror(-status));
	free(j);
	rg->unreg_failed |= status < 0;
	if (--rg->jobs == 0) {
		if (rg->unreg_failed) {
			/* A device may still use the pages: keep them mapped. */
			rg->base = NULL;
		}
		destroy(d, rg);
	}
}

/* Queues one job per device that has a runtime to tell; the count of
 * those queued. */
static int submit_jobs(struct daemon *d, struct region *rg, bool unreg)
{
	int n = 0;
	for (int i = 0; i < d->ndev; i++) {
		struct device *v = &d->dev[i];
		if (!v->ops->host_register || v->open_rc < 0 || (unreg && !rg->handle[i]) ||
		    (!unreg && !devices_up(v)))
			continue;
		struct region_job *j = calloc(1, sizeof(*j));
		if (!j) {
			log_err("region %" PRIu64 ": out of memory queueing its %s on device %d", rg->id,
				unreg ? "unregistration" : "registration", i);
			if (unreg)
				rg->base = NULL; /* cannot unregister: never unmap under the device */
			continue;
		}
		j->rg = rg;
		j->sj.prio = 0;
		rg->jobs++;
		if (!unreg)
			rg->refs++;
		n++;
		sched_submit(d, i, &j->sj, unreg ? unregister_work : register_work,
			     unreg ? unregister_done : register_done);
	}
	return n;
}

void regions_unref(struct daemon *d, struct region *rg)
{
	if (--rg->refs > 0)
		return;
	detach(rg);
	if (submit_jobs(d, rg, true) == 0)
		destroy(d, rg);
}

/* ---- requests ---- */

/* Checks the descriptor and maps it: 0, or -errno with err naming what.
 * The seals are read before the size: once sealed against shrinking and
 * growing the size cannot change, where a size read first could be made
 * stale by a client that shrinks the file and then seals it (a mapping
 * past the file's end, and SIGBUS on a read there). */
static int map_fd(int fd, uint64_t want, void **base, size_t *len, struct stat *st_out,
		  char *err, size_t errlen)
{
	int seals = fcntl(fd, F_GET_SEALS);
	struct stat st;
	if (fstat(fd, &st) < 0) {
		snprintf(err, errlen, "register_region: the descriptor cannot be examined: %s",
			 strerror(errno));
		return -EINVAL;
	}
	int rc = validate_region_fd((uint32_t)st.st_mode, (uint64_t)st.st_size,
				    seals < 0 ? -1 : seals, want, err, errlen);
	if (rc < 0)
		return rc;
	void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		int e = errno;
		snprintf(err, errlen,
			 "register_region: the memfd of %" PRIu64 " bytes cannot be mapped for "
			 "reading and writing: %s%s",
			 (uint64_t)st.st_size, strerror(e),
			 e == EPERM ? " (is it sealed with F_SEAL_WRITE or F_SEAL_FUTURE_WRITE? "
				      "D is written into it)" : "");
		return -EINVAL;
	}
	*base = p;
	*len = (size_t)st.st_size;
	*st_out = st;
	return 0;
}

void regions_handle_register(struct daemon *d, const struct request *r,
			     const Mfma__V1__RegisterRegion *m)
{
	struct conn *c = r->conn;
	const struct mfmad_config *cf = &d->cfg;
	char err[400];
	int code = MFMA__V1__CODE__INVALID_ARGUMENT;
	int fd = conn_is_unix(c) ? conn_take_fd(c) : -ENOENT;
	void *base = NULL;
	size_t len = 0;
	struct stat st;
	uint32_t count;
	uint64_t held = conn_bytes(c, &count);

	if (!conn_is_unix(c)) {
		code = MFMA__V1__CODE__FAILED_PRECONDITION;
		snprintf(err, sizeof(err),
			 "register_region needs the Unix socket: a memfd cannot travel over TCP "
			 "(connect with unix:PATH on this machine, or send the matrices' bytes)");
		goto fail;
	}
	if (fd < 0) {
		snprintf(err, sizeof(err),
			 "register_region came without a file descriptor: send the sealed memfd with "
			 "SCM_RIGHTS on the frame's bytes");
		goto fail;
	}
	if (d->stopping) {
		code = MFMA__V1__CODE__UNAVAILABLE;
		snprintf(err, sizeof(err), "shutting down: not taking new requests");
		goto fail;
	}
	if (map_fd(fd, m->has_bytes ? m->bytes : 0, &base, &len, &st, err, sizeof(err)) < 0)
		goto fail;
	code = MFMA__V1__CODE__RESOURCE_EXHAUSTED;
	if (count + 1 > cf->max_regions_per_conn) {
		snprintf(err, sizeof(err),
			 "this connection holds %u region(s), counting those unregistered that its "
			 "requests still use (limits.max_regions_per_conn = %u)",
			 count, cf->max_regions_per_conn);
		goto fail;
	}
	if (held + len > cf->max_region_bytes_per_conn) {
		snprintf(err, sizeof(err),
			 "a region of %zu bytes would bring this connection's regions to %" PRIu64
			 " bytes (limits.max_region_mb_per_conn = %" PRIu64 ")",
			 len, held + len, cf->max_region_bytes_per_conn >> 20);
		goto fail;
	}
	if (d->region_bytes + len > cf->max_pinned_bytes) {
		snprintf(err, sizeof(err),
			 "a region of %zu bytes would bring every connection's regions to %" PRIu64
			 " bytes (limits.max_pinned_mb = %" PRIu64 ")",
			 len, d->region_bytes + len, cf->max_pinned_bytes >> 20);
		goto fail;
	}
	struct region *rg = calloc(1, sizeof(*rg));
	if (!rg) {
		snprintf(err, sizeof(err), "out of memory");
		goto fail;
	}
	/* The mapping keeps the memfd: its descriptor is not kept as well.
	 * Kept, max_connections x max_regions_per_conn of them outgrew the
	 * descriptor limit, which is fitted to max_connections (listen.c). */
	close(fd);
	fd = -1;
	rg->id = ++d->next_region_id;
	rg->base = base;
	rg->len = len;
	rg->file_dev = st.st_dev;
	rg->file_ino = st.st_ino;
	rg->refs = 1;
	rg->conn = c;
	rg->next = *conn_regions(c);
	*conn_regions(c) = rg;
	d->region_bytes += len;
	d->regions++;
	rg->reg = *r;
	rg->reg_pending = true;
	request_hold(d, &rg->reg);
	if (submit_jobs(d, rg, false) == 0)
		answer_register(d, rg);
	return;
fail:
	if (base)
		munmap(base, len);
	if (fd >= 0)
		close(fd);
	reply_status(d, r, code, "%s", err);
}

/* The registered region id of connection c, or NULL. */
static struct region *find(struct conn *c, uint64_t id)
{
	for (struct region *rg = *conn_regions(c); rg; rg = rg->next)
		if (rg->id == id && !rg->unregistered)
			return rg;
	return NULL;
}

void regions_handle_unregister(struct daemon *d, const struct request *r,
			       const Mfma__V1__UnregisterRegion *m)
{
	struct region *rg = find(r->conn, m->region);
	if (!rg) {
		reply_status(d, r, MFMA__V1__CODE__NOT_FOUND,
			     "region=%" PRIu64 " is not registered on this connection", m->region);
		return;
	}
	/* Listed until it is gone: the connection's limits count it while
	 * its requests still use it. */
	rg->unregistered = true;
	rg->unreg = *r;
	rg->unreg_pending = true;
	request_hold(d, &rg->unreg);
	regions_unref(d, rg);
}

int regions_use(struct conn *c, const Mfma__V1__RegionRef *ref, uint64_t need,
		const char *field, struct region **out, void **p, char *err, size_t errlen)
{
	struct region *rg = find(c, ref->region);
	if (!rg) {
		snprintf(err, errlen, "%s.region=%" PRIu64 " is not registered on this connection",
			 field, ref->region);
		return -ENOENT;
	}
	int rc = validate_region_span(rg->len, ref->offset, ref->has_length, ref->length, need,
				      field, ref->region, err, errlen);
	if (rc < 0)
		return rc;
	rg->refs++;
	*out = rg;
	*p = (char *)rg->base + ref->offset;
	return 0;
}

bool regions_overlap(const struct region *ra, const void *a, size_t alen, const struct region *rb,
		     const void *b, size_t blen)
{
	/* By the file and the offset in it: two regions of one memfd (the
	 * same descriptor sent twice, or a dup of it) share their pages. */
	if (!ra || !rb || ra->file_dev != rb->file_dev || ra->file_ino != rb->file_ino)
		return false;
	uintptr_t x = (uintptr_t)a - (uintptr_t)ra->base, y = (uintptr_t)b - (uintptr_t)rb->base;
	return x < y + blen && y < x + alen;
}

void regions_conn_closed(struct daemon *d, struct conn *c)
{
	struct region *rg;
	while ((rg = *conn_regions(c)) != NULL) {
		/* An unregistered one's registration was let go already. */
		const bool registered = !rg->unregistered;
		detach(rg);
		if (registered)
			regions_unref(d, rg);
	}
}
