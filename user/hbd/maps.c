// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Pinned map access for hbd: open and check against the ABI, typed updates, liveness stamp. */
#include "maps.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "clock.h"
#include "pins.h"

void hbd_maps_init(struct hbd_maps *m)
{
	memset(m, 0, sizeof(*m));
	m->conns = m->sessions = m->config = m->ustats = m->sockhash = -1;
}

static int open_map(const char *dir, const char *name, __u32 type, __u32 key, __u32 value,
		    struct bpf_map_info *info, char *why, size_t whylen)
{
	__u32 len = sizeof(*info);
	int fd, rc;

	fd = hb_pin_open(dir, name, why, whylen);
	if (fd < 0)
		return fd;
	memset(info, 0, sizeof(*info));
	if (bpf_obj_get_info_by_fd(fd, info, &len)) {
		rc = -errno;
		snprintf(why, whylen, "%s/%s: map info: %s", dir, name, strerror(-rc));
		close(fd);
		return rc;
	}
	/* a HASH map may equally be an LRU_HASH: the daemon's use is the same */
	if ((info->type != type &&
	     !(type == BPF_MAP_TYPE_HASH && info->type == BPF_MAP_TYPE_LRU_HASH)) ||
	    info->key_size != key || info->value_size != value) {
		snprintf(why, whylen,
			 "%s/%s: type %u key %u value %u, expected type %u key %u value %u "
			 "(built from another hbeat_abi.h?)",
			 dir, name, info->type, info->key_size, info->value_size, type, key, value);
		close(fd);
		return -EPROTO;
	}
	return fd;
}

int hbd_maps_open_offload(struct hbd_maps *m, const char *dir, char *why, size_t whylen)
{
	struct bpf_map_info info;
	int rc;

	rc = open_map(dir, HB_MAP_CONNS, BPF_MAP_TYPE_HASH, sizeof(struct hb_conn_key),
		      sizeof(struct hb_conn), &info, why, whylen);
	if (rc < 0)
		goto fail;
	m->conns = rc;
	rc = open_map(dir, HB_MAP_SESSIONS, BPF_MAP_TYPE_HASH, sizeof(struct hb_session_key),
		      sizeof(struct hb_session), &info, why, whylen);
	if (rc < 0)
		goto fail;
	m->sessions = rc;
	/* pins of an hbctl from before config.max_payload: still ours (an upgrade of hbd alone
	 * must not lose the fast paths), minus that field */
	m->config_size = sizeof(struct hb_config);
	rc = open_map(dir, HB_MAP_CONFIG, BPF_MAP_TYPE_ARRAY, sizeof(__u32), m->config_size, &info,
		      why, whylen);
	if (rc == -EPROTO) {
		m->config_size = offsetof(struct hb_config, max_payload);
		rc = open_map(dir, HB_MAP_CONFIG, BPF_MAP_TYPE_ARRAY, sizeof(__u32), m->config_size,
			      &info, why, whylen);
	}
	if (rc < 0)
		goto fail;
	m->config = rc;
	if (info.map_flags & BPF_F_MMAPABLE) {
		long pg = sysconf(_SC_PAGESIZE);
		void *p;

		m->config_len = (sizeof(struct hb_config) + pg - 1) / pg * pg;
		p = mmap(NULL, m->config_len, PROT_READ | PROT_WRITE, MAP_SHARED, m->config, 0);
		m->config_mem = p == MAP_FAILED ? NULL : p;
	}
	if (!m->config_mem) {
		__u32 k = 0;

		if (bpf_map_lookup_elem(m->config, &k, &m->config_cache)) {
			rc = -errno;
			snprintf(why, whylen, "%s/%s: lookup: %s", dir, HB_MAP_CONFIG,
				 strerror(-rc));
			goto fail;
		}
	}
	return 0;
fail:
	if (m->config_mem)
		munmap(m->config_mem, m->config_len);
	m->config_mem = NULL;
	for (int *fd = &m->conns; fd <= &m->config; fd++) {
		if (*fd >= 0)
			close(*fd);
		*fd = -1;
	}
	return rc;
}

