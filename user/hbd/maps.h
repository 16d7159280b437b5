/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The daemon's side of the pinned BPF maps: conns, sockhash, sessions, config, ustats, seen. */
#ifndef HBD_MAPS_H
#define HBD_MAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hbeat_abi.h"

struct hbd_maps {
	int conns, sessions, config, ustats, sockhash; /* -1 when not open */
	struct hb_ustats *ustats_mem; /* mmap of the ustats ARRAY (BPF_F_MMAPABLE) */
	size_t ustats_len;
	struct hb_config *config_mem; /* mmap of config if it is mmapable, else NULL */
	size_t config_len;
	size_t config_size; /* its value: struct hb_config, or the shorter one of older pins */
	struct hb_config config_cache; /* last config read, for the one-syscall stamp */
	unsigned stamps;
	__u64 *seen_mem; /* mmap of seen (struct hb_conn's seen_slot), NULL without it */
	size_t seen_len;
	__u32 seen_n; /* its entries; slot 0 is never given out */
};

void hbd_maps_init(struct hbd_maps *m);
/* Opens conns, sessions and config under dir and checks their layout against the ABI. All three
 * or none: on failure returns -errno, leaves them closed and says why in why.
 */
int hbd_maps_open_offload(struct hbd_maps *m, const char *dir, char *why, size_t whylen);
/* Maps the first want slots of the pinned seen array, or all it has if fewer (pins of an older
 * hbctl have none: expiry then looks each device up). Returns 0 or -errno with why set; either
 * way offload works.
 */
int hbd_maps_open_seen(struct hbd_maps *m, const char *dir, uint64_t want, char *why,
		       size_t whylen);
/* Opens the sockhash the kernel's TCP heartbeat path serves (hbd adds each connection when it
 * authenticates). -errno with why set if it cannot: the daemon then answers TCP itself. */
int hbd_maps_open_sockhash(struct hbd_maps *m, const char *dir, char *why, size_t whylen);
/* Opens and maps ustats (HB_MAX_WORKERS slots). -errno if absent or not usable. */
int hbd_maps_open_ustats(struct hbd_maps *m, const char *dir, char *why, size_t whylen);
void hbd_maps_close(struct hbd_maps *m);

/* The heartbeat stamp in seen[slot] (0 if there is no such slot or none was stored yet). */
static inline uint64_t hbd_seen_get(const struct hbd_maps *m, uint32_t slot)
{
	return slot && slot < m->seen_n ? __atomic_load_n(&m->seen_mem[slot], __ATOMIC_RELAXED) : 0;
}

/* seen[slot] = ns; nothing if there is no such slot. ns 0 clears a slot before it goes to a new
 * connection or session, so that it starts without its predecessor's stamps. */
static inline void hbd_seen_set(struct hbd_maps *m, uint32_t slot, uint64_t ns)
{
	if (slot && slot < m->seen_n)
		__atomic_store_n(&m->seen_mem[slot], ns, __ATOMIC_RELAXED);
}

/* conns[cookie]: device_id and state AUTHED, last_seen_ns = now_ns, seen_slot (0: none), and
 * flags (enum hb_conn_flag: HB_CONN_MQTT with its keepalive) added to those sock_ops set.
 * Creates the entry if sock_ops did not (--tcp user, or sock_ops not where hbd's sockets are):
 * then the kernel never sees the socket's frames, and the entry is for hbctl conns and bpftool.
 */
int hbd_maps_conn_auth(struct hbd_maps *m, uint64_t cookie, uint64_t device_id, uint64_t now_ns,
		       uint32_t seen_slot, uint32_t flags);
/* sockhash[cookie] = the socket behind fd (a regular fd: the map takes no direct descriptor).
 * From here on hb_parser/hb_verdict see its bytes. 0 or -errno; -EEXIST (already in) is 0. */
int hbd_maps_sockhash_add(struct hbd_maps *m, uint64_t cookie, int fd);
/* Points conns[cookie] (an adopted connection's) at our seen_slot (0: none, so that the kernel
 * stops stamping the predecessor's slot, which may be another device's here) and says in *last_ns
 * when the kernel last heard from the device (0: never). seen[seen_slot] starts at that stamp, or
 * at 0 if the reseat fails (-ENOENT: the entry is gone; *last_ns is then 0).
 */
int hbd_maps_conn_reseat(struct hbd_maps *m, uint64_t cookie, uint32_t seen_slot,
			 uint64_t *last_ns);
int hbd_maps_conn_last_seen(struct hbd_maps *m, uint64_t cookie, uint64_t *ns);
/* Deletes conns[cookie]; ENOENT (sock_ops got there first) is success. */
int hbd_maps_conn_delete(struct hbd_maps *m, uint64_t cookie);

int hbd_maps_sess_put(struct hbd_maps *m, uint64_t token, const struct hb_session *v);
/* sessions[token] = v only if the entry is still there (-ENOENT if not): a session's entry
 * follows it to a new address, but a session that ended meanwhile must not come back. */
int hbd_maps_sess_move(struct hbd_maps *m, uint64_t token, const struct hb_session *v);
int hbd_maps_sess_get(struct hbd_maps *m, uint64_t token, struct hb_session *v);
int hbd_maps_sess_last_seen(struct hbd_maps *m, uint64_t token, uint64_t *ns);
/* As hbd_maps_conn_reseat, for an adopted session. */
int hbd_maps_sess_reseat(struct hbd_maps *m, uint64_t token, uint32_t seen_slot, uint64_t *last_ns);
int hbd_maps_sess_delete(struct hbd_maps *m, uint64_t token);

/* config.alive_ns = now_ns, config.grace_ns = grace_ns: a store if config is mmapable, else one
 * update (the other fields re-read every 40th stamp so the loader's changes are kept).
 */
int hbd_maps_stamp(struct hbd_maps *m, uint64_t now_ns, uint64_t grace_ns);

/* config.max_payload = max_payload: the kernel reflects no larger ECHO (hbd --max-payload).
 * -EOPNOTSUPP on pins of an hbctl from before the field (their programs do not read it). */
int hbd_maps_set_max_payload(struct hbd_maps *m, uint32_t max_payload);
/* config.flags = flags (enum hb_config_flag); -EOPNOTSUPP for pins of an older hbctl. */
int hbd_maps_set_flags(struct hbd_maps *m, uint32_t flags);

/* A copy of the config entry (the loader's fields: ifindex, ifname, port, xdp_mode). */
int hbd_maps_config(struct hbd_maps *m, struct hb_config *out);
/* config's keepalive timing (hbctl load --tcp keepalive), which sock_ops sets on every new
 * connection: TCP_KEEPIDLE = TCP_KEEPINTVL = idle_s, TCP_KEEPCNT = cnt, TCP_USER_TIMEOUT. */
int hbd_maps_set_keepalive(struct hbd_maps *m, uint32_t idle_s, uint32_t cnt,
			   uint32_t user_timeout_ms);
/* conns[cookie] as it is (-ENOENT if none). */
int hbd_maps_conn_get(struct hbd_maps *m, uint64_t cookie, struct hb_conn *v);

/* "10.0.0.2" / "2001:db8::1" from a v4-mapped-or-v6 address. */
void hbd_addr_str(const uint8_t addr[16], char out[HB_PEER_STR]);
/* "10.0.0.2:40000" / "[2001:db8::1]:40000" from a v4-mapped-or-v6 address, for the maps' peer. */
void hbd_peer_str(const uint8_t addr[16], uint16_t port_be, char out[HB_PEER_STR]);

#endif
