/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The daemon's side of the pinned BPF maps: conns, sessions, config, ustats. */
#ifndef HBD_MAPS_H
#define HBD_MAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hbeat_abi.h"

struct hbd_maps {
	int conns, sessions, config, ustats; /* -1 when not open */
	struct hb_ustats *ustats_mem; /* mmap of the ustats ARRAY (BPF_F_MMAPABLE) */
	size_t ustats_len;
	struct hb_config *config_mem; /* mmap of config if it is mmapable, else NULL */
	size_t config_len;
	struct hb_config config_cache; /* last config read, for the one-syscall stamp */
	unsigned stamps;
};

void hbd_maps_init(struct hbd_maps *m);
/* Opens conns, sessions and config under dir and checks their layout against the ABI. All three
 * or none: on failure returns -errno, leaves them closed and says why in why.
 */
int hbd_maps_open_offload(struct hbd_maps *m, const char *dir, char *why, size_t whylen);
/* Opens and maps ustats (HB_MAX_WORKERS slots). -errno if absent or not usable. */
int hbd_maps_open_ustats(struct hbd_maps *m, const char *dir, char *why, size_t whylen);
void hbd_maps_close(struct hbd_maps *m);

/* conns[cookie]: device_id and state AUTHED, last_seen_ns = now_ns. Creates the entry if
 * sock_ops did not (then the kernel never sees the socket's frames and the daemon answers).
 */
int hbd_maps_conn_auth(struct hbd_maps *m, uint64_t cookie, uint64_t device_id, uint64_t now_ns);
int hbd_maps_conn_last_seen(struct hbd_maps *m, uint64_t cookie, uint64_t *ns);
/* Deletes conns[cookie]; ENOENT (sock_ops got there first) is success. */
int hbd_maps_conn_delete(struct hbd_maps *m, uint64_t cookie);

int hbd_maps_sess_put(struct hbd_maps *m, uint64_t token, const struct hb_session *v);
int hbd_maps_sess_get(struct hbd_maps *m, uint64_t token, struct hb_session *v);
int hbd_maps_sess_last_seen(struct hbd_maps *m, uint64_t token, uint64_t *ns);
int hbd_maps_sess_delete(struct hbd_maps *m, uint64_t token);

/* config.alive_ns = now_ns, config.grace_ns = grace_ns: a store if config is mmapable, else one
 * update (the other fields re-read every 40th stamp so the loader's changes are kept).
 */
int hbd_maps_stamp(struct hbd_maps *m, uint64_t now_ns, uint64_t grace_ns);

/* A copy of the config entry (the loader's fields: ifindex, ifname, port, xdp_mode). */
int hbd_maps_config(struct hbd_maps *m, struct hb_config *out);

/* "10.0.0.2" / "2001:db8::1" from a v4-mapped-or-v6 address. */
void hbd_addr_str(const uint8_t addr[16], char out[HB_PEER_STR]);
/* "10.0.0.2:40000" / "[2001:db8::1]:40000" from a v4-mapped-or-v6 address, for the maps' peer. */
void hbd_peer_str(const uint8_t addr[16], uint16_t port_be, char out[HB_PEER_STR]);

#endif
