/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Protocol version 2 over UDP, the daemon's side (udp_v2.c): tags, replay window, path
 * validation. Below udp.c, above sessions.c and udp_tx.c. */
#ifndef HBD_UDP_V2_H
#define HBD_UDP_V2_H

#include <stdint.h>

struct hbd_worker;
struct hb_frame;
struct hbd_sess_view;

/* The session of a version 2 frame (not a HELLO) from addr/port, checked: its tag, a PING's
 * timestamp, its source. Sends the PATH_CHALLENGE a new source gets. 0: go on with v (reply,
 * if at all, to v->addr/v->port under v->key; nothing to a source v->elsewhere says is not
 * validated; a PATH_RESPONSE that validated the source sets v->rebound, and the caller moves
 * the kernel's entry); nonzero: the frame is dropped (counted). */
int hbd_udp_v2_session(struct hbd_worker *w, const uint8_t addr[16], uint16_t port,
		       const struct hb_frame *f, struct hbd_sess_view *v);

#endif
