// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* What a starting hbd does about the daemon before it: one daemon per pin directory, UDP
 * sessions adopted from the pinned map, TCP entries of dead connections removed, and a replay
 * floor for the HELLOs that daemon may have seen.
 *
 * After a crash (kill -9), the kernel keeps answering the heartbeats of admitted UDP sessions
 * for the grace period (config.grace_ns). A daemon started within it takes those sessions over
 * from the sessions map, so their devices never notice; its own stamp then keeps the fast path
 * on. TCP connections cannot survive their process: the kernel closes them, the devices
 * reconnect, and sock_ops removes their conns entries; entries that outlived that (sock_ops
 * detached, a crash mid-update) are removed here. A planned restart uses the upgrade instead
 * (upgrade.c), which keeps TCP connections too.
 */
#include <bpf/bpf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "log.h"
#include "pins.h"
#include "restart.h"
#include "worker.h"

int hbd_instance_lock(const char *pin_path, int *fd_out, char *why, size_t whylen)
{
	char path[512] = "";
	int fd = -1;

	/* the places are pins.h's, so that hbctl load finds the lock too */
	for (unsigned i = 0; fd < 0 && !hb_daemon_lock_path(pin_path, i, path, sizeof(path)); i++)
		fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		snprintf(why, whylen, "lock file %s: %s", path, strerror(errno));
		return -errno;
	}
	if (flock(fd, LOCK_EX | LOCK_NB)) {
		int rc = -errno;

		snprintf(
			why, whylen,
			"another hbd serves %s (it holds %s); two daemons on one set of maps would "
			"undo each other's sessions. To replace it without dropping devices: "
			"kill -USR2 <its pid>",
			pin_path, path);
		close(fd);
		return rc == -EWOULDBLOCK ? -EBUSY : rc;
	}
	*fd_out = fd;
	return 0;
}

/* Keys of a map, walked before anything is deleted (deleting while walking restarts it). */
static size_t map_keys(int fd, uint64_t **out, size_t max)
{
	uint64_t k, next, *keys = NULL;
	size_t n = 0, cap = 0;
	void *prev = NULL;

	while (n < max && !bpf_map_get_next_key(fd, prev, &next)) {
		if (n == cap) {
			uint64_t *t = realloc(keys, (cap ? 2 * cap : 1024) * sizeof(*t));

			if (!t)
				break;
			keys = t;
			cap = cap ? 2 * cap : 1024;
		}
		keys[n++] = next;
		k = next;
		prev = &k;
	}
	*out = keys;
	return n;
}

unsigned hbd_clean_stale_conns(struct hbd_daemon *d)
{
	uint64_t *keys;
	size_t n = map_keys(d->kern.maps.conns, &keys, HB_MAX_CONNS);
	unsigned removed = 0;

	/* Runs before this daemon's listeners exist: no TCP connection in the map is ours, and a
	 * dead daemon's connections died with it. NEW entries belong to connections still being
	 * set up (another process's listener on the port, or a socket whose close sock_ops has not
	 * seen yet): left alone, sock_ops removes them.
	 */
	for (size_t i = 0; i < n; i++) {
		struct hb_conn_key k = { .cookie = keys[i] };
		struct hb_conn v;

		if (!bpf_map_lookup_elem(d->kern.maps.conns, &k, &v) && v.state != HB_STATE_NEW &&
		    !bpf_map_delete_elem(d->kern.maps.conns, &k))
			removed++;
	}
	free(keys);
	if (removed) {
		HBD_STAT_ADD(&d->stats[0], stale_conns, removed);
		hb_info("removed %u conns entries of TCP connections an earlier daemon left behind",
			removed);
	}
	return removed;
}

/* One AUTHED session of the map into the daemon's tables. Returns 0, or -errno to drop it. */
static int adopt_one(struct hbd_daemon *d, uint64_t token, const struct hb_session *v,
		     unsigned owner, uint64_t floor_ms)
{
	struct hbd_worker *w = d->workers[owner];
	struct hbd_sessions *t = &d->sessions;
	struct hbd_sess *s;
	uint32_t idx, last, silent;
	uint64_t loc, ns;
	int rc;

	rc = hbd_sess_alloc(t, owner, &idx);
	if (rc)
		return rc;
	s = &t->s[idx];
	s->device_id = v->device_id;
	memcpy(s->addr, v->addr, sizeof(s->addr));
	s->port = v->port;
	hbd_sess_set_v2(s, v->version == HB_VERSION_2 ? HB_VERSION_2 : HB_VERSION, v->key,
			v->last_ts);
	/* last_seen on this daemon's clock: older than our start is negative, which the wrapping
	 * 32-bit comparisons handle like any past time (a session the dead daemon never heard
	 * from after its HELLO has that HELLO's stamp)
	 */
	last = hbd_adopt_seen(d, v->last_seen_ns, (uint32_t) - (int32_t)d->lim.timeout_ms);
	s->last_seen = last;
	rc = hbd_sess_publish(t, idx, token);
	if (rc) {
		hbd_sess_release(t, idx);
		return rc;
	}
	loc = hbd_loc(1, owner, s->gen, idx);
	rc = hbd_devices_adopt(d->devices, v->device_id, floor_ms, loc);
	if (rc) {
		struct hbd_sess gone;

		hbd_sess_get(t, idx, s->gen, true, &gone);
		hbd_sess_release(t, idx);
		return rc;
	}
	/* the entry names the dead daemon's seen slot: ours from now on; a heartbeat since the
	 * walk read the entry counts too
	 */
	if (!hbd_maps_sess_reseat(&d->kern.maps, token, hbd_seen_udp(d, idx), &ns))
		last = hbd_adopt_seen(d, ns, last);
	__atomic_store_n(&s->last_seen, last, __ATOMIC_RELAXED);
	silent = hbd_silence(w, last);
	hb_wheel_add(&w->udp_wheel, idx,
		     w->now_ms - (silent < d->lim.timeout_ms ? silent : d->lim.timeout_ms) +
			     d->lim.timeout_ms);
	HBD_STAT_ADD(w->st, udp_active, 1);
	HBD_STAT_ADD(w->st, adopted, 1);
	return 0;
}

unsigned hbd_adopt_sessions(struct hbd_daemon *d, uint64_t floor_ms)
{
	uint64_t *tokens;
	size_t n = map_keys(d->kern.maps.sessions, &tokens, HB_MAX_SESSIONS);
	unsigned adopted = 0, dropped = 0;

	for (size_t i = 0; i < n; i++) {
		struct hb_session_key k = { .token = tokens[i] };
		struct hb_session v;

		if (bpf_map_lookup_elem(d->kern.maps.sessions, &k, &v))
			continue;
		/* under --require-udp-mac a version 1 session goes: its device says HELLO again
		 * and is told why it is refused */
		if (v.state == HB_STATE_AUTHED && v.device_id &&
		    (v.version == HB_VERSION_2 || !d->cfg->require_udp_mac) &&
		    !adopt_one(d, k.token, &v, (unsigned)(i % d->plan.workers), floor_ms)) {
			adopted++;
			continue;
		}
		/* not admitted, the device twice, or no room: its device must say HELLO again */
		bpf_map_delete_elem(d->kern.maps.sessions, &k);
		dropped++;
	}
	free(tokens);
	if (adopted)
		hb_info("took over %u UDP sessions from the pinned map: their devices go on "
			"undisturbed",
			adopted);
	if (dropped)
		hb_warn("%u sessions in the pinned map were not taken over (not admitted, a device "
			"twice, or --max-clients reached): their devices must authenticate again",
			dropped);
	return adopted;
}
