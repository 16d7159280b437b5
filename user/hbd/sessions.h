/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* UDP session table shared by all workers: token -> session, any worker may receive a datagram. */
#ifndef HBD_SESSIONS_H
#define HBD_SESSIONS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "hb_wheel.h"
#include "hbeat_abi.h"

/* Session lifecycle (UDP):
 *   free --alloc--> RESERVED (owner = the worker that verified the HELLO)
 *        --publish--> ACTIVE: in the token hash; sessions map entry AUTHED (offload) before WELCOME
 *        --unhash--> DEAD: no longer found by token (BYE, expiry, superseded, drain)
 *        --free (owner only)--> free, gen + 1
 * Only the owner frees a session and touches its wheel links, so a session ended by another
 * worker (a BYE it received, a newer HELLO) is handed to the owner with a MSG_RING.
 */
enum hbd_sess_state { HBD_SESS_FREE = 0, HBD_SESS_RESERVED, HBD_SESS_ACTIVE, HBD_SESS_DEAD };

/* 104 bytes a session, plus 8 of wheel links and 4 of hash bucket at load <= 1. */
struct hbd_sess {
	uint64_t token;
	uint64_t device_id;
	uint8_t addr[16]; /* IPv4 as v4-mapped IPv6 */
	uint16_t port; /* network order */
	uint16_t gen;
	uint16_t owner; /* worker id */
	uint8_t state;
	uint8_t version; /* HB_VERSION, or HB_VERSION_2: every frame tagged under key */
	uint32_t last_seen; /* owner clock ms; written by any worker (relaxed atomic) */
	uint32_t next; /* hash chain or free list */
	/* version 2, under the bucket lock */
	uint8_t key[HB_SESSION_KEY_LEN];
	uint64_t last_ts; /* newest PING timestamp taken (the replay window) */
	uint64_t path_data; /* the challenge sent to path_addr (0: none pending) */
	uint8_t path_addr[16]; /* a new source the session's frames came from, unvalidated */
	uint16_t path_port;
	uint16_t pad;
	uint32_t path_ms; /* when the challenge was sent (owner clock ms) */
};

struct hbd_sessions {
	struct hbd_sess *s;
	struct hb_wlink *links; /* wheel links, shared by the workers' UDP wheels */
	uint32_t cap;
	uint32_t *bucket; /* chain heads as index + 1; 0 = empty */
	uint32_t bmask;
	uint32_t free_head; /* freed indexes, through ->next */
	uint32_t fresh; /* indexes >= fresh were never used: memory untouched until needed */
	uint32_t active;
	pthread_mutex_t free_lock;
	pthread_mutex_t *locks; /* striped by bucket */
	uint32_t lmask;
};

int hbd_sessions_init(struct hbd_sessions *t, uint32_t cap);
void hbd_sessions_free(struct hbd_sessions *t);

/* Takes a free index for owner (state RESERVED); -ENOSPC when the table is full. */
int hbd_sess_alloc(struct hbd_sessions *t, unsigned owner, uint32_t *idx);
/* Gives back an index that is RESERVED or DEAD (owner only); its gen moves on. */
void hbd_sess_release(struct hbd_sessions *t, uint32_t idx);
/* Makes a RESERVED session findable by token; -EEXIST if the token is taken. */
int hbd_sess_publish(struct hbd_sessions *t, uint32_t idx, uint64_t token);

/* What a datagram learns about its session. */
struct hbd_sess_view {
	uint32_t idx;
	uint16_t gen;
	uint16_t owner;
	uint64_t device_id;
	bool rebound; /* the source differed: the session now lives at the new address */
	/* version 2 (hbd_sess_touch_v2) */
	bool elsewhere; /* from a source not (yet) the session's: answer nothing there */
	uint64_t challenge; /* nonzero: send PATH_CHALLENGE with these bytes to the source */
	uint8_t key[HB_SESSION_KEY_LEN];
	uint8_t addr[16]; /* the session's (validated) address and port */
	uint16_t port;
};

/* A version 2 session's secrets (version 1: key and last_ts ignored). */
void hbd_sess_set_v2(struct hbd_sess *s, uint8_t version, const uint8_t key[HB_SESSION_KEY_LEN],
		     uint64_t last_ts);

/* What a version 2 datagram asks of its session (hbd_sess_touch_v2). */
struct hbd_v2_in {
	const uint8_t *frame; /* the datagram: tag after len bytes */
	size_t len;
	bool ping; /* a PING, whose timestamp is ts */
	uint64_t ts;
	uint64_t floor_ts; /* the kernel's window (its entry's last_ts): a PING must pass both */
	const uint8_t *response; /* a PATH_RESPONSE's 8 bytes (NULL: not one) */
	uint32_t challenge_gap_ms; /* the least time between two challenges to a session */
};

/* Finds an ACTIVE version 2 session by token and checks the frame's tag under its key
 * (-EBADMSG if wrong, or if the session is version 1), a PING's timestamp against its replay
 * window (-EALREADY) and the source: from the session's address the session is seen now; from
 * another one nothing moves (v->elsewhere) unless the frame is a PATH_RESPONSE carrying the
 * challenge sent to exactly that address, which moves the session there (v->rebound). A frame
 * from elsewhere may start a challenge (v->challenge), at most one per challenge_gap_ms. A
 * fresh PING from elsewhere counts as a heartbeat (it carries the key and is newer than any
 * before). -ENOENT if unknown.
 */
int hbd_sess_touch_v2(struct hbd_sessions *t, uint64_t token, const uint8_t addr[16], uint16_t port,
		      uint32_t now, const struct hbd_v2_in *in, struct hbd_sess_view *v);
/* Finds an ACTIVE version 1 session by token and marks it seen now. If addr/port differ from
 * the session's, the session moves there (NAT rebinding; see udp.c). -ENOENT if unknown,
 * -EBADMSG if the session is of version 2 (whose frames go to hbd_sess_touch_v2).
 */
int hbd_sess_touch(struct hbd_sessions *t, uint64_t token, const uint8_t addr[16], uint16_t port,
		   uint32_t now, struct hbd_sess_view *v);
/* Copies an ACTIVE session found by token (for ACKs); -ENOENT if gone. */
int hbd_sess_lookup(struct hbd_sessions *t, uint64_t token, struct hbd_sess *out);
/* Copies session idx if it is still (gen, ACTIVE) and, if unhash, takes it out of the hash
 * (state DEAD). -ESTALE if it is not.
 */
int hbd_sess_get(struct hbd_sessions *t, uint32_t idx, uint16_t gen, bool unhash,
		 struct hbd_sess *out);

static inline uint32_t hbd_sess_last_seen(const struct hbd_sessions *t, uint32_t idx)
{
	return __atomic_load_n(&t->s[idx].last_seen, __ATOMIC_RELAXED);
}

#endif