int hbd_maps_open_seen(struct hbd_maps *m, const char *dir, uint64_t want, char *why, size_t whylen)
{
	struct bpf_map_info info;
	long pg = sysconf(_SC_PAGESIZE);
	size_t len;
	void *p;
	int fd, rc;

	fd = open_map(dir, HB_MAP_SEEN, BPF_MAP_TYPE_ARRAY, sizeof(__u32), sizeof(__u64), &info,
		      why, whylen);
	if (fd < 0)
		return fd;
	if (!(info.map_flags & BPF_F_MMAPABLE) || info.max_entries < 2) {
		snprintf(why, whylen, "%s/%s: not an mmapable array", dir, HB_MAP_SEEN);
		close(fd);
		return -EPROTO;
	}
	/* a mapping of an array is populated whole at mmap time (and counts in our RSS): map only
	 * the slots this daemon can hand out */
	if (want < info.max_entries)
		info.max_entries = (__u32)(want > 2 ? want : 2);
	len = ((size_t)info.max_entries * sizeof(__u64) + pg - 1) / pg * pg;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	rc = p == MAP_FAILED ? -errno : 0;
	close(fd); /* the mapping keeps the map */
	if (rc) {
		snprintf(why, whylen, "%s/%s: mmap: %s", dir, HB_MAP_SEEN, strerror(-rc));
		return rc;
	}
	m->seen_mem = p;
	m->seen_len = len;
	m->seen_n = info.max_entries;
	return 0;
}

int hbd_maps_open_ustats(struct hbd_maps *m, const char *dir, char *why, size_t whylen)
{
	struct bpf_map_info info;
	long pg = sysconf(_SC_PAGESIZE);
	void *p;
	int fd;

	fd = open_map(dir, HB_MAP_USTATS, BPF_MAP_TYPE_ARRAY, sizeof(__u32),
		      sizeof(struct hb_ustats), &info, why, whylen);
	if (fd < 0)
		return fd;
	if (!(info.map_flags & BPF_F_MMAPABLE) || info.max_entries < HB_MAX_WORKERS) {
		snprintf(why, whylen, "%s/%s: needs BPF_F_MMAPABLE and %d entries", dir,
			 HB_MAP_USTATS, HB_MAX_WORKERS);
		close(fd);
		return -EPROTO;
	}
	/* an mmapable array lays values out back to back (value_size is a multiple of 8) */
	m->ustats_len = ((size_t)info.max_entries * sizeof(struct hb_ustats) + pg - 1) / pg * pg;
	p = mmap(NULL, m->ustats_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		int rc = -errno;

		snprintf(why, whylen, "%s/%s: mmap: %s", dir, HB_MAP_USTATS, strerror(-rc));
		close(fd);
		return rc;
	}
	m->ustats = fd;
	m->ustats_mem = p;
	return 0;
}

void hbd_maps_close(struct hbd_maps *m)
{
	if (m->ustats_mem)
		munmap(m->ustats_mem, m->ustats_len);
	if (m->config_mem)
		munmap(m->config_mem, m->config_len);
	if (m->seen_mem)
		munmap(m->seen_mem, m->seen_len);
	for (int *fd = &m->conns; fd <= &m->sockhash; fd++) {
		if (*fd >= 0)
			close(*fd);
	}
	hbd_maps_init(m);
}

int hbd_maps_open_sockhash(struct hbd_maps *m, const char *dir, char *why, size_t whylen)
{
	struct bpf_map_info info;
	int fd = open_map(dir, HB_MAP_SOCKHASH, BPF_MAP_TYPE_SOCKHASH, sizeof(struct hb_conn_key),
			  sizeof(__u64), &info, why, whylen);

	if (fd < 0)
		return fd;
	m->sockhash = fd;
	return 0;
}

