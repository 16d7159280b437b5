/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Upgrade handoff between an old and a new hbd: the messages (SOCK_SEQPACKET, one record batch
 * each, fds riding along with SCM_RIGHTS) and the worker side (handoff.c). upgrade.c drives it.
 *
 * The sequence (old = O, new = N):
 *   O spawns N with a control socket (HBD_HANDOFF_FD) and sends OFFER + its listening and UDP
 *   sockets. N sets up (keys, maps, rings) and answers READY + one socket per N worker.
 *   O stops taking new work (accepts and UDP receives cancelled: new connections wait in the
 *   kernel's listen queue, datagrams in the socket buffer), sends its UDP sessions and its
 *   device table (replay state), then GO: N's workers start on the very same sockets.
 *   Each O worker then hands its TCP connections over in batches: a connection is quiesced
 *   (receive cancelled, replies and sink ACKs out), its direct descriptor becomes a regular fd
 *   (IORING_OP_FIXED_FD_INSTALL), and up to HBD_HO_FDS of them go to an N worker with their
 *   state; N registers them as direct descriptors (IORING_OP_FILES_UPDATE, slots allocated by
 *   the kernel) and closes the regular fds. At most HBD_HO_FDS regular fds exist per worker at
 *   any time, far below RLIMIT_NOFILE. The kernel's conns/sessions entries never change, so
 *   the fast paths answer heartbeats throughout. O sends DONE and exits.
 */
#ifndef HBD_HANDOFF_H
#define HBD_HANDOFF_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "hbeat_abi.h"

#define HBD_HO_MAGIC 0x48424f32u /* "HBO2": bump with any change below */
#define HBD_HO_FDS 250 /* fds a message carries (SCM_MAX_FD is 253) */
#define HBD_HO_MSG_MAX (512 * 1024) /* bytes of records a message carries at most */
#define HBD_HO_SOCKBUF (4 << 20) /* socket buffers, so a full message always fits */

enum hbd_ho_type {
	HBD_HO_OFFER = 1, /* O -> N: struct hbd_ho_offer; fds: TCP listeners, then UDP sockets */
	HBD_HO_READY, /* N -> O: struct hbd_ho_ready; fds: one socket per N worker */
	HBD_HO_SESSIONS, /* O -> N: struct hbd_ho_sess[count] */
	HBD_HO_DEVICES, /* O -> N: struct hbd_ho_dev[count] */
	HBD_HO_GO, /* O -> N: start serving */
	HBD_HO_CONNS, /* O worker -> N worker: records (struct hbd_ho_conn + partial bytes) */
	HBD_HO_DONE, /* O -> N: struct hbd_ho_done; O exits */
};

struct hbd_ho_hdr {
	uint32_t magic;
	uint16_t type;
	uint16_t count; /* records (or fds) that follow */
	uint32_t len; /* bytes after this header */
	uint32_t pad;
};

struct hbd_ho_offer {
	uint32_t workers; /* listeners, and as many UDP sockets */
	uint16_t port;
	uint16_t family;
	uint32_t conn_size, sess_size; /* sizeof the records: both sides must agree */
};

struct hbd_ho_ready {
	uint32_t workers;
	uint32_t pad;
};

struct hbd_ho_sess {
	uint64_t token;
	uint64_t device_id;
	uint8_t addr[16];
	uint16_t port; /* network order */
	uint8_t version; /* HB_VERSION or HB_VERSION_2 */
	uint8_t pad;
	uint32_t age_ms; /* silence so far */
	uint8_t key[HB_SESSION_KEY_LEN]; /* version 2: the session key */
	uint64_t last_ts; /* version 2: the newest PING timestamp taken */
};

struct hbd_ho_dev {
	uint64_t id;
	uint64_t last_ts_ms; /* newest accepted HELLO */
};

/* One TCP connection; partial_len bytes of an incomplete frame follow, padded to 8. */
struct hbd_ho_conn {
	uint64_t cookie; /* conns map key (0 without offload) */
	uint64_t device_id; /* 0 until authenticated */
	uint8_t src[16]; /* the source's per-source key (hbd_key_source), zero if not tracked */
	uint32_t age_ms; /* since the last frame (or since accept if not authenticated) */
	uint16_t partial_len;
	uint8_t authed;
	uint8_t pad;
};

struct hbd_ho_done {
	uint64_t conns, sessions, dropped;
};

_Static_assert(sizeof(struct hbd_ho_conn) % 8 == 0, "records stay 8-byte aligned");
_Static_assert(sizeof(struct hbd_ho_sess) % 8 == 0, "records stay 8-byte aligned");

/* Sends one message with up to HBD_HO_FDS fds; blocking. Returns 0 or -errno. */
int hbd_ho_send(int sock, uint16_t type, uint16_t count, const void *body, uint32_t len,
		const int *fds, unsigned nfds);
/* Receives one message into buf (cap bytes); fds into fds[] (*nfds in: room, out: count).
 * timeout_ms < 0 waits forever. Returns the header type (> 0), 0 on EOF, or -errno.
 */
int hbd_ho_recv(int sock, void *buf, size_t cap, struct hbd_ho_hdr *h, int *fds, unsigned *nfds,
		int timeout_ms);

struct hbd_worker;

/* Per worker. O: sock leads to an N worker; N: sock is where O's workers' batches arrive. */
struct hbd_ho_worker {
	int sock; /* -1: no handoff */
	int phase; /* the daemon's phase this worker has acted on */
	bool exporting; /* O: connections are being handed over (a cancelled recv is no close) */
	bool stopped; /* O: accepts and UDP receives have ended */
	bool done; /* O: no connection left; N: O's side closed */
	uint64_t deadline_ms; /* O: after this, connections that do not quiesce are closed */
	uint32_t cursor; /* O: next slot to look at */
	/* O: the batch being turned into fds */
	uint32_t slot[HBD_HO_FDS];
	int fd[HBD_HO_FDS];
	unsigned n, installing;
	size_t bytes;
	/* N: the message being received and registered */
	uint8_t *buf;
	struct msghdr msg;
	struct iovec iov;
	uint64_t cbuf[(HBD_HO_FDS * sizeof(int) + 64) / 8];
	int ufd[HBD_HO_FDS], uslot[HBD_HO_FDS];
	unsigned un;
	bool receiving, registering;
	uint64_t sent, received, dropped;
};

/* handoff.c, called from the worker's loop */
void hbd_ho_init(struct hbd_worker *w);
void hbd_ho_free(struct hbd_worker *w);
/* Every iteration: acts on the daemon's upgrade phase. */
void hbd_ho_step(struct hbd_worker *w);
void hbd_ho_on_install(struct hbd_worker *w, int res, uint32_t pos);
void hbd_ho_on_recv(struct hbd_worker *w, int res);
void hbd_ho_on_update(struct hbd_worker *w, int res);

#endif
