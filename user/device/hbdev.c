// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Device library on blocking sockets: one poll() loop around the sans-IO protocol core.
 *
 * Session life: DOWN (no socket; a connection attempt is due at retry_at) -> hbdev_connect:
 * socket, connect, HELLO, WELCOME within io_timeout_ms -> UP (heartbeats every interval, with
 * jitter; any frame from the server is proof it is there) -> BYE, ERROR, EOF, a broken socket
 * or server silence longer than its timeout -> DOWN again, with the next attempt after a
 * jittered exponential backoff (hbc_backoff_ms) that a successful WELCOME resets.
 *
 * Keepalive mode (a TCP WELCOME with HB_WELCOME_KEEPALIVE): no PINGs. The socket gets TCP
 * keepalive at the server's interval and TCP_USER_TIMEOUT = its timeout, so this kernel
 * answers the server's probes and probes the server in turn; a server that vanished shows as
 * the socket's error (ETIMEDOUT) instead of as silence, which is normal in this mode.
 */
#include "hbdev.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"

#define QUEUE 8 /* downlinks kept while hbdev_send waits */
#define WANT_MAX 16 /* seqs one DATA was sent with (UDP resends) */

struct queued {
	uint16_t len;
	uint8_t data[HB_MAX_PAYLOAD];
};

struct hbdev {
	struct hbdev_config cfg;
	uint8_t secret[HB_SECRET_MAX];
	struct sockaddr_storage addr;
	socklen_t addrlen;
	int fd; /* -1: DOWN */
	struct hbc c;
	uint64_t next_ping_ms, last_rx_ms, retry_at_ms; /* CLOCK_MONOTONIC */
	unsigned session; /* bumped at every WELCOME */
	bool keepalive; /* this session is in keepalive mode and the socket has the options */
	bool beat; /* this session heartbeats with BEATs and the socket has the user timeout */
	size_t rxlen; /* TCP: bytes of the stream buffered in rx */
	uint8_t rx[2 * HB_MAX_FRAME];
	uint8_t tx[HB_MAX_FRAME];
	uint8_t evbuf[HB_MAX_PAYLOAD]; /* the payload an event points to */
	struct queued q[QUEUE];
	unsigned qhead, qn;
	uint16_t want[WANT_MAX]; /* DATA seqs an ACK may carry (hbdev_send) */
	unsigned nwant;
	bool acked;
};

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t unix_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint32_t rnd32(void)
{
	uint32_t r = 0;

	/* a fleet must not reconnect in lockstep: the jitter needs real randomness per device */
	if (hb_random(&r, sizeof(r)))
		r = (uint32_t)mono_ns();
	return r;
}

int hbdev_open(struct hbdev **out, const struct hbdev_config *cfg)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC }, *res = NULL;
	char port[8];
	struct hbdev *d;
	int rc;

	if (!cfg->host || !cfg->port || !cfg->device_id || !cfg->secret ||
	    cfg->secret_len < HB_SECRET_MIN || cfg->secret_len > HB_SECRET_MAX ||
	    (cfg->transport != HB_TCP && cfg->transport != HB_UDP))
		return -EINVAL;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->cfg = *cfg;
	memcpy(d->secret, cfg->secret, cfg->secret_len);
	d->cfg.secret = d->secret;
	if (!d->cfg.backoff.base_ms)
		d->cfg.backoff =
			(struct hbc_backoff){ .base_ms = 500, .max_ms = 30000, .jitter_pct = 100 };
	if (!d->cfg.io_timeout_ms)
		d->cfg.io_timeout_ms = 3000;
	if (!d->cfg.data_retry_ms)
		d->cfg.data_retry_ms = 1000;
	hints.ai_socktype = cfg->transport == HB_TCP ? SOCK_STREAM : SOCK_DGRAM;
	snprintf(port, sizeof(port), "%u", cfg->port);
	rc = getaddrinfo(cfg->host, port, &hints, &res);
	if (rc || !res) {
		free(d);
		return rc == EAI_SYSTEM ? -errno : -EHOSTUNREACH;
	}
	memcpy(&d->addr, res->ai_addr, res->ai_addrlen);
	d->addrlen = res->ai_addrlen;
	freeaddrinfo(res);
	d->fd = -1;
	hbc_init(&d->c, cfg->device_id, cfg->transport);
	if (cfg->transport == HB_UDP && cfg->udp_version != HB_VERSION)
		hbc_use_v2(&d->c);
	*out = d;
	return 0;
}

