#include "listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/un.h>
#include <unistd.h>

#include "conn.h"
#include "endpoint.h"
#include "log.h"
#include "tls.h"
#include "mfmad_build.h"
#if MFMAD_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

struct listener {
	union {
		uv_pipe_t pipe;
		uv_tcp_t tcp;
		uv_stream_t stream;
		uv_handle_t handle;
	} h;
	struct daemon *d;
	const struct conn_events *ev;
	char what[160];
	bool activated; /* inherited from systemd: do not unlink the path */
	char path[108];
	struct conn_policy pol;
};

#define TOKEN_MIN 16
#define TOKEN_MAX 512
#define UIDS_MAX 32

struct listeners {
	struct listener l[LISTEN_MAX];
	int n;
	/* What every listener of a kind asks of its peers (listen.token_file,
	 * listen.unix_users, listen.unix_group), resolved at start. */
	uint8_t token[TOKEN_MAX];
	size_t token_len;
	/* listen.tls_cert/tls_key/tls_client_ca: every TCP listener's TLS;
	 * replaced on SIGHUP, while sessions keep the context they began with. */
	struct tls_ctx *tls;
	bool tls_client_certs;
	uint32_t uids[UIDS_MAX];
	size_t nuids;
	bool has_gid;
	uint32_t gid;
};

static void policy_unix(struct daemon *d, struct listener *l)
{
	struct listeners *ls = d->listeners;
	l->pol = (struct conn_policy){ .check_peer = ls->nuids > 0 || ls->has_gid,
				       .uids = ls->uids,
				       .nuids = ls->nuids,
				       .has_gid = ls->has_gid,
				       .gid = ls->gid };
}

/* A TCP listener: the token when there is one, and without one only a
 * loopback address (a remote peer would be unauthenticated). */
static int policy_tcp(struct daemon *d, struct listener *l, const struct sockaddr *sa, char *err,
		      size_t errlen);

/* Reads listen.token_file (path) into token (TOKEN_MAX bytes) and *len:
 * its first line is the token.  A token shorter than TOKEN_MIN bytes or a
 * file others may read is refused (token is then untouched).  An empty
 * path is no token: 0 with *len 0. */
static int read_token(const char *path, uint8_t *out, size_t *out_len, char *err, size_t errlen)
{
	uint8_t token[TOKEN_MAX];
	*out_len = 0;
	if (!path[0])
		return 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		snprintf(err, errlen, "listen.token_file = \"%s\": %s", path, strerror(e));
		return -e;
	}
	if (st.st_mode & 0007) {
		close(fd);
		snprintf(err, errlen,
			 "listen.token_file = \"%s\" may be read by any user (mode %04o); "
			 "chmod o-rwx it",
			 path, (unsigned)(st.st_mode & 07777));
		return -EPERM;
	}
	ssize_t n = read(fd, token, sizeof(token));
	close(fd);
	size_t len = n > 0 ? (size_t)n : 0;
	for (size_t i = 0; i < len; i++)
		if (token[i] == '\n' || token[i] == '\r')
			len = i;
	if (len < TOKEN_MIN || len == sizeof(token)) {
		explicit_bzero(token, sizeof(token));
		snprintf(err, errlen,
			 "listen.token_file = \"%s\": the token (its first line) must be %d to %d "
			 "bytes, not %zu",
			 path, TOKEN_MIN, TOKEN_MAX - 1, len);
		return -EINVAL;
	}
	memcpy(out, token, len);
	explicit_bzero(token, sizeof(token));
	*out_len = len;
	return 0;
}

/* Makes the TLS context of listen.tls_cert/tls_key/tls_client_ca (none
 * when tls_cert is ""); a file that cannot be used leaves ls as it was. */
static int load_tls(struct listeners *ls, const struct mfmad_config *cf, char *err, size_t errlen)
{
	if (!cf->tls_cert[0])
		return 0;
	struct tls_ctx *t;
	char why[400];
	int rc = tls_ctx_server(cf->tls_cert, cf->tls_key, cf->tls_client_ca, &t, why, sizeof(why));
	if (rc < 0) {
		snprintf(err, errlen, "listen.tls_cert/tls_key/tls_client_ca: %s", why);
		return rc;
	}
	tls_ctx_free(ls->tls);
	ls->tls = t;
	ls->tls_client_certs = cf->tls_client_ca[0] != '\0';
	return 0;
}