int hbd_maps_sockhash_add(struct hbd_maps *m, uint64_t cookie, int fd)
{
	struct hb_conn_key k = { .cookie = cookie };
	__u64 v = (__u64)fd; /* the map's value size is 8: an fd in, the socket's cookie out */

	if (bpf_map_update_elem(m->sockhash, &k, &v, BPF_NOEXIST))
		return errno == EEXIST ? 0 : -errno;
	return 0;
}

int hbd_maps_conn_auth(struct hbd_maps *m, uint64_t cookie, uint64_t device_id, uint64_t now_ns,
		       uint32_t seen_slot, uint32_t flags)
{
	struct hb_conn_key k = { .cookie = cookie };
	struct hb_conn v;

	if (bpf_map_lookup_elem(m->conns, &k, &v)) {
		if (errno != ENOENT)
			return -errno;
		memset(&v, 0, sizeof(v));
	}
	/* The verdict answers nothing while the entry is NEW, so no kernel counter can change
	 * between the lookup and this update.
	 */
	v.device_id = device_id;
	v.state = HB_STATE_AUTHED;
	v.last_seen_ns = now_ns;
	v.seen_slot = seen_slot;
	if (flags & HB_CONN_MQTT) /* the keepalive bits are the daemon's, from the CONNECT */
		v.flags &= (1u << HB_CONN_MQTT_KA_SHIFT) - 1;
	v.flags |= flags;
	hbd_seen_set(m, seen_slot, 0); /* before the kernel can stamp it: the update is a barrier */
	return bpf_map_update_elem(m->conns, &k, &v, BPF_ANY) ? -errno : 0;
}

/* A reseat races with the kernel's heartbeats: the kernel finds the entry, then stores
 * last_seen_ns in it and in seen[its seen_slot]. Our update replaces the element, so a heartbeat
 * handled between our lookup and our update is missing from the new one (its pings count too);
 * only the old slot still has its stamp. A stamp there from within that window is taken for it.
 * The alternative, another device heartbeating in the same microseconds on a slot index both
 * daemons use, would at worst keep this device alive one timeout longer.
 */
#define RESEAT_SLACK_NS 1000000ull /* a heartbeat reads the clock a little before it stores */

static uint64_t reseat_gap(const struct hbd_maps *m, uint32_t old_slot, uint64_t last_ns,
			   uint64_t t0, uint64_t t1)
{
	uint64_t ns = hbd_seen_get(m, old_slot);

	return ns > last_ns && ns + RESEAT_SLACK_NS >= t0 && ns <= t1 ? ns : last_ns;
}

/* seen[seen_slot] starts at the entry's stamp, unless it is the slot the kernel already stamps
 * for this device (both daemons gave it the same index).
 */
static void reseat_slot(struct hbd_maps *m, uint32_t seen_slot, uint32_t old_slot, uint64_t ns)
{
	if (seen_slot != old_slot)
		hbd_seen_set(m, seen_slot, ns);
}

int hbd_maps_conn_reseat(struct hbd_maps *m, uint64_t cookie, uint32_t seen_slot, uint64_t *last_ns)
{
	struct hb_conn_key k = { .cookie = cookie };
	uint64_t t0 = hb_mono_ns();
	struct hb_conn v;
	uint32_t old;
	int rc = 0;

	*last_ns = 0;
	if (bpf_map_lookup_elem(m->conns, &k, &v)) {
		rc = -errno;
		goto fail;
	}
	old = v.seen_slot;
	reseat_slot(m, seen_slot, old, v.last_seen_ns);
	v.seen_slot = seen_slot;
	if (bpf_map_update_elem(m->conns, &k, &v, BPF_EXIST)) {
		rc = -errno;
		goto fail;
	}
	*last_ns = reseat_gap(m, old, v.last_seen_ns, t0, hb_mono_ns());
	return 0;
fail:
	hbd_seen_set(m, seen_slot, 0); /* no stamps of whoever had the slot before */
	return rc;
}

int hbd_maps_conn_last_seen(struct hbd_maps *m, uint64_t cookie, uint64_t *ns)
{
	struct hb_conn_key k = { .cookie = cookie };
	struct hb_conn v;

	if (bpf_map_lookup_elem(m->conns, &k, &v))
		return -errno;
	*ns = v.last_seen_ns;
	return 0;
}

