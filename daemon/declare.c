#include "declare.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "log.h"
#include "npy.h"
#include "weights.h"
#include "weights_store.h"

/* What says a file changed: the same path may be a new file (renamed in
 * place) or the same file rewritten. */
struct file_id {
	uint64_t dev, ino, size;
	int64_t mtime_ns;
};

struct declared {
	struct declared *next;
	struct daemon *d;
	struct weight_decl decl;          /* what the work reads; fixed while busy */
	Mfma__V1__DeclaredWeight__State state;
	char msg[1024];                   /* why it failed */
	struct file_id id;                /* of the file now resident */
	bool busy;                        /* a read or a load is under way */
	bool removed;                     /* no longer declared: freed when not busy */
	bool made_resident;               /* the work's load made the weight resident */
	bool owns;                        /* a load of it made the name's weight */
	bool again;                       /* reloaded while busy: next_decl, once done */
	bool blocked;                     /* waits: another load held the name */
	struct weight_decl next_decl;

	/* The threadpool's part: in force, max_bytes and the previous id; out
	 * the request, or rc and msg, or unchanged. */
	uv_work_t work;
	bool force;
	uint64_t max_bytes;
	struct file_id work_id;
	bool unchanged;
	int rc;
	char work_msg[1024];
	Mfma__V1__Request *req;
};

static struct declared **head(struct daemon *d)
{
	return (struct declared **)&d->declared;
}

static void update_pending(struct daemon *d)
{
	uint64_t n = 0;
	for (struct declared *e = *head(d); e; e = e->next)
		n += e->state != MFMA__V1__DECLARED_WEIGHT__STATE__RESIDENT;
	atomic_store(&d->stats.declared_pending, n);
}

static const char *sparse_word(int sparsity)
{
	return sparsity == MFMA__V1__SPARSITY__PRUNE_24      ? "prune"
	       : sparsity == MFMA__V1__SPARSITY__VALIDATE_24 ? "validate"
							     : "none";
}

/* The declaration's LoadWeight (weights_load_request), taking m's buffer.
 * NULL when out of memory (m is then freed). */
static Mfma__V1__Request *build_request(const struct weight_decl *w, struct npy_matrix *m)
{
	/* npy_decode leaves the data at the start of its allocation. */
	Mfma__V1__Request *req = weights_load_request(w->name, m->rows, m->cols, m->dtype, m->alloc,
						      m->bytes, NULL, 0);
	if (!req) {
		npy_matrix_free(m);
		return NULL;
	}
	m->alloc = m->data = NULL;
	Mfma__V1__LoadWeight *lw = req->load_weight;
	lw->a->has_sparsity = 1;
	lw->a->sparsity = (Mfma__V1__Sparsity)w->sparsity;
	lw->has_device = 1;
	lw->device = w->device;
	/* A declaration replaces whatever holds its name (the declaration
	 * wins); with nothing there a replace is a plain load. */
	lw->has_replace = lw->replace = 1;
	return req;
}

/* Threadpool: stat, and unless the file is the one already resident, read
 * and decode it into a LoadWeight. */
static void read_work(uv_work_t *wk)
{
	struct declared *e = wk->data;
	const struct weight_decl *w = &e->decl;
	struct stat st;
	char err[400];
	e->req = NULL;
	e->rc = 0;
	e->unchanged = false;
	if (stat(w->file, &st) < 0) {
		e->rc = -errno;
		snprintf(e->work_msg, sizeof(e->work_msg), "weights.declare '%s': %s: %s", w->name,
			 w->file, strerror(errno));
		return;
	}
	struct file_id id = {
		.dev = (uint64_t)st.st_dev, .ino = (uint64_t)st.st_ino, .size = (uint64_t)st.st_size,
		.mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec,
	};
	e->work_id = id;
	if (!e->force && memcmp(&id, &e->id, sizeof(id)) == 0) {
		e->unchanged = true;
		return;
	}
	/* The whole file is held while it is prepared: it must fit the
	 * daemon's memory ceiling before a byte is read. */
	struct npy_matrix m;
	int rc = npy_read(w->file, (enum mfma_dtype)w->dtype, true, e->max_bytes, &m, err,
			  sizeof(err));
	if (rc < 0) {
		e->rc = rc;
		snprintf(e->work_msg, sizeof(e->work_msg), "weights.declare '%s': %s%s", w->name, err,
			 rc == -EFBIG ? " (limits.max_memory_mb)" : "");
		return;
	}
	if (!(e->req = build_request(w, &m))) {
		e->rc = -ENOMEM;
		snprintf(e->work_msg, sizeof(e->work_msg), "weights.declare '%s': out of memory",
			 w->name);
	}
}

static void start(struct declared *e, bool force);