/* Whether the IDs of /proc/self/uid_map or gid_map (`file`) are the host's
 * own: no user namespace, or one that maps them all to themselves.  An
 * unreadable file (no /proc) counts as the host's. */
static bool ids_are_the_hosts(const char *file)
{
	FILE *f = fopen(file, "r");
	if (!f)
		return true;
	unsigned long inside, outside, count;
	bool host = fscanf(f, "%lu %lu %lu", &inside, &outside, &count) == 3 && inside == 0 &&
		    outside == 0 && count == 4294967295ul;
	fclose(f);
	return host;
}

/* Resolves listen.unix_users ("alice,1001") and listen.unix_group. */
static int load_peers(struct daemon *d, char *err, size_t errlen)
{
	/* The kernel gives a peer's credentials in the daemon's user
	 * namespace: one that does not map every ID (systemd's
	 * PrivateUsers=true, a rootless container) shows other users and
	 * groups as 65534, and the checks would refuse them, or let all of
	 * them in as "nobody". */
	if ((d->cfg.unix_users[0] || d->cfg.unix_group[0]) &&
	    (!ids_are_the_hosts("/proc/self/uid_map") || !ids_are_the_hosts("/proc/self/gid_map"))) {
		snprintf(err, errlen, "listen.unix_users and listen.unix_group check a client's user "
			 "and group IDs, but mfmad runs in a user namespace that does not map them "
			 "(/proc/self/uid_map): other users would all read as 65534.  Run it in the "
			 "host's (systemd: PrivateUsers=false) or leave both unset");
		return -EPERM;
	}
	struct listeners *ls = d->listeners;
	char users[sizeof(d->cfg.unix_users)];
	snprintf(users, sizeof(users), "%s", d->cfg.unix_users);
	char *save = NULL;
	for (char *u = strtok_r(users, ", ", &save); u; u = strtok_r(NULL, ", ", &save)) {
		if (ls->nuids == UIDS_MAX) {
			snprintf(err, errlen, "listen.unix_users names more than %d users", UIDS_MAX);
			return -E2BIG;
		}
		char *end;
		unsigned long id = strtoul(u, &end, 10);
		struct passwd *pw = *end ? getpwnam(u) : NULL;
		if (*end && !pw) {
			snprintf(err, errlen, "listen.unix_users: no user \"%s\"", u);
			return -ENOENT;
		}
		ls->uids[ls->nuids++] = pw ? (uint32_t)pw->pw_uid : (uint32_t)id;
	}
	if (d->cfg.unix_group[0]) {
		struct group *gr = getgrnam(d->cfg.unix_group);
		if (!gr) {
			snprintf(err, errlen, "listen.unix_group: no group \"%s\"", d->cfg.unix_group);
			return -ENOENT;
		}
		ls->has_gid = true;
		ls->gid = (uint32_t)gr->gr_gid;
	}
	return 0;
}

static void on_connection(uv_stream_t *server, int status)
{
	struct listener *l = server->data;
	if (status == UV_EMFILE || status == UV_ENFILE) {
		/* libuv has accepted and closed the waiting connections with
		 * the descriptor it keeps spare for this (uv__emfile_trick), so
		 * clients see a close rather than hang in the backlog. */
		conn_refused(l->d, CONN_REFUSE_FD,
			     "%s: out of file descriptors (%s); waiting connections closed", l->what,
			     uv_strerror(status));
		return;
	}
	if (status < 0) {
		log_warn("%s: accept failed: %s", l->what, uv_strerror(status));
		return;
	}
	conn_accept(l->d, server, l->ev, &l->pol, l->what);
}

/* The next free slot, or NULL with the refusal in err. */
static struct listener *new_listener(struct daemon *d, const struct conn_events *ev, char *err,
				     size_t errlen)
{
	struct listeners *ls = d->listeners;
	if (ls->n >= LISTEN_MAX) {
		snprintf(err, errlen,
			 "too many listening sockets: mfmad listens on at most %d (socket-activated "
			 "sockets plus listen.tcp)",
			 LISTEN_MAX);
		return NULL;
	}
	struct listener *l = &ls->l[ls->n];
	memset(l, 0, sizeof(*l));
	l->d = d;
	l->ev = ev;
	return l;
}