int hbd_maps_conn_delete(struct hbd_maps *m, uint64_t cookie)
{
	struct hb_conn_key k = { .cookie = cookie };

	if (bpf_map_delete_elem(m->conns, &k) && errno != ENOENT)
		return -errno;
	return 0;
}

int hbd_maps_sess_put(struct hbd_maps *m, uint64_t token, const struct hb_session *v)
{
	struct hb_session_key k = { .token = token };

	hbd_seen_set(m, v->seen_slot,
		     0); /* before the kernel can stamp it: the update is a barrier */
	return bpf_map_update_elem(m->sessions, &k, v, BPF_ANY) ? -errno : 0;
}

int hbd_maps_sess_move(struct hbd_maps *m, uint64_t token, const struct hb_session *v)
{
	struct hb_session_key k = { .token = token };

	return bpf_map_update_elem(m->sessions, &k, v, BPF_EXIST) ? -errno : 0;
}

int hbd_maps_sess_get(struct hbd_maps *m, uint64_t token, struct hb_session *v)
{
	struct hb_session_key k = { .token = token };

	return bpf_map_lookup_elem(m->sessions, &k, v) ? -errno : 0;
}

int hbd_maps_sess_last_seen(struct hbd_maps *m, uint64_t token, uint64_t *ns)
{
	struct hb_session v;
	int rc = hbd_maps_sess_get(m, token, &v);

	if (!rc)
		*ns = v.last_seen_ns;
	return rc;
}

int hbd_maps_sess_reseat(struct hbd_maps *m, uint64_t token, uint32_t seen_slot, uint64_t *last_ns)
{
	struct hb_session_key k = { .token = token };
	uint64_t t0 = hb_mono_ns();
	struct hb_session v;
	uint32_t old;
	int rc = 0;

	*last_ns = 0;
	if (bpf_map_lookup_elem(m->sessions, &k, &v)) {
		rc = -errno;
		goto fail;
	}
	old = v.seen_slot;
	reseat_slot(m, seen_slot, old, v.last_seen_ns);
	v.seen_slot = seen_slot;
	if (bpf_map_update_elem(m->sessions, &k, &v, BPF_EXIST)) {
		rc = -errno;
		goto fail;
	}
	*last_ns = reseat_gap(m, old, v.last_seen_ns, t0, hb_mono_ns());
	return 0;
fail:
	hbd_seen_set(m, seen_slot, 0);
	return rc;
}

int hbd_maps_sess_delete(struct hbd_maps *m, uint64_t token)
{
	struct hb_session_key k = { .token = token };

	if (bpf_map_delete_elem(m->sessions, &k) && errno != ENOENT)
		return -errno;
	return 0;
}

int hbd_maps_stamp(struct hbd_maps *m, uint64_t now_ns, uint64_t grace_ns)
{
	__u32 k = 0;

	if (m->config < 0)
		return -EBADF;
	if (m->config_mem) {
		__atomic_store_n(&m->config_mem->grace_ns, grace_ns, __ATOMIC_RELAXED);
		__atomic_store_n(&m->config_mem->alive_ns, now_ns, __ATOMIC_RELEASE);
		return 0;
	}
	if (++m->stamps % 40 == 0)
		bpf_map_lookup_elem(m->config, &k, &m->config_cache); /* keep the cache on error */
	m->config_cache.alive_ns = now_ns;
	m->config_cache.grace_ns = grace_ns;
	return bpf_map_update_elem(m->config, &k, &m->config_cache, BPF_ANY) ? -errno : 0;
}

/* One u32 field of the config: straight into the mmapped value where the map has one, else a
 * read-modify-write of the whole value. */