static int send_all(struct hbdev *d, const void *buf, size_t n)
{
	const uint8_t *p = buf;

	while (n) {
		ssize_t k = send(d->fd, p, n, MSG_NOSIGNAL);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -errno;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* Ends the session locally; the next attempt waits for a backoff delay. */
static void lose(struct hbdev *d)
{
	if (d->fd >= 0)
		close(d->fd);
	d->fd = -1;
	d->rxlen = 0;
	hbc_reset(&d->c);
	d->retry_at_ms = mono_ms() + hbc_backoff_ms(&d->c, &d->cfg.backoff, rnd32());
}

void hbdev_close(struct hbdev *d)
{
	if (!d)
		return;
	if (d->fd >= 0 && d->c.state == HBC_AUTHED) {
		int n = hbc_bye(&d->c, d->tx, sizeof(d->tx), HB_BYE_NORMAL);

		if (n > 0)
			send_all(d, d->tx, (size_t)n);
	}
	if (d->fd >= 0)
		close(d->fd);
	memset(d->secret, 0, sizeof(d->secret));
	free(d);
}

int hbdev_connected(const struct hbdev *d)
{
	return d->fd >= 0 && d->c.state == HBC_AUTHED;
}

const struct hbc *hbdev_state(const struct hbdev *d)
{
	return &d->c;
}

/* Next complete frame in the receive buffer: 1 (f set, frame consumed from rx on the next
 * call), 0 if none, -EPROTO if the stream is not the protocol. */
static int buffered_frame(struct hbdev *d, struct hb_frame *f, size_t *used)
{
	int rc;

	*used = 0;
	if (!d->rxlen)
		return 0;
	rc = hbc_decode(&d->c, d->rx, d->rxlen, f);
	if (rc == HB_DECODE_MORE)
		return 0;
	if (rc < 0)
		return -EPROTO;
	*used = d->cfg.transport == HB_TCP ? f->size : d->rxlen;
	return 1;
}

/* Reads what the socket has (poll said readable). 0, or -errno / -ECONNRESET on EOF. */
static int fill(struct hbdev *d)
{
	ssize_t k;

	if (d->cfg.transport == HB_UDP) {
		if (d->rxlen)
			return 0; /* one datagram at a time */
		k = recv(d->fd, d->rx, sizeof(d->rx), MSG_DONTWAIT);
	} else {
		k = recv(d->fd, d->rx + d->rxlen, sizeof(d->rx) - d->rxlen, MSG_DONTWAIT);
	}
	if (k == 0 && d->cfg.transport == HB_TCP)
		return -ECONNRESET;
	if (k < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	d->rxlen += (size_t)k;
	return 0;
}

static void drop_front(struct hbdev *d, size_t used)
{
	memmove(d->rx, d->rx + used, d->rxlen - used);
	d->rxlen -= used;
}

/* Handles one frame from the server; fills ev and returns 1 if the application must hear of
 * it. A DOWN is acknowledged here, before the application sees it. */
static int handle(struct hbdev *d, const struct hb_frame *f, bool queue_downlinks,
		  struct hbdev_ev *ev)
{
	struct hbc_ev e;
	int n;

	d->last_rx_ms = mono_ms();
	switch (hbc_input(&d->c, f, mono_ns(), &e)) {
	case HBC_EV_PONG:
		ev->type = HBDEV_EV_PONG;
		ev->rtt_ns = e.rtt_ns;
		return !queue_downlinks;
	case HBC_EV_ACK:
		for (unsigned i = 0; i < d->nwant; i++)
			if (d->want[i] == e.seq)
				d->acked = true;
		return 0;
	case HBC_EV_DOWN: {
		struct queued *q = NULL;

		if (queue_downlinks) {
			/* no room: not ACKed, so the application learns it did not arrive */
			if (d->qn == QUEUE)
				return 0;
			q = &d->q[(d->qhead + d->qn++) % QUEUE];
			q->len = e.len;
			memcpy(q->data, e.payload, e.len);
		}
		n = hbc_ack(&d->c, d->tx, sizeof(d->tx), e.seq);
		if (n > 0 && send_all(d, d->tx, (size_t)n)) {
			lose(d);
			ev->type = HBDEV_EV_DISCONNECTED;
			ev->code = HBDEV_CODE_LOST;
			return 1;
		}
		if (q)
			return 0;
		memcpy(d->evbuf, e.payload, e.len);
		ev->type = HBDEV_EV_DOWNLINK;
		ev->payload = d->evbuf;
		ev->len = e.len;
		return 1;
	}
	case HBC_EV_PATH_CHALLENGE:
		/* the server saw us at a new address (a NAT rebinding): prove it is us */
		n = hbc_path_response(&d->c, d->tx, sizeof(d->tx), e.payload);
		if (n > 0 && send_all(d, d->tx, (size_t)n)) {
			lose(d);
			ev->type = HBDEV_EV_DISCONNECTED;
			ev->code = HBDEV_CODE_LOST;
			return 1;
		}
		return 0;
	case HBC_EV_BYE:
	case HBC_EV_ERROR:
		ev->type = HBDEV_EV_DISCONNECTED;
		ev->code = f->type == HB_ERROR ? HBDEV_CODE_ERROR + e.code : e.code;
		lose(d);
		return 1;
	default:
		return 0; /* strays and protocol violations change nothing */
	}
}

static void schedule_ping(struct hbdev *d, uint64_t now)
{
	uint64_t iv = d->c.interval_ms ? d->c.interval_ms : 30000;

	/* 80..100% of the interval: never late for the server's expiry, never in lockstep */
	d->next_ping_ms = now + iv - (iv / 5) * (rnd32() % 1000) / 1000;
}

/* Keepalive mode: TCP keepalive on the socket at the server's timing (whole seconds, at least
 * one), and the user timeout, which then decides when an unanswered connection dies. Returns
 * 0 or -errno (the session then heartbeats with PINGs, which the server answers as well). */
static int set_keepalive(struct hbdev *d)
{
	int one = 1, idle = (int)((d->c.interval_ms + 999) / 1000), cnt, uto = (int)d->c.timeout_ms;

	if (idle < 1)
		idle = 1;
	/* the user timeout overrides the count once set: the count only matters to a kernel
	 * that ignores TCP_USER_TIMEOUT during probes */
	cnt = (int)((d->c.timeout_ms + 999) / 1000) / idle - 1;
	if (cnt < 1)
		cnt = 1;
	if (setsockopt(d->fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) ||
	    setsockopt(d->fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) ||
	    setsockopt(d->fd, IPPROTO_TCP, TCP_KEEPINTVL, &idle, sizeof(idle)) ||
	    setsockopt(d->fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt)) ||
	    setsockopt(d->fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &uto, sizeof(uto)))
		return -errno;
	return 0;
}

/* Beat mode: the server's kernel ACKs each BEAT; a BEAT unacknowledged for the server's
 * timeout ends the connection (TCP_USER_TIMEOUT), which poll() then reports. 0 or -errno (the
 * session then heartbeats with PINGs). */
static int set_beat(struct hbdev *d)
{
	int uto = (int)d->c.timeout_ms;

	if (setsockopt(d->fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &uto, sizeof(uto)))
		return -errno;
	return 0;
}

int hbdev_rtt_us(const struct hbdev *d, uint32_t *rtt_us)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	if (d->cfg.transport != HB_TCP)
		return -EOPNOTSUPP;
	if (!hbdev_connected(d))
		return -ENOTCONN;
	memset(&ti, 0, sizeof(ti));
	if (getsockopt(d->fd, IPPROTO_TCP, TCP_INFO, &ti, &len))
		return -errno;
	*rtt_us = ti.tcpi_rtt;
	return 0;
}

int hbdev_keepalive(const struct hbdev *d)
{
	return hbdev_connected(d) && d->keepalive;
}

int hbdev_connect(struct hbdev *d)
{
	uint64_t deadline = mono_ms() + d->cfg.io_timeout_ms;
	struct hb_frame f;
	int n, rc, one = 1;

	if (d->fd >= 0)
		close(d->fd);
	d->rxlen = 0;
	d->keepalive = false;
	d->beat = false;
	hbc_reset(&d->c);
	d->fd = socket(d->addr.ss_family,
		       (d->cfg.transport == HB_TCP ? SOCK_STREAM : SOCK_DGRAM) | SOCK_CLOEXEC, 0);
	if (d->fd < 0)
		return -errno;
	if (d->cfg.transport == HB_TCP)
		setsockopt(d->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* a connected UDP socket hears only the server, and ICMP errors reach it */
	if (connect(d->fd, (struct sockaddr *)&d->addr, d->addrlen)) {
		rc = -errno;
		goto fail;
	}
	n = hbc_hello_to(&d->c, d->tx, sizeof(d->tx), d->secret, d->cfg.secret_len, unix_ms(),
			 d->cfg.server_id);
	if (n < 0 || (rc = send_all(d, d->tx, (size_t)n))) {
		rc = n < 0 ? n : rc;
		goto fail;
	}
	for (;;) {
		uint64_t now = mono_ms();
		struct pollfd p = { .fd = d->fd, .events = POLLIN };
		size_t used;

		rc = buffered_frame(d, &f, &used);
		if (rc < 0)
			goto fail;
		if (rc == 1) {
			enum hbc_event e;
			struct hbc_ev hev;

			e = hbc_input(&d->c, &f, mono_ns(), &hev);
			drop_front(d, used);
			if (e == HBC_EV_WELCOME) {
				d->session++;
				d->last_rx_ms = now;
				d->keepalive = hbc_keepalive(&d->c) && !set_keepalive(d);
				d->beat = !d->keepalive && d->cfg.beat &&
					  d->cfg.transport == HB_TCP && !set_beat(d);
				schedule_ping(d, now);
				return 0;
			}
			if (e == HBC_EV_AUTH_FAILED || e == HBC_EV_ERROR || e == HBC_EV_BYE) {
				rc = e == HBC_EV_AUTH_FAILED ? -EACCES : -ECONNREFUSED;
				goto fail;
			}
			continue;
		}
		if (now >= deadline) {
			rc = -ETIMEDOUT;
			goto fail;
		}
		rc = poll(&p, 1, (int)(deadline - now));
		if (rc < 0 && errno != EINTR) {
			rc = -errno;
			goto fail;
		}
		if (rc > 0 && (rc = fill(d)))
			goto fail;
	}
fail:
	lose(d);
	return rc;
}

/* One round of running the device until until_ms: reconnect if due, heartbeat if due, wait
 * for the server and handle what arrives. Returns 1 with ev set, 0 when until_ms passed or
 * something happened that the caller may want to look at (an ACK), -errno on local failure.
 */
static int step(struct hbdev *d, uint64_t until_ms, bool queue_downlinks, struct hbdev_ev *ev)
{
	uint64_t now = mono_ms(), wake;
	struct pollfd p;
	struct hb_frame f;
	size_t used;
	int rc, n;

	memset(ev, 0, sizeof(*ev));
	if (d->fd < 0) {
		if (now < d->retry_at_ms) {
			wake = d->retry_at_ms < until_ms ? d->retry_at_ms : until_ms;
			if (wake > now) {
				struct timespec ts = { (time_t)((wake - now) / 1000),
						       (long)((wake - now) % 1000) * 1000000 };

				nanosleep(&ts, NULL);
			}
			return 0;
		}
		rc = hbdev_connect(d);
		if (!rc) {
			ev->type = HBDEV_EV_CONNECTED;
			return 1;
		}
		if (rc == -EACCES) {
			ev->type = HBDEV_EV_AUTH_FAILED;
			return 1;
		}
		return 0; /* refused, unreachable, timed out: the backoff decides when to retry */
	}
	rc = buffered_frame(d, &f, &used);
	if (rc < 0)
		goto lost;
	if (rc == 1) {
		drop_front(d, used);
		return handle(d, &f, queue_downlinks, ev);
	}
	if (!d->keepalive && now >= d->next_ping_ms) {
		n = d->beat ? hbc_beat(&d->c, d->tx, sizeof(d->tx), NULL)
			    : hbc_ping(&d->c, d->tx, sizeof(d->tx), mono_ns(), NULL);
		if (n < 0 || send_all(d, d->tx, (size_t)n))
			goto lost;
		schedule_ping(d, now);
	}
	/* the server answers every PING: silence past its own timeout means it is gone (in
	 * keepalive and beat modes silence is normal, and the kernel reports a dead server as an
	 * error) */
	if (!d->keepalive && !d->beat &&
	    now > d->last_rx_ms + d->c.timeout_ms + d->cfg.io_timeout_ms)
		goto lost;
	wake = !d->keepalive && d->next_ping_ms < until_ms ? d->next_ping_ms : until_ms;
	p = (struct pollfd){ .fd = d->fd, .events = POLLIN };
	rc = poll(&p, 1, wake > now ? (int)(wake - now) : 0);
	if (rc < 0 && errno != EINTR)
		return -errno;
	if (rc > 0 && fill(d))
		goto lost;
	return 0;
lost:
	lose(d);
	ev->type = HBDEV_EV_DISCONNECTED;
	ev->code = HBDEV_CODE_LOST;
	return 1;
}

int hbdev_poll(struct hbdev *d, int timeout_ms, struct hbdev_ev *ev)
{
	uint64_t until = mono_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);

	do {
		int rc;

		if (d->qn) {
			struct queued *q = &d->q[d->qhead];

			memcpy(d->evbuf, q->data, q->len);
			memset(ev, 0, sizeof(*ev));
			ev->type = HBDEV_EV_DOWNLINK;
			ev->payload = d->evbuf;
			ev->len = q->len;
			d->qhead = (d->qhead + 1) % QUEUE;
			d->qn--;
			return 1;
		}
		rc = step(d, until, false, ev);
		if (rc)
			return rc;
	} while (mono_ms() < until);
	memset(ev, 0, sizeof(*ev));
	return 0;
}

int hbdev_send(struct hbdev *d, const void *data, uint16_t len, int timeout_ms)
{
	uint64_t until = mono_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0), resend_at = 0;
	unsigned sent_in = 0; /* the session the DATA last went out on (0: none yet) */
	struct hbdev_ev ev;

	if (!len || len > HB_MAX_PAYLOAD)
		return -EINVAL;
	d->nwant = 0;
	d->acked = false;
	while (mono_ms() < until) {
		uint64_t now = mono_ms();
		int rc;

		if (hbdev_connected(d) &&
		    (sent_in != d->session || (d->cfg.transport == HB_UDP && now >= resend_at))) {
			uint16_t seq;
			int n = hbc_data(&d->c, d->tx, sizeof(d->tx), data, len, &seq);

			if (n > 0 && !send_all(d, d->tx, (size_t)n)) {
				if (d->nwant == WANT_MAX)
					memmove(d->want, d->want + 1,
						(WANT_MAX - 1) * sizeof(d->want[0]));
				d->want[d->nwant < WANT_MAX ? d->nwant++ : WANT_MAX - 1] = seq;
				sent_in = d->session;
				resend_at = now + d->cfg.data_retry_ms;
			} else if (n > 0) {
				lose(d);
			}
		}
		rc = step(d,
			  hbdev_connected(d) && d->cfg.transport == HB_UDP && resend_at < until
				  ? resend_at
				  : until,
			  true, &ev);
		if (rc < 0)
			return rc;
		if (d->acked)
			return 0;
	}
	return -ETIMEDOUT;
}
