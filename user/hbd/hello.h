/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* HELLO handling shared by both transports (hello.c): checks, superseding, WELCOME, map-full
 * policy. Below tcp_*.c and udp.c; calls only the ring plumbing and the core state.
 */
#ifndef HBD_HELLO_H
#define HBD_HELLO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "proto.h"

struct hbd_worker;
struct hbd_daemon;

/* Why a HELLO is refused: the key store's verdicts (enum hb_auth, with the same values), then
 * the device table's.
 */
enum hbd_refusal {
	HBD_REFUSE_UNKNOWN_DEVICE = HB_AUTH_UNKNOWN_DEVICE,
	HBD_REFUSE_BAD_MAC = HB_AUTH_BAD_MAC,
	HBD_REFUSE_CLOCK = HB_AUTH_CLOCK,
	HBD_REFUSE_REVOKED = HB_AUTH_REVOKED,
	HBD_REFUSE_OTHER_SERVER = HB_AUTH_OTHER_SERVER,
	HBD_REFUSE_REPLAY, /* timestamp not newer than the device's last accepted HELLO */
};

struct hbd_hello_result {
	uint64_t device_id;
	uint64_t old_loc; /* session superseded by this one, 0 if none */
	uint64_t token;
	uint8_t prk[HB_MAC_LEN]; /* the device's half of a version 2 session key */
};

/* Verifies MAC, clock window and replay, and makes loc the device's current session. Returns
 * 0, an enum hbd_refusal (> 0: refuse with ERROR(AUTH)), or -errno.
 */
int hbd_hello_check(struct hbd_worker *w, const struct hb_hello_msg *h, uint64_t loc,
		    struct hbd_hello_result *r);
/* The same at a given wall-clock time, needing only keys, devices and window_ms of d (the fuzz
 * harness runs it without workers).
 */
int hbd_hello_check_at(struct hbd_daemon *d, const struct hb_hello_msg *h, uint64_t loc,
		       uint64_t now_ms, struct hbd_hello_result *r);
/* What hbd_hello_check() returned, in words. */
const char *hbd_auth_str(int rc);
/* A kernel map update for an admitted client failed with rc: counts and logs it (rate
 * limited); true if the client must be refused (--on-map-full refuse and the map is full).
 */
bool hbd_map_full(struct hbd_worker *w, int rc, const char *map, uint64_t device_id);
/* Ends the session a HELLO superseded, wherever it lives. */
void hbd_supersede(struct hbd_worker *w, uint64_t old_loc);
/* WELCOME payload for a token with server flags (enum hb_welcome_flag, 0 for none) into out,
 * which holds HB_WELCOME_FLAGS_LEN bytes. Returns the payload's length: 16 without flags, as
 * every WELCOME was before flags, 20 with. HB_WELCOME_KEEPALIVE tells the keepalive timing as
 * interval and timeout.
 */
size_t hbd_welcome(struct hbd_worker *w, uint64_t token, uint32_t flags, void *out);

#endif
