// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* TCP in offload mode (--tcp kernel): the socket cookie, the conns entry the kernel answers
 * by, the sockhash, and the kernel's heartbeat stamps. In keepalive mode (--tcp keepalive) the
 * cookie and the conns entry only: hbctl conns and bpftool show the device, and the entry says
 * whether sock_ops turned keepalive on for the socket. With --tcp user the same, the entry made
 * here (no sock_ops), and hbd's own stamps in the seen slot are the device's last heartbeat.
 *
 * The kernel answers a connection's heartbeats once the socket is in the sockhash, and it goes
 * in when it authenticates, not when it connects: HELLO, and whatever a peer that never
 * authenticates sends, come to the daemon straight, without the stream parser and the psock's
 * kworker on the way (setup: docs/SETUP.md). The map takes only a regular fd, hence the
 * install; the WELCOME is held (CF_INSERT) until the socket is in, so that the device's first
 * PING finds it there. Whatever arrived meanwhile goes through the parser on hbd's next read.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hello.h"
#include "log.h"
#include "tcp_impl.h"
#include "uring_sock.h"
#include "vg.h"

void hbd_tcp_ask_cookie(struct hbd_worker *w, uint32_t slot)
{
	struct hbd_conn *c = &w->conns[slot];
	struct io_uring_sqe *sqe;

	if (!w->d->kern.tcp_conns || !(sqe = hbd_sqe(w)))
		return;
	hb_prep_getsockopt(sqe, (int)slot, SOL_SOCKET, SO_COOKIE, &c->cookie, sizeof(c->cookie));
	/* hard link: the cookie is known before the first frame is handled */
	sqe->flags |= IOSQE_FIXED_FILE | IOSQE_IO_HARDLINK;
	io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_COOKIE, slot, c->gen, 0));
	c->flags |= CF_COOKIE;
}

void hbd_tcp_cookie_done(struct hbd_worker *w, struct hbd_conn *c, int res)
{
	c->flags &= ~CF_COOKIE;
	HBD_KERNEL_WROTE(&c->cookie, sizeof(c->cookie));
	if (res < 0) {
		hb_warn("worker %u: SO_COOKIE: %s: the kernel fast path will not serve this "
			"connection",
			w->id, strerror(-res));
		c->cookie = 0;
	}
}

static void join_sockhash(struct hbd_worker *w, uint32_t slot)
{
	struct hbd_conn *c = &w->conns[slot];
	struct io_uring_sqe *sqe = hbd_sqe(w);

	if (!sqe) {
		hbd_map_full(w, -EBUSY, "sockhash", c->device_id); /* counted; served here */
		return;
	}
	hb_prep_fixed_fd_install(sqe, (int)slot);
	io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_SOCKHASH, slot, c->gen, 0));
	c->flags |= CF_INSERT;
}

/* Keepalive mode: CF_KEEPALIVE if sock_ops turned keepalive on for this socket. One lookup a
 * HELLO (or an adoption); without it (sock_ops not attached where hbd's sockets are, options
 * refused, no conns entry) the connection stays on the daemon's own expiry and its device is
 * told to PING, so no connection is left without a timer. */
static void keepalive_of(struct hbd_worker *w, struct hbd_conn *c)
{
	struct hb_conn v;

	if (!hbd_maps_conn_get(&w->d->kern.maps, c->cookie, &v) && (v.flags & HB_CONN_KEEPALIVE))
		c->flags |= CF_KEEPALIVE;
}

bool hbd_tcp_kernel_admit(struct hbd_worker *w, uint32_t slot, uint64_t device_id, uint32_t flags)
{
	struct hbd_daemon *d = w->d;
	struct hbd_conn *c = &w->conns[slot];
	int rc;

	if (!d->kern.tcp_conns || !c->cookie)
		return false;
	if (d->kern.tcp_keepalive && !(flags & HB_CONN_MQTT)) /* MQTT keeps its own liveness */
		keepalive_of(w, c);
	rc = hbd_maps_conn_auth(&d->kern.maps, c->cookie, device_id, hb_mono_ns(),
				hbd_seen_tcp(w, slot), flags);
	if (rc)
		return hbd_map_full(w, rc, "conns", device_id);
	/* an MQTT connection's bytes are for the verdict only if it parses MQTT on this port */
	if (d->kern.tcp_offload && (!(flags & HB_CONN_MQTT) || d->kern.mqtt_kernel))
		join_sockhash(w, slot);
	return false;
}

int hbd_tcp_sockhash_done(struct hbd_worker *w, struct hbd_conn *c, int res)
{
	int rc = res;

	if (rc >= 0) {
		int fd = rc;

		/* a connection closing meanwhile has no conns entry left: not worth adding */
		rc = c && c->state == CONN_AUTHED
			     ? hbd_maps_sockhash_add(&w->d->kern.maps, c->cookie, fd)
			     : 0;
		close(fd);
	}
	if (c)
		c->flags &= ~CF_INSERT;
	return rc;
}

void hbd_tcp_kernel_forget(struct hbd_worker *w, const struct hbd_conn *c)
{
	int rc;

	if (!w->d->kern.tcp_conns || !c->cookie)
		return;
	rc = hbd_maps_conn_delete(&w->d->kern.maps, c->cookie);
	if (rc)
		hb_dbg("conns delete %" PRIu64 ": %s", c->cookie, strerror(-rc));
}

void hbd_tcp_kernel_last_seen(struct hbd_worker *w, uint32_t slot, bool lookup)
{
	struct hbd_daemon *d = w->d;
	struct hbd_conn *c = &w->conns[slot];
	uint32_t k = hbd_seen_tcp(w, slot);
	uint64_t ns;

	if (k && !lookup) {
		ns = hbd_seen_get(&d->kern.maps, k);
	} else {
		HBD_STAT_ADD(w->st, expiry_lookups, 1);
		if (hbd_maps_conn_last_seen(&d->kern.maps, c->cookie, &ns))
			return;
	}
	c->last_seen = hbd_seen_later(d, ns, c->last_seen);
}

void hbd_tcp_kernel_reseat(struct hbd_worker *w, uint32_t slot)
{
	struct hbd_conn *c = &w->conns[slot];
	uint64_t ns;

	if (w->d->kern.tcp_keepalive && c->cookie) {
		keepalive_of(w, c);
		return;
	}
	/* the kernel stamps the old daemon's slot until the entry names ours (or none, if we have
	 * no slot for it: that index may be another connection's here). The age the old daemon
	 * handed over can predate the last heartbeat (it reads the kernel's stamps only when a
	 * deadline comes due); the entry has that heartbeat.
	 */
	if (w->d->kern.tcp_conns && c->cookie &&
	    !hbd_maps_conn_reseat(&w->d->kern.maps, c->cookie, hbd_seen_tcp(w, slot), &ns))
		c->last_seen = hbd_adopt_seen(w->d, ns, c->last_seen);
}
