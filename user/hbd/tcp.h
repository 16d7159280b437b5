/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* TCP connections on direct descriptors: what the worker loop, accept.c and handoff.c call.
 *
 * The pieces; each calls only those after it in this list: tcp_handoff.c (the upgrade
 * handoff), tcp_frames.c (received bytes, frames, replies), tcp_open.c (admission),
 * mqtt.c (MQTT connections' packets), tcp_expire.c (the expiry wheel), tcp_conn.c (the lifecycle), tcp_kernel.c (cookie, conns
 * entry, sockhash, the kernel's stamps), outq.c (the output queue). tcp_impl.h is what they
 * share.
 *
 * A connection's life:
 *   single-shot accept into a direct descriptor (the kernel picks the slot; accept.c)
 *     -> NEW: SO_COOKIE requested (BPF loaded), multishot recv armed, on the expiry wheel
 *        (a connection that never authenticates is closed after --hello-timeout)
 *     -> HELLO verified (MAC, clock window, replay; tcp_frames.c): conns[cookie] =
 *        {device_id, AUTHED} and, in offload mode, the socket into the sockhash BEFORE the
 *        WELCOME leaves, so the kernel answers the first PING (tcp_kernel.c); the device table
 *        now names (worker, slot, gen) as the device's session and an older session of the
 *        device is told to go (BYE SUPERSEDED)
 *     -> AUTHED: PING -> PONG, ECHO -> ECHO, DATA -> sink then ACK; every frame is proof of
 *        life (last_seen); in offload mode the kernel's stamps count too (tcp_expire.c)
 *     -> CLOSING (client BYE or EOF, error, malformed frame, expiry, superseded, drain):
 *        conns entry deleted so the kernel stops answering, input ignored, the device released;
 *        waits for pending sink ACKs, then queues the final BYE/ERROR, then drains output
 *     -> SHUTDOWN: recv cancelled; waits for the last CQEs of the recv, cookie and fd ops
 *     -> CLOSED: io_uring close of the direct descriptor submitted
 *     -> FREE at its CQE: gen + 1. Only then can the kernel hand the slot to a new connection,
 *        so nothing of the old connection is in flight when a new one takes the slot; the gen
 *        in user_data and in device-table/sink references catches anything addressed to it.
 * A connection stuck in CLOSING..CLOSED for a whole timeout (a peer that never reads) has its
 * operations cancelled by the wheel and is closed anyway.
 *
 * Keepalive mode (hbctl load --tcp keepalive): the receive side is a multishot poll armed for
 * the connection's life and, each time it fires, one non-blocking recv after another until the
 * socket says empty, ended or failed (tcp_conn.c, tcp_frames.c); no sockhash. An AUTHED
 * connection whose conns entry says sock_ops turned keepalive on (CF_KEEPALIVE) gets the
 * WELCOME with the KEEPALIVE flag and leaves the wheel: the kernel probes it, and its close of
 * a connection that stopped answering ends the recv with ETIMEDOUT, which expires the device.
 * Any other connection is expected to PING and stays on the wheel.
 */
#ifndef HBD_TCP_H
#define HBD_TCP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct hbd_worker;
struct hbd_ack;
struct hbd_ho_conn;
struct io_uring_cqe;

/* tcp_open.c */
/* A connection accepted into slot from addr (16 bytes, IPv4 v4-mapped); mqtt: on the MQTT
 * port (its bytes go to mqtt.c). */
void hbd_tcp_open(struct hbd_worker *w, uint32_t slot, const uint8_t addr[16], bool mqtt);

/* tcp_conn.c */
void hbd_tcp_on_cookie(struct hbd_worker *w, struct io_uring_cqe *cqe);
void hbd_tcp_on_sockhash(struct hbd_worker *w, struct io_uring_cqe *cqe);
void hbd_tcp_on_send(struct hbd_worker *w, struct io_uring_cqe *cqe);
void hbd_tcp_on_close(struct hbd_worker *w, struct io_uring_cqe *cqe);
void hbd_tcp_kill(struct hbd_worker *w, uint32_t slot, uint16_t gen, uint8_t reason);
void hbd_tcp_flush(struct hbd_worker *w);
void hbd_tcp_drain(struct hbd_worker *w);

/* tcp_expire.c */
void hbd_tcp_expire(struct hbd_worker *w);

/* tcp_frames.c */
void hbd_tcp_on_recv(struct hbd_worker *w, struct io_uring_cqe *cqe);
void hbd_tcp_on_poll(struct hbd_worker *w, struct io_uring_cqe *cqe);
void hbd_tcp_ack(struct hbd_worker *w, const struct hbd_ack *a, bool ok);
/* Queues a DOWN frame on a live authenticated connection: 0, -ENOENT (not that session any
 * more) or -ENOMEM (no output buffer).
 */
int hbd_tcp_send_down(struct hbd_worker *w, uint32_t slot, uint16_t gen, uint16_t seq,
		      const void *payload, uint16_t len);

/* tcp_handoff.c: the upgrade handoff (handoff.c drives these) */
enum hbd_tcp_quiet {
	HBD_TCP_GONE = 0, /* not a live connection */
	HBD_TCP_QUIET, /* live, nothing in flight, nothing unsent: it can travel */
	HBD_TCP_BUSY, /* live but not yet (its receive is being cancelled, output is going out) */
};
enum hbd_tcp_quiet hbd_tcp_quiesce(struct hbd_worker *w, uint32_t slot);
/* Writes slot's record and partial frame (struct hbd_ho_conn + bytes); returns their size. */
size_t hbd_tcp_export(struct hbd_worker *w, uint32_t slot, uint8_t *out);
/* slot now lives in the new daemon: forget it here, close our direct descriptor. */
void hbd_tcp_handed(struct hbd_worker *w, uint32_t slot);
/* Closes slot without a final frame (it could not be handed over); counted as an error. */
void hbd_tcp_drop(struct hbd_worker *w, uint32_t slot);
/* A connection from the old daemon, registered into slot: state, partial frame, recv armed. */
void hbd_tcp_adopt(struct hbd_worker *w, uint32_t slot, const struct hbd_ho_conn *rec,
		   const uint8_t *partial);

#endif
