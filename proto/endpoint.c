#include "endpoint.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int set_err(char *err, size_t errlen, const char *fmt, const char *what)
{
	if (err && errlen)
		snprintf(err, errlen, fmt, what);
	return -EINVAL;
}

int endpoint_parse(const char *s, struct endpoint *ep, char *err, size_t errlen)
{
	memset(ep, 0, sizeof(*ep));
	if (!s || !*s)
		return set_err(err, errlen, "empty endpoint%s", "");
	bool tls = strncmp(s, "tls:", 4) == 0;
	if (tls || strncmp(s, "tcp:", 4) == 0) {
		const char *h = s + 4, *colon;
		size_t hlen;
		if (*h == '[') {
			const char *close = strchr(h, ']');
			if (!close || close[1] != ':')
				return set_err(err, errlen,
					       tls ? "endpoint '%s': expected tls:[IPV6]:PORT"
						   : "endpoint '%s': expected tcp:[IPV6]:PORT",
					       s);
			h++;
			hlen = (size_t)(close - h);
			colon = close + 1;
		} else {
			colon = strrchr(h, ':');
			if (!colon)
				return set_err(err, errlen,
					       tls ? "endpoint '%s': expected tls:HOST:PORT"
						   : "endpoint '%s': expected tcp:HOST:PORT",
					       s);
			hlen = (size_t)(colon - h);
		}
		if (hlen == 0 || hlen >= sizeof(ep->host))
			return set_err(err, errlen, "endpoint '%s': bad host", s);
		memcpy(ep->host, h, hlen);
		char *end;
		long port = strtol(colon + 1, &end, 10);
		if (colon[1] == '\0' || *end != '\0' || port < 1 || port > 65535)
			return set_err(err, errlen, "endpoint '%s': port must be 1..65535", s);
		ep->kind = ENDPOINT_TCP;
		ep->tls = tls;
		ep->port = (int)port;
		return 0;
	}
	const char *p = strncmp(s, "unix:", 5) == 0 ? s + 5 : s;
	if (!*p)
		return set_err(err, errlen, "endpoint '%s': empty socket path", s);
	if (strlen(p) >= sizeof(ep->path))
		return set_err(err, errlen, "endpoint '%s': socket path longer than 107 bytes", s);
	ep->kind = ENDPOINT_UNIX;
	strcpy(ep->path, p);
	return 0;
}

int endpoint_list_parse(const char *s, struct endpoint *eps, size_t max, size_t *n, char *err,
			size_t errlen)
{
	*n = 0;
	if (!s || !*s)
		return set_err(err, errlen, "empty endpoint%s", "");
	char one[512];
	const char *p = s;
	for (;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		if (len == 0) {
			if (err && errlen)
				snprintf(err, errlen, "endpoint list '%s': entry %zu is empty", s,
					 *n + 1);
			return -EINVAL;
		}
		if (*n == max) {
			if (err && errlen)
				snprintf(err, errlen, "endpoint list '%s': more than %zu endpoints", s,
					 max);
			return -EINVAL;
		}
		if (len >= sizeof(one))
			return set_err(err, errlen, "endpoint list '%s': an entry is too long", s);
		memcpy(one, p, len);
		one[len] = '\0';
		int rc = endpoint_parse(one, &eps[*n], err, errlen);
		if (rc < 0)
			return rc;
		(*n)++;
		if (!comma)
			return 0;
		p = comma + 1;
	}
}

int endpoint_format(const struct endpoint *ep, char *buf, size_t len)
{
	int n;
	if (ep->kind == ENDPOINT_UNIX)
		n = snprintf(buf, len, "unix:%s", ep->path);
	else if (strchr(ep->host, ':'))
		n = snprintf(buf, len, "%s:[%s]:%d", ep->tls ? "tls" : "tcp", ep->host, ep->port);
	else
		n = snprintf(buf, len, "%s:%s:%d", ep->tls ? "tls" : "tcp", ep->host, ep->port);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int endpoint_default_path_for(unsigned i, unsigned uid, const char *xdg, char *buf, size_t len)
{
	int n;
	/* A relative XDG_RUNTIME_DIR is invalid by its specification and must
	 * be ignored.  No fallback in /tmp: a name there anyone could take
	 * first, and a client would then send its matrices to them. */
	bool user = uid != 0 && xdg && xdg[0] == '/';
	if (i == 0 && user)
		n = snprintf(buf, len, "%s/mfmad.sock", xdg);
	else if (i == (user ? 1u : 0u))
		n = snprintf(buf, len, "%s", ENDPOINT_SYSTEM_SOCKET);
	else
		return -ENOENT;
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int endpoint_default_path_at(unsigned i, char *buf, size_t len)
{
	return endpoint_default_path_for(i, (unsigned)geteuid(), getenv("XDG_RUNTIME_DIR"), buf,
					 len);
}

int endpoint_default_path(char *buf, size_t len)
{
	return endpoint_default_path_at(0, buf, len);
}

int endpoint_send_buffer(int fd, size_t bytes)
{
	int have = 0;
	socklen_t hl = sizeof(have);
	if (getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &have, &hl) == 0 && have > 0 &&
	    (size_t)have >= bytes)
		return 0;
	/* The kernel doubles what it is given (room for its bookkeeping). */
	int v = bytes / 2 > INT_MAX ? INT_MAX : (int)(bytes / 2);
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &v, sizeof(v)) == 0)
		return 0;
	return setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v)) == 0 ? 0 : -errno;
}