/* Counts a listener whose handle was initialised, so close and free see it. */
static void keep(struct daemon *d, struct listener *l)
{
	l->h.handle.data = l;
	d->listeners->n++;
}

static int listen_unix(struct daemon *d, const struct conn_events *ev, const char *path,
		       char *err, size_t errlen)
{
	struct listener *l = new_listener(d, ev, err, errlen);
	if (!l)
		return -EMFILE;
	snprintf(l->what, sizeof(l->what), "unix:%s", path);
	snprintf(l->path, sizeof(l->path), "%s", path);
	policy_unix(d, l);

	/* A socket file left by a crashed daemon is removed; one that still
	 * answers belongs to a live daemon, which we must not steal from. */
	struct stat st;
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			snprintf(err, errlen, "%s exists and is not a socket", path);
			return -EEXIST;
		}
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			close(fd);
			snprintf(err, errlen, "%s is in use by another running daemon", path);
			return -EADDRINUSE;
		}
		if (fd >= 0)
			close(fd);
		unlink(path);
	}
	/* /run/mfmad for root outside systemd (which makes it as RuntimeDirectory). */
	char dir[108];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = '\0';
		if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
			int e = errno;
			snprintf(err, errlen, "cannot create %s: %s", dir, strerror(e));
			return -e;
		}
	}
	int rc = uv_pipe_init(d->loop, &l->h.pipe, 0);
	if (rc == 0) {
		keep(d, l);
		rc = uv_pipe_bind(&l->h.pipe, path);
	}
	if (rc == 0)
		rc = chmod(path, (mode_t)d->cfg.unix_mode) < 0 ? -errno : 0;
	if (rc == 0)
		rc = uv_listen(&l->h.stream, 128, on_connection);
	if (rc < 0) {
		snprintf(err, errlen, "cannot listen on %s: %s", path, uv_strerror(rc));
		return rc;
	}
	log_info("listening on unix:%s", path);
	return 0;
}

static int is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
	if (sa->sa_family == AF_INET6)
		return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
	return 0;
}

static int policy_tcp(struct daemon *d, struct listener *l, const struct sockaddr *sa, char *err,
		      size_t errlen)
{
	struct listeners *ls = d->listeners;
	l->pol = (struct conn_policy){ .tls = ls->tls };
	if (ls->token_len) {
		l->pol.token = ls->token;
		l->pol.token_len = ls->token_len;
	}
	if (is_loopback(sa))
		return 0;
	char host[64] = "?";
	if (sa->sa_family == AF_INET6)
		uv_ip6_name((const struct sockaddr_in6 *)sa, host, sizeof(host));
	else
		uv_ip4_name((const struct sockaddr_in *)sa, host, sizeof(host));
	/* TLS with client certificates is a credential; TLS alone only hides
	 * the traffic, so the token is still asked for. */
	if (ls->tls && ls->tls_client_certs)
		return 0;
	if (ls->token_len) {
		if (!ls->tls)
			log_warn("%s%s listens on %s without TLS: the token and every matrix travel "
				 "in the clear (set listen.tls_cert and listen.tls_key)",
				 l->activated ? "socket activation: " : "", l->what, host);
		return 0;
	}
	snprintf(err, errlen,
		 "%s%s listens on %s, which other hosts can reach, without a credential: set "
		 "listen.tls_client_ca (TLS with client certificates) or listen.token_file; "
		 "refusing to serve unauthenticated remote clients",
		 l->activated ? "socket activation: " : "", l->what, host);
	return -EPERM;
}

