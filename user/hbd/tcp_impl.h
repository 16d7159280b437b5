/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* What the tcp_*.c files share; nothing outside them includes this (they are listed in tcp.h,
 * each calling only those below it).
 */
#ifndef HBD_TCP_IMPL_H
#define HBD_TCP_IMPL_H

#include "outq.h"
#include "tcp.h"
#include "worker.h"

/* The worker clock in the 32 bits a connection keeps (wraps; compared by difference). */
static inline uint32_t hbd_tcp_now32(const struct hbd_worker *w)
{
	return (uint32_t)w->now_ms;
}

/* A frame from an authenticated connection, answered here: its time in the connection and in
 * its seen slot, where hbctl conns reads the last heartbeat of a device the kernel does not
 * answer for (a store to mapped memory, no syscall). */
static inline void hbd_tcp_heard(struct hbd_worker *w, uint32_t slot)
{
	w->conns[slot].last_seen = hbd_tcp_now32(w);
	hbd_seen_set(&w->d->kern.maps, hbd_seen_tcp(w, slot),
		     w->d->mono0_ns + w->now_ms * 1000000ull);
}

static inline bool hbd_conn_live(const struct hbd_conn *c)
{
	return c->state == CONN_NEW || c->state == CONN_AUTHED;
}

/* The connection a CQE or message names, if slot still holds that generation. */
static inline struct hbd_conn *hbd_conn_of(struct hbd_worker *w, uint32_t slot, uint16_t gen)
{
	if (slot >= w->nslots || w->conns[slot].gen != gen || w->conns[slot].state == CONN_FREE)
		return NULL;
	return &w->conns[slot];
}

/* tcp_kernel.c: the kernel fast path's view of a connection (offload mode); calls nothing of
 * the lifecycle: what a failure means for the connection is the caller's to decide.
 */
/* Asks for the socket's SO_COOKIE, hard-linked to the next SQE (the first recv), so the cookie
 * is known before the first frame is handled. Nothing without --tcp kernel or keepalive.
 */
void hbd_tcp_ask_cookie(struct hbd_worker *w, uint32_t slot);
/* The SO_COOKIE CQE of c: c->cookie holds it, or 0 if it failed (no fast path for c). */
void hbd_tcp_cookie_done(struct hbd_worker *w, struct hbd_conn *c, int res);
/* An authenticated connection: conns[cookie] names its device (flags: HB_CONN_MQTT and its
 * keepalive for an MQTT device, else 0), and with --tcp kernel its socket is on its way into
 * the sockhash (output held until it is in); in keepalive mode CF_KEEPALIVE if sock_ops turned
 * keepalive on for it. True if the client must be refused (the map is full and --on-map-full
 * says refuse).
 */
bool hbd_tcp_kernel_admit(struct hbd_worker *w, uint32_t slot, uint64_t device_id, uint32_t flags);
/* The fd install for the sockhash completed with res (c NULL: the connection is gone): the
 * socket goes into the sockhash if c is still authenticated, and the fd is closed. Returns 0
 * or the -errno the sockhash refused it with.
 */
int hbd_tcp_sockhash_done(struct hbd_worker *w, struct hbd_conn *c, int res);
/* A closing connection: its conns entry goes, so the kernel stops answering for it. */
void hbd_tcp_kernel_forget(struct hbd_worker *w, const struct hbd_conn *c);
/* Folds the kernel's last heartbeat of an authenticated connection into c->last_seen: from
 * its seen stamp (a memory read), or with lookup (or without a seen slot) from conns[cookie]
 * (a syscall).
 */
void hbd_tcp_kernel_last_seen(struct hbd_worker *w, uint32_t slot, bool lookup);
/* An adopted connection: the kernel stamps our seen slot for it from now on, and its last
 * heartbeat so far counts in c->last_seen (keepalive mode: CF_KEEPALIVE again if the kernel
 * tracks it). */
void hbd_tcp_kernel_reseat(struct hbd_worker *w, uint32_t slot);

/* tcp_conn.c: the lifecycle */
/* Takes a free slot for a new connection (what: "accept into", "handed-over connection in"):
 * NEW, counted, nothing queued. NULL if the slot is not free (logged and counted). *clients is
 * the daemon's TCP connection count before this one.
 */
struct hbd_conn *hbd_tcp_slot_take(struct hbd_worker *w, uint32_t slot, const char *what,
				   unsigned *clients);
/* A connection leaves the unauthenticated ones (its HELLO checked out, or it is closing): it
 * no longer counts against --max-pending. Nothing if it did not. */
void hbd_tcp_pending_done(struct hbd_worker *w, struct hbd_conn *c);
/* Arms the multishot recv (keepalive mode: the multishot poll): 0 or -EBUSY (no SQE). */
int hbd_tcp_arm_recv(struct hbd_worker *w, uint32_t slot);
/* Keepalive mode: one non-blocking recv, or CF_MORE if one is in flight already. 0 or -EBUSY. */
int hbd_tcp_read(struct hbd_worker *w, uint32_t slot);
/* Cancels the multishot recv (or poll) if one is armed and not being cancelled already. */
void hbd_tcp_cancel_recv(struct hbd_worker *w, uint32_t slot);
/* The receive side waits for a re-arm at the end of the loop iteration (hbd_tcp_flush). */
void hbd_tcp_want_rearm(struct hbd_worker *w, uint32_t slot);
/* Output to submit at the end of the loop iteration. */
void hbd_tcp_mark_dirty(struct hbd_worker *w, uint32_t slot);
/* Submits the close of the direct descriptor: 0 or -EBUSY (no SQE). */
int hbd_tcp_close_direct(struct hbd_worker *w, uint32_t slot);
/* Starts closing a live connection: final_type HB_BYE/HB_ERROR (with its code) or 0. */
void hbd_tcp_close(struct hbd_worker *w, uint32_t slot, uint8_t final_type, uint16_t code);
/* Moves a closing connection along its lifecycle as far as its operations in flight allow. */
void hbd_tcp_advance(struct hbd_worker *w, uint32_t slot);
/* Queues a frame; a connection that would go over --max-output is closed (a slow reader). */
void hbd_tcp_send(struct hbd_worker *w, uint32_t slot, uint8_t type, uint16_t seq,
		  const void *payload, uint16_t len);
void hbd_tcp_send_error(struct hbd_worker *w, uint32_t slot, uint16_t code);
/* Queues bytes already encoded (an MQTT packet), as hbd_tcp_send does a frame. */
void hbd_tcp_send_raw(struct hbd_worker *w, uint32_t slot, const void *bytes, uint16_t len);

/* tcp_frames.c */
/* Received bytes to the frame decoder, frames to their handlers. 0, -ENOMEM (no chunk for an
 * incomplete frame) or -EBADMSG (*bad says how the frame was malformed).
 */
int hbd_tcp_feed(struct hbd_worker *w, uint32_t slot, const uint8_t *p, size_t n,
		 enum hb_decode *bad);

#endif
