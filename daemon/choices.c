#include "choices.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "choice_cache.h"
#include "log.h"

struct choices {
	struct daemon *d;
	struct backend_choices hook;
	char path[300];

	pthread_mutex_t mu;         /* guards cache, dirty, dropped, the note */
	struct choice_cache cache;
	bool dirty;                 /* a choice not yet written */
	uint64_t dropped;           /* choices dropped for room, not yet logged */
	/* The first lookup that missed because the file's choice for that
	 * shape was measured under another device key: logged once a run. */
	bool noted, note_pending;
	char note_other[sizeof(((struct backend_choice_key *)0)->device)];
	char note_mine[sizeof(((struct backend_choice_key *)0)->device)];

	uv_async_t async;           /* a worker kept a choice: write the file */
	uv_work_t work;
	bool writing;               /* loop: work is queued */
	char *text;                 /* the text work writes */
	size_t len;
	int write_rc;
	char write_err[340];
};

static int hook_get(void *arg, const struct backend_choice_key *key, char *order, size_t len)
{
	struct choices *c = arg;
	pthread_mutex_lock(&c->mu);
	const char *o = choice_cache_get(&c->cache, key);
	int rc = o && strlen(o) < len ? 0 : -ENOENT;
	if (rc == 0)
		snprintf(order, len, "%s", o);
	const char *other = rc < 0 && !c->noted ? choice_cache_other_device(&c->cache, key) : NULL;
	if (other) {
		snprintf(c->note_other, sizeof(c->note_other), "%s", other);
		snprintf(c->note_mine, sizeof(c->note_mine), "%s", key->device);
		c->noted = c->note_pending = true;
	}
	pthread_mutex_unlock(&c->mu);
	if (other)
		uv_async_send(&c->async);
	return rc;
}

static void hook_put(void *arg, const struct backend_choice_key *key, const char *order)
{
	struct choices *c = arg;
	pthread_mutex_lock(&c->mu);
	const char *o = choice_cache_get(&c->cache, key);
	bool changed = !o || strcmp(o, order) != 0;
	if (changed) {
		int rc = choice_cache_put(&c->cache, key, order);
		if (rc == 1)
			c->dropped++;
		changed = rc >= 0;
		c->dirty = c->dirty || changed;
	}
	pthread_mutex_unlock(&c->mu);
	if (changed)
		uv_async_send(&c->async);
}

/* Threadpool: the text to PATH.tmp, then over PATH, so that a crash
 * leaves the old file or the new one. */
static void write_work(uv_work_t *w)
{
	struct choices *c = w->data;
	char tmp[sizeof(c->path) + 8];
	snprintf(tmp, sizeof(tmp), "%s.tmp", c->path);
	c->write_rc = 0;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
	if (fd < 0) {
		c->write_rc = -errno;
		snprintf(c->write_err, sizeof(c->write_err), "open %s", tmp);
		return;
	}
	size_t off = 0;
	while (off < c->len) {
		ssize_t n = write(fd, c->text + off, c->len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			c->write_rc = n < 0 ? -errno : -EIO;
			break;
		}
		off += (size_t)n;
	}
	if (c->write_rc == 0 && fsync(fd) < 0)
		c->write_rc = -errno;
	if (close(fd) < 0 && c->write_rc == 0)
		c->write_rc = -errno;
	if (c->write_rc == 0 && rename(tmp, c->path) < 0)
		c->write_rc = -errno;
	if (c->write_rc < 0) {
		snprintf(c->write_err, sizeof(c->write_err), "writing %s", tmp);
		(void)unlink(tmp);
	}
}

static void write_done(uv_work_t *w, int status);

/* Loop: logs what the workers noted, then takes the table's text and
 * queues its write, unless one is on its way (its end starts the next). */