static int config_set_u32(struct hbd_maps *m, size_t off, uint32_t v)
{
	__u32 k = 0;

	if (m->config < 0)
		return -EBADF;
	if (m->config_size < sizeof(struct hb_config))
		return -EOPNOTSUPP;
	if (m->config_mem) {
		__atomic_store_n((uint32_t *)((char *)m->config_mem + off), v, __ATOMIC_RELAXED);
		return 0;
	}
	if (bpf_map_lookup_elem(m->config, &k, &m->config_cache))
		return -errno;
	memcpy((char *)&m->config_cache + off, &v, sizeof(v));
	return bpf_map_update_elem(m->config, &k, &m->config_cache, BPF_ANY) ? -errno : 0;
}

int hbd_maps_set_max_payload(struct hbd_maps *m, uint32_t max_payload)
{
	return config_set_u32(m, offsetof(struct hb_config, max_payload), max_payload);
}

int hbd_maps_set_flags(struct hbd_maps *m, uint32_t flags)
{
	return config_set_u32(m, offsetof(struct hb_config, flags), flags);
}

int hbd_maps_config(struct hbd_maps *m, struct hb_config *out)
{
	__u32 k = 0;

	if (m->config < 0)
		return -EBADF;
	memset(out, 0, sizeof(*out));
	if (m->config_mem) {
		memcpy(out, m->config_mem, m->config_size);
		return 0;
	}
	return bpf_map_lookup_elem(m->config, &k, out) ? -errno : 0;
}

int hbd_maps_set_keepalive(struct hbd_maps *m, uint32_t idle_s, uint32_t cnt,
			   uint32_t user_timeout_ms)
{
	__u32 k = 0;

	if (m->config < 0)
		return -EBADF;
	if (m->config_mem) {
		/* the user timeout first: sock_ops starts setting options once idle is nonzero */
		__atomic_store_n(&m->config_mem->ka_user_timeout_ms, user_timeout_ms,
				 __ATOMIC_RELAXED);
		__atomic_store_n(&m->config_mem->ka_cnt, cnt, __ATOMIC_RELAXED);
		__atomic_store_n(&m->config_mem->ka_intvl_s, idle_s, __ATOMIC_RELAXED);
		__atomic_store_n(&m->config_mem->ka_idle_s, idle_s, __ATOMIC_RELEASE);
		return 0;
	}
	if (bpf_map_lookup_elem(m->config, &k, &m->config_cache))
		return -errno;
	m->config_cache.ka_idle_s = idle_s;
	m->config_cache.ka_intvl_s = idle_s;
	m->config_cache.ka_cnt = cnt;
	m->config_cache.ka_user_timeout_ms = user_timeout_ms;
	return bpf_map_update_elem(m->config, &k, &m->config_cache, BPF_ANY) ? -errno : 0;
}

int hbd_maps_conn_get(struct hbd_maps *m, uint64_t cookie, struct hb_conn *v)
{
	struct hb_conn_key k = { .cookie = cookie };

	return bpf_map_lookup_elem(m->conns, &k, v) ? -errno : 0;
}

void hbd_addr_str(const uint8_t addr[16], char out[HB_PEER_STR])
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	if (!memcmp(addr, mapped, sizeof(mapped)))
		inet_ntop(AF_INET, addr + 12, out, HB_PEER_STR);
	else
		inet_ntop(AF_INET6, addr, out, HB_PEER_STR);
}

void hbd_peer_str(const uint8_t addr[16], uint16_t port_be, char out[HB_PEER_STR])
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	char a[INET6_ADDRSTRLEN], s[INET6_ADDRSTRLEN + 8];

	if (!memcmp(addr, mapped, sizeof(mapped))) {
		inet_ntop(AF_INET, addr + 12, a, sizeof(a));
		snprintf(s, sizeof(s), "%s:%u", a, ntohs(port_be));
	} else {
		inet_ntop(AF_INET6, addr, a, sizeof(a));
		snprintf(s, sizeof(s), "[%s]:%u", a, ntohs(port_be));
	}
	/* the longest real form, "[8 groups of 4]:65535", is 47 characters */
	snprintf(out, HB_PEER_STR, "%.*s", HB_PEER_STR - 1, s);
}