static void set_failed(struct declared *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void set_failed(struct declared *e, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	e->state = MFMA__V1__DECLARED_WEIGHT__STATE__FAILED;
	if (weights_find(e->d, e->decl.name)) {
		size_t n = strlen(e->msg);
		snprintf(e->msg + n, sizeof(e->msg) - n, "; the previous version still serves");
	}
	/* Logged once per attempt: a reload retries, and says so again. */
	log_err("%s", e->msg);
}

/* The work on this declaration is over: the next step, if any. */
static void settle(struct declared *e)
{
	struct daemon *d = e->d;
	e->busy = false;
	if (e->removed) {
		bool declared_again = false;
		for (uint32_t i = 0; i < d->cfg.ndeclared; i++)
			declared_again |= strcmp(d->cfg.declared[i].name, e->decl.name) == 0;
		/* A load that finished after its declaration went: undo it,
		 * unless the name is declared again (a newer entry owns it).
		 * Only what this work loaded: the version resident before went
		 * with the declaration, and the name may be a client's now. */
		if (e->made_resident && !declared_again && !d->stopping)
			weights_unload_internal(d, e->decl.name);
		struct declared *now = *head(d);
		while (now && strcmp(now->decl.name, e->decl.name) != 0)
			now = now->next;
		/* Kept for the entry declared again: the weight is a
		 * declaration's, and goes when that one is removed. */
		if (e->made_resident && now)
			now->owns = true;
		free(e);
		return;
	}
	if (e->again && !d->stopping) {
		e->again = false;
		e->decl = e->next_decl;
		start(e, true);
	}
	update_pending(d);
}

static void loaded(struct daemon *d, void *arg, int code, const char *msg)
{
	struct declared *e = arg;
	e->made_resident = code == MFMA__V1__CODE__OK;
	e->owns |= e->made_resident;
	if (code == MFMA__V1__CODE__OK) {
		char dir[400];
		e->state = MFMA__V1__DECLARED_WEIGHT__STATE__RESIDENT;
		e->msg[0] = '\0';
		e->id = e->work_id;
		log_info("declared weight '%s' resident from %s", e->decl.name, e->decl.file);
		/* A stored copy of a client's weight of this name is stale now. */
		if (wstore_dir(d, dir, sizeof(dir)))
			wstore_remove(dir, e->decl.name);
	} else {
		set_failed(e, "weights.declare '%s' (%s): %s", e->decl.name, e->decl.file, msg);
	}
	settle(e);
}

static void read_done(uv_work_t *wk, int status)
{
	struct declared *e = wk->data;
	struct daemon *d = e->d;
	if (status < 0 && !e->rc) {
		e->rc = status;
		snprintf(e->work_msg, sizeof(e->work_msg), "weights.declare '%s': the read could not "
			 "run: %s", e->decl.name, uv_strerror(status));
	}
	if (e->removed || d->stopping) {
		if (e->req)
			mfma__v1__request__free_unpacked(e->req, NULL);
		e->req = NULL;
		settle(e);
		return;
	}
	if (e->unchanged) {
		/* The file is the one resident; a weight that went missing
		 * (it cannot be unloaded by a client) is loaded again. */
		if (!weights_find(d, e->decl.name)) {
			e->busy = false;
			start(e, true);
			return;
		}
		settle(e);
		return;
	}
	if (e->rc < 0) {
		set_failed(e, "%s", e->work_msg);
		settle(e);
		return;
	}
	Mfma__V1__Request *req = e->req;
	e->req = NULL;
	/* Another load holds the name: a removed entry's work, or a client's
	 * begun before the name was declared.  This one waits for it to end
	 * (load_over) and reads the file again then. */
	if (weights_load_under_way(d, e->decl.name)) {
		mfma__v1__request__free_unpacked(req, NULL);
		e->blocked = true;
		snprintf(e->msg, sizeof(e->msg), "waiting for the load of weight '%s' under way",
			 e->decl.name);
		log_info("declared weight '%s': waits for the load of that name under way",
			 e->decl.name);
		settle(e);
		return;
	}
	log_info("declared weight '%s': loading %s (sparse %s)", e->decl.name, e->decl.file,
		 sparse_word(e->decl.sparsity));
	weights_load_internal(d, req, loaded, e);
}

/* Reads the file (when force, or when it changed) and loads it. */
static void start(struct declared *e, bool force)
{
	struct daemon *d = e->d;
	e->busy = true;
	e->made_resident = false;
	e->force = force;
	e->max_bytes = d->cfg.max_memory_bytes;
	if (force && e->state != MFMA__V1__DECLARED_WEIGHT__STATE__RESIDENT) {
		e->state = MFMA__V1__DECLARED_WEIGHT__STATE__LOADING;
		e->msg[0] = '\0';
	}
	e->work.data = e;
	int rc = uv_queue_work(d->loop, &e->work, read_work, read_done);
	if (rc < 0) {
		set_failed(e, "weights.declare '%s': cannot queue the read: %s", e->decl.name,
			   uv_strerror(rc));
		e->busy = false;
	}
	update_pending(d);
}

/* d->load_over: a load of name has ended.  A declaration refused while
 * that load held the name loads now, rather than stay failed until the
 * next reload. */
static void load_over(struct daemon *d, const char *name)
{
	struct declared *e = *head(d);
	while (e && strcmp(e->decl.name, name) != 0)
		e = e->next;
	if (e && e->blocked && !e->busy && !d->stopping && !weights_load_under_way(d, name)) {
		e->blocked = false;
		log_info("declared weight '%s': the load that held the name is over", name);
		start(e, true);
	}
}

void declare_apply(struct daemon *d)
{
	d->load_over = load_over;
	struct mfmad_config *c = &d->cfg;
	/* Removed declarations first, so that their names are free. */
	for (struct declared **p = head(d); *p;) {
		struct declared *e = *p;
		bool kept = false;
		for (uint32_t i = 0; i < c->ndeclared && !kept; i++)
			kept = strcmp(c->declared[i].name, e->decl.name) == 0;
		if (kept) {
			p = &e->next;
			continue;
		}
		*p = e->next;
		/* Only a weight the declaration made goes: one that never
		 * became resident leaves the name's weight as it found it (a
		 * client's, loaded before the name was declared). */
		if (e->owns) {
			log_notice("weight '%s' is no longer declared: unloading it", e->decl.name);
			weights_unload_internal(d, e->decl.name);
		} else {
			log_notice("weight '%s' is no longer declared (it never became resident)",
				   e->decl.name);
		}
		if (e->busy) {
			/* A client may load the name once it is no longer declared;
			 * settle() undoes what the work under way makes, and frees. */
			e->removed = true;
			continue;
		}
		free(e);
	}
	for (uint32_t i = 0; i < c->ndeclared; i++) {
		const struct weight_decl *w = &c->declared[i];
		struct declared *e = *head(d);
		while (e && strcmp(e->decl.name, w->name) != 0)
			e = e->next;
		if (!e) {
			if (!(e = calloc(1, sizeof(*e)))) {
				log_err("weights.declare '%s': out of memory", w->name);
				continue;
			}
			e->d = d;
			e->decl = *w;
			e->state = MFMA__V1__DECLARED_WEIGHT__STATE__LOADING;
			e->next = *head(d);
			*head(d) = e;
			start(e, true);
			continue;
		}
		bool changed = memcmp(&e->decl, w, sizeof(*w)) != 0;
		if (e->busy) {
			e->next_decl = *w;
			e->again = true;
			continue;
		}
		e->decl = *w;
		/* Unchanged and resident: the work only looks at the file. */
		start(e, changed || e->state != MFMA__V1__DECLARED_WEIGHT__STATE__RESIDENT);
	}
	update_pending(d);
}

static bool any_busy(const struct daemon *d)
{
	for (const struct declared *e = d->declared; e; e = e->next)
		if (e->busy)
			return true;
	return false;
}

void declare_wait(struct daemon *d)
{
	uint64_t n = 0, failed = 0;
	while (any_busy(d))
		uv_run(d->loop, UV_RUN_ONCE);
	for (const struct declared *e = d->declared; e; e = e->next) {
		n++;
		failed += e->state != MFMA__V1__DECLARED_WEIGHT__STATE__RESIDENT;
	}
	if (n)
		log_notice("declared weights: %" PRIu64 " of %" PRIu64 " resident%s", n - failed, n,
			   failed ? "; not ready until the others are (see above, and mfmactl status)"
				  : "");
}

int declare_list(const struct daemon *d, struct declare_list *l)
{
	size_t n = 0;
	for (const struct declared *e = d->declared; e; e = e->next)
		n++;
	memset(l, 0, sizeof(*l));
	l->info = calloc(n ? n : 1, sizeof(*l->info));
	l->ptrs = calloc(n ? n : 1, sizeof(*l->ptrs));
	if (!l->info || !l->ptrs) {
		declare_list_free(l);
		return -ENOMEM;
	}
	/* In the configuration's order, which is how an operator reads it. */
	for (uint32_t i = 0; i < d->cfg.ndeclared; i++) {
		const struct declared *e = d->declared;
		while (e && strcmp(e->decl.name, d->cfg.declared[i].name) != 0)
			e = e->next;
		if (!e || l->n == n)
			continue;
		Mfma__V1__DeclaredWeight *x = &l->info[l->n];
		mfma__v1__declared_weight__init(x);
		x->name = (char *)e->decl.name;
		x->file = (char *)e->decl.file;
		x->has_state = 1;
		x->state = e->state;
		if (e->msg[0])
			x->message = (char *)e->msg;
		l->ptrs[l->n] = x;
		l->n++;
	}
	return 0;
}

void declare_list_free(struct declare_list *l)
{
	free(l->info);
	free(l->ptrs);
	memset(l, 0, sizeof(*l));
}

void declare_free(struct daemon *d)
{
	struct declared *e = d->declared;
	while (e) {
		struct declared *next = e->next;
		if (e->req)
			mfma__v1__request__free_unpacked(e->req, NULL);
		free(e);
		e = next;
	}
	d->declared = NULL;
}