static void flush(struct choices *c)
{
	char other[sizeof(c->note_other)] = "", mine[sizeof(c->note_mine)] = "";
	uint64_t dropped = 0;
	bool dirty = false;
	size_t need = 0;
	char *text = NULL;
	pthread_mutex_lock(&c->mu);
	if (c->note_pending) {
		memcpy(other, c->note_other, sizeof(other));
		memcpy(mine, c->note_mine, sizeof(mine));
		c->note_pending = false;
	}
	if (!c->writing) {
		dropped = c->dropped;
		c->dropped = 0;
		dirty = c->dirty;
		need = dirty ? choice_cache_format(&c->cache, NULL, 0) : 0;
		text = dirty ? malloc(need + 1) : NULL;
		if (text) {
			choice_cache_format(&c->cache, text, need + 1);
			c->dirty = false;
		}
	}
	pthread_mutex_unlock(&c->mu);
	if (other[0])
		log_notice("choices: the cached choices were measured on \"%s\", this device is \"%s\" "
			   "(another GPU, driver, mfmad, build of its kernels or library version): measuring "
			   "again (said once)",
			   other, mine);
	if (dropped)
		log_notice("choices: %llu measured choice(s) dropped for room (the cache keeps at "
			   "most %d)", (unsigned long long)dropped, CHOICE_CACHE_MAX);
	if (!dirty)
		return;
	if (!text) {
		log_warn("choices: out of memory writing %s; left for the next choice", c->path);
		return;
	}
	c->text = text;
	c->len = need;
	c->work.data = c;
	int rc = uv_queue_work(c->d->loop, &c->work, write_work, write_done);
	if (rc < 0) {
		log_warn("choices: cannot queue the write of %s: %s", c->path, uv_strerror(rc));
		free(text);
		c->text = NULL;
		return;
	}
	c->writing = true;
}

static void write_done(uv_work_t *w, int status)
{
	struct choices *c = w->data;
	(void)status;
	c->writing = false;
	if (c->write_rc < 0)
		log_warn("choices: %s: %s", c->write_err, strerror(-c->write_rc));
	else
		log_debug("choices: %zu bytes written to %s", c->len, c->path);
	free(c->text);
	c->text = NULL;
	flush(c);
}

static void on_async(uv_async_t *a)
{
	flush(a->data);
}

/* Loop, at start: the file, if any, into the cache. */
static void read_file(struct choices *c)
{
	int fd = open(c->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (errno != ENOENT)
			log_warn("choices: cannot open %s: %s; measuring again", c->path,
				 strerror(errno));
		return;
	}
	struct stat st;
	char *text = NULL;
	if (fstat(fd, &st) < 0 || st.st_size < 0 || (uint64_t)st.st_size > CHOICE_FILE_MAX) {
		log_warn("choices: %s is ignored: larger than %u bytes (or unreadable)", c->path,
			 CHOICE_FILE_MAX);
		goto out;
	}
	size_t len = (size_t)st.st_size, off = 0;
	text = malloc(len ? len : 1);
	if (!text)
		goto out;
	while (off < len) {
		ssize_t n = read(fd, text + off, len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		off += (size_t)n;
	}
	char err[256];
	if (choice_cache_parse(&c->cache, text, off, err, sizeof(err)) < 0)
		log_warn("choices: %s is ignored (%s); the choices will be measured again",
			 c->path, err);
	else
		log_info("choices: %zu measured choice(s) read from %s", c->cache.n, c->path);
out:
	free(text);
	close(fd);
}

int choices_start(struct daemon *d)
{
	char dir[256];
	if (!config_state_dir(&d->cfg, dir, sizeof(dir)))
		return 0;
	struct choices *c = calloc(1, sizeof(*c));
	if (!c || choice_cache_init(&c->cache, 0) < 0) {
		free(c);
		return -ENOMEM;
	}
	c->d = d;
	snprintf(c->path, sizeof(c->path), "%s/choices", dir);
	pthread_mutex_init(&c->mu, NULL);
	int rc = uv_async_init(d->loop, &c->async, on_async);
	if (rc < 0) {
		choice_cache_free(&c->cache);
		pthread_mutex_destroy(&c->mu);
		free(c);
		return rc;
	}
	c->async.data = c;
	c->hook = (struct backend_choices){ .get = hook_get, .put = hook_put, .arg = c };
	read_file(c);
	d->choices = c;
	return 0;
}

const struct backend_choices *choices_hook(const struct daemon *d)
{
	return d->choices ? &d->choices->hook : NULL;
}

void choices_free(struct daemon *d)
{
	struct choices *c = d->choices;
	if (!c)
		return;
	/* The loop has run out: no write is in flight.  What the last
	 * measurements added goes to the file now, on this thread. */
	if (c->dirty) {
		size_t need = choice_cache_format(&c->cache, NULL, 0);
		c->text = malloc(need + 1);
		if (c->text) {
			choice_cache_format(&c->cache, c->text, need + 1);
			c->len = need;
			write_work(&(uv_work_t){ .data = c });
			if (c->write_rc < 0)
				log_warn("choices: %s: %s", c->write_err, strerror(-c->write_rc));
			free(c->text);
		}
	}
	choice_cache_free(&c->cache);
	pthread_mutex_destroy(&c->mu);
	free(c);
	d->choices = NULL;
}
