// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* HELLO handling shared by TCP and UDP: MAC and clock window (auth.h), replay, superseding. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "hello.h"
#include "log.h"
#include "worker.h"

int hbd_hello_check_at(struct hbd_daemon *d, const struct hb_hello_msg *m, uint64_t loc,
		       uint64_t now_ms, struct hbd_hello_result *r)
{
	const struct hb_keystore *ks = hbd_keys(d); /* once: the session records which store */
	const struct hb_hello_bound *h = &m->h;
	int rc;

	r->device_id = hb_get_be64(&h->device_id);
	r->old_loc = 0;
	r->token = 0;
	rc = hb_hello_msg_verify(ks, m, d->lim.server_id, now_ms, d->lim.window_ms, r->prk);
	if (rc != HB_AUTH_OK)
		return rc;
	/* shortly after a restart: the previous daemon's replay state is gone (restart.c) */
	if (now_ms < d->replay.until_ms && hb_get_be64(&h->ts_ms) <= d->replay.floor_ms)
		return HBD_REFUSE_REPLAY;
	/* Replay: the device table keeps the newest accepted timestamp per device, so a HELLO
	 * captured and resent within the clock window is refused (it is not newer).
	 */
	rc = hbd_devices_hello(d->devices, r->device_id, hb_get_be64(&h->ts_ms), loc,
			       hb_keystore_tag(ks), &r->old_loc);
	if (rc == -EALREADY)
		return HBD_REFUSE_REPLAY;
	if (rc)
		return rc;
	/* a zero token means "no session" on the wire */
	do {
		if (hb_random(&r->token, sizeof(r->token))) {
			hbd_devices_release(d->devices, r->device_id, loc);
			return -EIO;
		}
	} while (!r->token);
	return 0;
}

int hbd_hello_check(struct hbd_worker *w, const struct hb_hello_msg *h, uint64_t loc,
		    struct hbd_hello_result *r)
{
	return hbd_hello_check_at(w->d, h, loc, hb_realtime_ms(), r);
}

const char *hbd_auth_str(int rc)
{
	if (rc == HBD_REFUSE_REPLAY)
		return "replayed HELLO (timestamp not newer than the last accepted)";
	if (rc < 0)
		return "internal error";
	return hb_auth_str(rc);
}

bool hbd_map_full(struct hbd_worker *w, int rc, const char *map, uint64_t device_id)
{
	static uint64_t last_log;
	bool refuse = w->d->cfg->map_full_refuse;

	if (rc == -E2BIG || rc == -ENOMEM || rc == -ENOSPC) {
		HBD_STAT_ADD(w->st, map_full, 1);
		if (hbd_log_due(&last_log, w->now_ms, 10000))
			hb_warn("%s map full (hbctl load --max-conns/--max-sessions sets its size): "
				"device %" PRIu64 " %s (--on-map-full; logged once per 10 s)",
				map, device_id,
				refuse ? "refused"
				       : "served in userspace, kernel fast path skipped");
		return refuse;
	}
	HBD_STAT_ADD(w->st, errors, 1);
	if (hbd_log_due(&last_log, w->now_ms, 10000))
		hb_warn("%s update for device %" PRIu64 ": %s: its heartbeats will be answered in "
			"userspace (logged once per 10 s)",
			map, device_id, strerror(-rc));
	return false;
}

void hbd_supersede(struct hbd_worker *w, uint64_t old_loc)
{
	if (!old_loc)
		return;
	hbd_worker_msg(w, hbd_loc_worker(old_loc),
		       (old_loc & HBD_LOC_UDP) ? HBD_OP_MSG_KILL_UDP : HBD_OP_MSG_KILL_TCP,
		       hbd_loc_index(old_loc), hbd_loc_gen(old_loc), HB_BYE_SUPERSEDED);
}

size_t hbd_welcome(struct hbd_worker *w, uint64_t token, uint32_t flags, void *out)
{
	const struct hbd_limits *l = &w->d->lim;
	bool ka = flags & HB_WELCOME_KEEPALIVE;
	struct hb_welcome wel;
	__be32 f = htobe32(flags);

	hb_put_be64(&wel.token, token);
	wel.interval_ms = htobe32(ka ? l->ka_idle_s * 1000 : (uint32_t)l->interval_ms);
	wel.timeout_ms = htobe32(ka ? l->ka_timeout_ms : (uint32_t)l->timeout_ms);
	memcpy(out, &wel, sizeof(wel));
	if (!flags)
		return sizeof(wel);
	memcpy((uint8_t *)out + sizeof(wel), &f, sizeof(f));
	return HB_WELCOME_FLAGS_LEN;
}