static int listen_tcp(struct daemon *d, const struct conn_events *ev, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	const char *addr = d->cfg.tcp_address;
	int rc = strchr(addr, ':') ? uv_ip6_addr(addr, d->cfg.tcp_port, (struct sockaddr_in6 *)&ss)
				   : uv_ip4_addr(addr, d->cfg.tcp_port, (struct sockaddr_in *)&ss);
	if (rc < 0) {
		snprintf(err, errlen, "listen.tcp_address = \"%s\" is not an IP address", addr);
		return -EINVAL;
	}
	if (!is_loopback((struct sockaddr *)&ss) && !d->cfg.tcp_allow_remote) {
		snprintf(err, errlen,
			 "listen.tcp_address = \"%s\" is not a loopback address; set "
			 "listen.tcp_allow_remote = true (and listen.tls_client_ca or listen.token_file) "
			 "to mean it",
			 addr);
		return -EPERM;
	}
	struct listener *l = new_listener(d, ev, err, errlen);
	if (!l)
		return -EMFILE;
	rc = policy_tcp(d, l, (struct sockaddr *)&ss, err, errlen);
	if (rc < 0)
		return rc;
	snprintf(l->what, sizeof(l->what), strchr(addr, ':') ? "tcp:[%s]:%d" : "tcp:%s:%d", addr,
		 d->cfg.tcp_port);
	rc = uv_tcp_init(d->loop, &l->h.tcp);
	if (rc == 0) {
		keep(d, l);
		rc = uv_tcp_bind(&l->h.tcp, (struct sockaddr *)&ss, 0);
	}
	if (rc == 0)
		rc = uv_listen(&l->h.stream, 128, on_connection);
	if (rc < 0) {
		snprintf(err, errlen, "cannot listen on %s: %s", l->what, uv_strerror(rc));
		return rc;
	}
	log_info("listening on %s%s", l->what, l->pol.tls ? " (TLS)" : "");
	return 0;
}

/* Sockets passed by systemd (mfmad.socket).  They are the manager's
 * duplicates: we never shutdown(2) or unlink them. */
static int listen_activated(struct daemon *d, const struct conn_events *ev, char *err,
			    size_t errlen)
{
#if MFMAD_HAVE_SYSTEMD
	int n = sd_listen_fds(1);
	if (n <= 0)
		return n;
	for (int i = 0; i < n; i++) {
		int fd = SD_LISTEN_FDS_START + i;
		struct listener *l = new_listener(d, ev, err, errlen);
		if (!l)
			return -EMFILE;
		l->activated = true;
		int rc;
		if (sd_is_socket_unix(fd, SOCK_STREAM, 1, NULL, 0) > 0) {
			snprintf(l->what, sizeof(l->what), "activated unix socket (fd %d)", fd);
			policy_unix(d, l);
			rc = uv_pipe_init(d->loop, &l->h.pipe, 0);
			if (rc == 0) {
				keep(d, l);
				rc = uv_pipe_open(&l->h.pipe, fd);
			}
		} else if (sd_is_socket(fd, AF_UNSPEC, SOCK_STREAM, 1) > 0) {
			snprintf(l->what, sizeof(l->what), "activated tcp socket (fd %d)", fd);
			/* The same rules as listen.tcp: systemd may hand over
			 * 0.0.0.0:PORT, which mfmad.conf never asked for. */
			struct sockaddr_storage ss;
			socklen_t sl = sizeof(ss);
			if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
				snprintf(err, errlen, "%s: getsockname: %s", l->what, strerror(errno));
				return -errno;
			}
			rc = policy_tcp(d, l, (struct sockaddr *)&ss, err, errlen);
			if (rc < 0)
				return rc;
			rc = uv_tcp_init(d->loop, &l->h.tcp);
			if (rc == 0) {
				keep(d, l);
				rc = uv_tcp_open(&l->h.tcp, fd);
			}
		} else {
			snprintf(err, errlen, "socket-activation fd %d is not a listening stream socket", fd);
			return -EINVAL;
		}
		if (rc == 0)
			rc = uv_listen(&l->h.stream, 128, on_connection);
		if (rc < 0) {
			snprintf(err, errlen, "%s: %s", l->what, uv_strerror(rc));
			return rc;
		}
		log_info("listening on %s", l->what);
	}
	return n;
#else
	(void)d;
	(void)ev;
	(void)err;
	(void)errlen;
	return 0;
#endif
}

/* Descriptors the daemon needs besides its connections: listeners,
 * devices, the journal, libuv's own and its spare for accept-and-close. */
#define FD_RESERVE 64

/* Raises the soft descriptor limit so that limits.max_connections, which
 * refuses with an answer and a counted, rate-limited log line, is reached
 * before the fd limit, where libuv can only accept and close (with the
 * descriptor it keeps spare for that, silently).  Where the hard limit is
 * too low, connections are capped below it instead.  A Unix client may
 * also have CONN_MAX_FDS descriptors waiting for the frames that claim
 * them: room for those too where the hard limit allows, though
 * connections are capped only for their own. */
