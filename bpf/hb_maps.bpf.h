/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The maps every hbeat BPF object shares, pinned by name so the three objects (and hbd) meet in
 * one set of maps, plus the counter and liveness helpers that read them.
 *
 * Each object that includes this header declares the same maps. The loader either pins them
 * under one directory (pin_root_path, LIBBPF_PIN_BY_NAME: the first object to load creates them,
 * the others reuse the pins) or hands the first object's fds to the others (bpf_map__reuse_fd), so
 * there is always exactly one instance of each.
 */
#ifndef HB_MAPS_BPF_H
#define HB_MAPS_BPF_H

#include "hb_vmlinux.bpf.h"
#include <bpf/bpf_helpers.h>
#include "hbeat_abi.h"

/* TCP connections on the service port, keyed by socket cookie. Preallocated: sock_ops inserts in
 * softirq context at connection rate, where a preallocated free list never has to allocate. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, HB_MAX_CONNS);
	__type(key, struct hb_conn_key);
	__type(value, struct hb_conn);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} conns SEC(".maps");

/* Admitted UDP sessions, keyed by token (host-order value of the wire token). Written by hbd. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, HB_MAX_SESSIONS);
	__type(key, struct hb_session_key);
	__type(value, struct hb_session);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sessions SEC(".maps");

/* The service's TCP sockets (same key as conns); carries hb_parser/hb_verdict. */
struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, HB_MAX_CONNS);
	__type(key, struct hb_conn_key);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sockhash SEC(".maps");

/* Kernel counters, one struct per CPU so the fast paths never share a cache line. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hb_kstats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} kstats SEC(".maps");

/* Daemon counters, one slot per worker; BPF never touches them, hbd mmaps the map and adds. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, HB_MAX_WORKERS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct hb_ustats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ustats SEC(".maps");

/* Load-time facts and the daemon's liveness stamp. Mmapable so hbd can refresh alive_ns with a
 * plain store instead of a syscall per tick. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct hb_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} config SEC(".maps");

/* The XDP program that runs after hb_xdp on every packet hb_xdp passes, where libxdp's
 * dispatcher is unavailable (docs/COEXISTENCE.md). Slot 0 is set by `hbctl load --then`;
 * empty, the tail call falls through and the packet simply passes. Only hb_xdp uses it. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xdp_chain SEC(".maps");

/* Heartbeat stamps by the daemon's slot (struct hb_conn's seen_slot); hbd mmaps it so that its
 * expiry reads memory instead of looking every device up. Sized by the loader to conns plus
 * sessions. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, HB_MAX_CONNS + HB_MAX_SESSIONS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} seen SEC(".maps");

/* The unicast addresses XDP answers for (struct hb_local_addrs); written by hbctl and hbd. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hb_local_addrs);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} local_addrs SEC(".maps");

/* Store a heartbeat's time in the daemon's seen slot, if it gave the entry one. */
static __always_inline void hb_stamp_seen(__u32 slot, __u64 now)
{
	__u64 *p;

	if (!slot)
		return;
	p = bpf_map_lookup_elem(&seen, &slot);
	if (p)
		*p = now;
}

/* Bump one kernel counter. Per-CPU value: a plain increment is race free. */
#define HB_COUNT(field)                                                              \
	do {                                                                         \
		__u32 __hb_zero = 0;                                                 \
		struct hb_kstats *__hb_s = bpf_map_lookup_elem(&kstats, &__hb_zero); \
		if (__hb_s)                                                          \
			__hb_s->field++;                                             \
	} while (0)

/* The fast paths answer only while the daemon's stamp is fresh (see struct hb_config). A stamp
 * newer than now (written on another CPU after we read the clock) counts as fresh; without that
 * check the unsigned difference would wrap and declare a live daemon dead. A missing config entry
 * cannot happen for an ARRAY, but the verifier needs the NULL check; treat it as alive. */
static __always_inline int hb_daemon_alive(__u64 now)
{
	__u32 zero = 0;
	struct hb_config *c = bpf_map_lookup_elem(&config, &zero);
	__u64 grace, alive;

	if (!c)
		return 1;
	grace = c->grace_ns;
	alive = c->alive_ns;
	if (!grace || now <= alive)
		return 1;
	return now - alive <= grace;
}

/* The daemon's enum hb_config_flag bits. */
static __always_inline __u32 hb_config_flags(void)
{
	__u32 zero = 0;
	struct hb_config *c = bpf_map_lookup_elem(&config, &zero);

	return c ? c->flags : 0;
}

/* The daemon's --max-payload (0 in the map: the protocol's maximum). */
static __always_inline __u32 hb_max_payload(void)
{
	__u32 zero = 0;
	struct hb_config *c = bpf_map_lookup_elem(&config, &zero);

	return c && c->max_payload ? c->max_payload : HB_MAX_PAYLOAD;
}

#endif /* HB_MAPS_BPF_H */
