/* Reader threads; readers.h says what they do. */
#include "readers.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mfma_clock.h"
#include "thread_name.h"

struct readers {
	uv_async_t async;        /* first: the handle's memory is the pool's */
	/* Two locks, so that the loop taking finished jobs and the readers
	 * taking new ones do not wait for each other. */
	pthread_mutex_t mu;      /* the jobs waiting for a reader, stop */
	pthread_cond_t cv;
	struct reader_job *head, *tail;
	pthread_mutex_t done_mu; /* the jobs waiting for the loop */
	struct reader_job *done_head, *done_tail;
	atomic_bool stop;
	unsigned pending;        /* loop: submitted, done not yet run */
	unsigned nthreads;
	pthread_t *threads;
};

/* Appends j to a list kept as head and tail. */
static void list_push(struct reader_job **head, struct reader_job **tail, struct reader_job *j)
{
	j->next = NULL;
	if (*tail)
		(*tail)->next = j;
	else
		*head = j;
	*tail = j;
}

/* Closes the descriptors a control message carried. */
static void close_passed(struct msghdr *mh)
{
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		const int *fds = (const int *)CMSG_DATA(cm);
		for (size_t i = 0; i < n; i++)
			close(fds[i]);
	}
}

/* One non-blocking read into the job.  On a Unix socket the read takes
 * control messages too: a descriptor can only belong to a frame that is
 * read on the loop (conn.c), so one here is closed and ends the job. */
static ssize_t read_some(struct reader_job *j)
{
	void *p = j->dst + j->got;
	size_t len = j->need - j->got;
	if (!j->unix_fds)
		return recv(j->fd, p, len, MSG_DONTWAIT);
	union {
		char buf[CMSG_SPACE(8 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = p, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			     .msg_controllen = sizeof(ctl.buf) };
	ssize_t n = recvmsg(j->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n >= 0 && (mh.msg_controllen > 0 || (mh.msg_flags & MSG_CTRUNC))) {
		close_passed(&mh);
		errno = EPROTO;
		return -1;
	}
	return n;
}

/* Reads the job's bytes: 0, or the status readers.h lists. */
static int read_job(struct readers *r, struct reader_job *j)
{
	uint64_t waited_ns = 0, budget_ns = READERS_WAIT_MS * 1000000ull;
	while (j->got < j->need) {
		ssize_t n = read_some(j);
		if (n > 0) {
			j->got += (size_t)n;
			continue;
		}
		if (n == 0)
			return -EPIPE;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		if (waited_ns >= budget_ns)
			return -EAGAIN;
		if (atomic_load(&r->stop) || atomic_load(&j->cancel))
			return -ECANCELED;
		/* Whole milliseconds, at least one: the budget is a bound, not
		 * a deadline to the microsecond. */
		int ms = (int)((budget_ns - waited_ns + 999999) / 1000000);
		struct pollfd pfd = { .fd = j->fd, .events = POLLIN };
		uint64_t t0 = mfma_clock_ns();
		int rc = poll(&pfd, 1, ms);
		waited_ns += mfma_clock_ns() - t0;
		if (rc < 0 && errno != EINTR)
			return -errno;
	}
	return 0;
}

static void *reader_main(void *arg)
{
	struct readers *r = arg;
	for (;;) {
		pthread_mutex_lock(&r->mu);
		while (!r->head && !r->stop)
			pthread_cond_wait(&r->cv, &r->mu);
		struct reader_job *j = r->head;
		if (!j) {
			pthread_mutex_unlock(&r->mu);
			return NULL;
		}
		r->head = j->next;
		if (!r->head)
			r->tail = NULL;
		bool stop = r->stop;
		pthread_mutex_unlock(&r->mu);

		j->status = stop || atomic_load(&j->cancel) ? -ECANCELED : read_job(r, j);
		if (j->status == 0)
			j->run(j);

		pthread_mutex_lock(&r->done_mu);
		list_push(&r->done_head, &r->done_tail, j);
		pthread_mutex_unlock(&r->done_mu);
		uv_async_send(&r->async);
	}
}

/* Loop: runs the done callbacks of the jobs finished, in the order they
 * finished. */
static void drain(struct readers *r)
{
	pthread_mutex_lock(&r->done_mu);
	struct reader_job *j = r->done_head;
	r->done_head = r->done_tail = NULL;
	pthread_mutex_unlock(&r->done_mu);
	while (j) {
		struct reader_job *next = j->next;
		r->pending--;
		j->done(j);
		j = next;
	}
}

static void on_async(uv_async_t *a)
{
	drain(a->data);
}

struct start_arg {
	struct readers *r;
	unsigned index;
};

static void *reader_start(void *arg)
{
	struct start_arg *sa = arg;
	struct readers *r = sa->r;
	thread_name("mfmad-read%u", sa->index);
	free(sa);
	return reader_main(r);
}

int readers_start(uv_loop_t *loop, unsigned n, struct readers **out)
{
	*out = NULL;
	if (n == 0)
		return 0;
	struct readers *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->threads = calloc(n, sizeof(*r->threads));
	int rc = r->threads ? uv_async_init(loop, &r->async, on_async) : -ENOMEM;
	if (rc < 0) {
		free(r->threads);
		free(r);
		return rc;
	}
	r->async.data = r;
	/* The pool never keeps the loop alive: connections do. */
	uv_unref((uv_handle_t *)&r->async);
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	pthread_mutex_init(&r->done_mu, NULL);
	*out = r;
	for (unsigned i = 0; i < n; i++) {
		struct start_arg *sa = malloc(sizeof(*sa));
		if (!sa)
			return -ENOMEM;
		*sa = (struct start_arg){ r, i };
		if (pthread_create(&r->threads[i], NULL, reader_start, sa) != 0) {
			free(sa);
			return -EAGAIN;
		}
		r->nthreads++;
	}
	return 0;
}

void readers_submit(struct readers *r, struct reader_job *j)
{
	j->got = 0;
	j->status = 0;
	atomic_store(&j->cancel, false);
	r->pending++;
	if (atomic_load(&r->stop)) {
		j->status = -ECANCELED;
		pthread_mutex_lock(&r->done_mu);
		list_push(&r->done_head, &r->done_tail, j);
		pthread_mutex_unlock(&r->done_mu);
		uv_async_send(&r->async);
		return;
	}
	pthread_mutex_lock(&r->mu);
	list_push(&r->head, &r->tail, j);
	pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

void readers_cancel(struct reader_job *j)
{
	atomic_store(&j->cancel, true);
}

unsigned readers_pending(const struct readers *r)
{
	return r ? r->pending : 0;
}

void readers_stop(struct readers *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->mu);
	atomic_store(&r->stop, true);
	/* Jobs no reader took end here; those a reader holds end within
	 * READERS_WAIT_MS, or at once when they are between two reads. */
	struct reader_job *left = r->head;
	r->head = r->tail = NULL;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
	pthread_mutex_lock(&r->done_mu);
	while (left) {
		struct reader_job *j = left;
		left = j->next;
		j->status = -ECANCELED;
		list_push(&r->done_head, &r->done_tail, j);
	}
	pthread_mutex_unlock(&r->done_mu);
	for (unsigned i = 0; i < r->nthreads; i++)
		pthread_join(r->threads[i], NULL);
	r->nthreads = 0;
	drain(r);
}

void readers_free(struct readers *r)
{
	if (!r)
		return;
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->cv);
	pthread_mutex_destroy(&r->done_mu);
	free(r->threads);
	free(r);
}