void listen_fit_fd_limit(struct daemon *d)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	rlim_t want = (rlim_t)d->cfg.max_connections + FD_RESERVE;
	rlim_t room = (rlim_t)d->cfg.max_connections * (1 + CONN_MAX_FDS) + FD_RESERVE;
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < room) {
		rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > room ? room : rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		getrlimit(RLIMIT_NOFILE, &rl);
	}
	d->fd_conn_cap = 0;
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
		d->fd_conn_cap = rl.rlim_cur > 2 * FD_RESERVE ? (uint32_t)(rl.rlim_cur - FD_RESERVE)
							       : (uint32_t)(rl.rlim_cur / 2);
		log_warn("limits.max_connections = %u needs %llu descriptors but the limit is %llu "
			 "(LimitNOFILE=): at most %u connections are taken, the others refused",
			 d->cfg.max_connections, (unsigned long long)want,
			 (unsigned long long)rl.rlim_cur, d->fd_conn_cap);
	}
}

int listen_start(struct daemon *d, const struct conn_events *ev, char *err, size_t errlen)
{
	listen_fit_fd_limit(d);
	d->listeners = calloc(1, sizeof(*d->listeners));
	if (!d->listeners) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	struct listeners *ls = d->listeners;
	int n = read_token(d->cfg.token_file, ls->token, &ls->token_len, err, errlen);
	if (n == 0)
		n = load_tls(d->listeners, &d->cfg, err, errlen);
	if (n == 0)
		n = load_peers(d, err, errlen);
	if (n == 0)
		n = listen_activated(d, ev, err, errlen);
	if (n < 0)
		return n;
	if (n == 0) {
		char path[108];
		if (d->cfg.unix_path[0]) {
			snprintf(path, sizeof(path), "%s", d->cfg.unix_path);
		} else if (endpoint_default_path(path, sizeof(path)) < 0) {
			snprintf(err, errlen, "the default socket path is too long; set listen.unix");
			return -ENAMETOOLONG;
		}
		int rc = listen_unix(d, ev, path, err, errlen);
		if (rc < 0)
			return rc;
	}
	if (d->cfg.tcp_enabled) {
		int rc = listen_tcp(d, ev, err, errlen);
		if (rc < 0)
			return rc;
	}
	return 0;
}

void listen_close(struct daemon *d)
{
	struct listeners *ls = d->listeners;
	for (int i = 0; ls && i < ls->n; i++) {
		struct listener *l = &ls->l[i];
		if (uv_is_closing(&l->h.handle))
			continue;
		uv_close(&l->h.handle, NULL);
		if (!l->activated && l->path[0])
			unlink(l->path);
	}
}

int listen_reload(struct daemon *d, const struct mfmad_config *nc, char *err, size_t errlen)
{
	struct listeners *ls = d->listeners;
	if (!ls)
		return 0;
	/* Whether each is set cannot change without a restart
	 * (config_restart_only_changes); only the files are read again, and
	 * the new token is taken only once the TLS files have loaded too:
	 * all of them, or none. */
	int rc = 0;
	uint8_t token[TOKEN_MAX];
	size_t token_len = 0;
	const bool new_token = d->cfg.token_file[0] && nc->token_file[0];
	if (new_token)
		rc = read_token(nc->token_file, token, &token_len, err, errlen);
	if (rc == 0 && ls->tls && nc->tls_cert[0] &&
	    !nc->tls_client_ca[0] == !ls->tls_client_certs) {
		struct tls_ctx *old = ls->tls;
		rc = load_tls(ls, nc, err, errlen);
		for (int i = 0; rc == 0 && i < ls->n; i++)
			if (ls->l[i].pol.tls == old)
				ls->l[i].pol.tls = ls->tls;
	}
	if (rc == 0 && new_token) {
		memcpy(ls->token, token, token_len);
		ls->token_len = token_len;
	}
	explicit_bzero(token, sizeof(token));
	for (int i = 0; i < ls->n; i++)
		if (ls->l[i].pol.token)
			ls->l[i].pol.token_len = ls->token_len;
	return rc;
}

void listen_free(struct daemon *d)
{
	if (d->listeners)
		tls_ctx_free(d->listeners->tls);
	free(d->listeners);
	d->listeners = NULL;
}
