// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Key store reload: swap, wait until no worker can still hold the old store, cut the sessions
 * the new store does not admit under the key they came in with.
 *
 * Workers read d->keys.cur once per HELLO and publish, at the top of every loop iteration, the
 * reload epoch they have seen. The store is swapped before the epoch moves on, so once every
 * worker shows the new epoch none is inside a HELLO check that began with the old store, and
 * every session admitted with it is in the device table, where the sweep below finds it.
 *
 * Each store carries a tag (1..255, from the epoch) and the device table records, with each
 * session, the tag of the store that verified its HELLO. The sweep skips the sessions the new
 * store verified (a device that reconnected with its new key between the swap and the sweep
 * must not be cut) and compares, for every other one, the old store's secret with the new
 * one's: revoked or removed, or given another secret (a leaked key replaced, a range's master
 * rotated), the session is cut; otherwise it counts as the new store's from then on, so a
 * session's tag is always the current or the previous store's, never a stale one a wrapped tag
 * could be mistaken for. The old store is freed after the sweep; no secret is copied out of a
 * store for the comparison.
 */
#include "reload.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "notify.h"
#include "worker.h"

/* Workers pass the epoch within microseconds of their wake-up; a worker that takes longer is
 * stuck, and the control thread must get back to the liveness stamp well inside --grace. */
#define EPOCH_WAIT_MS 1000

static bool workers_passed(struct hbd_daemon *d, uint64_t epoch)
{
	for (unsigned i = 0; i < d->plan.workers; i++) {
		struct hbd_worker *w = d->workers[i];

		/* a worker that has stopped looping holds no store either */
		if (w && !__atomic_load_n(&w->exited, __ATOMIC_ACQUIRE) &&
		    __atomic_load_n(&w->epoch, __ATOMIC_ACQUIRE) < epoch)
			return false;
	}
	return true;
}

struct sweep {
	struct hbd_daemon *d;
	const struct hb_keystore *old, *ks;
	unsigned cut, rekeyed;
};

/* The tag of the store a reload to epoch installs (0 is "not known"). */
static uint8_t store_tag(uint64_t epoch)
{
	return (uint8_t)(1 + epoch % 255);
}

static bool keep_session(void *arg, uint64_t device, uint64_t loc)
{
	struct sweep *s = arg;

	if (hb_keystore_knows(s->ks, device)) {
		if (hb_keystore_same_secret(s->old, s->ks, device))
			return true;
		s->rekeyed++;
	} else {
		s->cut++;
	}
	hbd_ctl_msg(s->d, hbd_loc_worker(loc),
		    hbd_ud((loc & HBD_LOC_UDP) ? HBD_OP_MSG_KILL_UDP : HBD_OP_MSG_KILL_TCP,
			   hbd_loc_index(loc), hbd_loc_gen(loc), HB_BYE_REVOKED),
		    0);
	return false;
}

void hbd_keys_tag_first(struct hb_keystore *ks)
{
	hb_keystore_set_tag(ks, store_tag(0));
}

int hbd_keys_reload(struct hbd_daemon *d, struct hbd_reload_result *res, char *why, size_t whylen)
{
	struct timespec ms = { 0, 1000000 };
	struct hb_keystore *nk, *old;
	struct sweep s = { .d = d };
	uint64_t epoch;
	int rc, waited = 0;

	memset(res, 0, sizeof(*res));
	rc = hb_keystore_load(d->cfg->keys, &nk, why, whylen);
	if (rc) {
		hb_warn("key store reload failed, the old keys stay in use: %s", why);
		return rc;
	}
	hbd_notify_reloading();
	/* only this thread moves the epoch on */
	hb_keystore_set_tag(nk, store_tag(__atomic_load_n(&d->keys.epoch, __ATOMIC_RELAXED) + 1));
	old = __atomic_exchange_n(&d->keys.cur, nk, __ATOMIC_ACQ_REL);
	epoch = __atomic_add_fetch(&d->keys.epoch, 1, __ATOMIC_ACQ_REL);
	/* wake every loop so the epoch is passed in microseconds, not at the next tick */
	for (unsigned i = 0; i < d->plan.workers; i++)
		hbd_ctl_msg(d, i, hbd_ud(HBD_OP_MSG_WAKE, 0, 0, 0), 0);
	hbd_ctl_flush(d);
	while (!workers_passed(d, epoch) && waited < EPOCH_WAIT_MS) {
		nanosleep(&ms, NULL);
		waited++;
	}
	s.old = old;
	s.ks = nk;
	hbd_devices_rekey(d->devices, hb_keystore_tag(nk), keep_session, &s);
	hbd_ctl_flush(d);
	if (waited < EPOCH_WAIT_MS) {
		hb_keystore_free(old);
	} else {
		/* a worker is stuck: its HELLO may still read the old store, so keep it to the end */
		hb_warn("a worker did not pass the key reload within %d ms; revocations may miss a "
			"HELLO it was checking",
			EPOCH_WAIT_MS);
		struct hb_keystore **r = realloc(
			d->keys.retired,
			(d->keys.nretired +
			 1) * sizeof(*r)); // NOLINT(bugprone-sizeof-expression): an array of pointers

		if (r) {
			d->keys.retired = r;
			r[d->keys.nretired++] = old;
		}
	}
	HBD_STAT_ADD(&d->stats[0], key_reloads, 1);
	res->devices = hb_keystore_devices(nk) - hb_keystore_revoked(nk);
	res->ranges = hb_keystore_ranges(nk);
	res->revoked = hb_keystore_revoked(nk);
	res->sessions_cut = s.cut;
	res->sessions_rekeyed = s.rekeyed;
	hb_info("key store reloaded from %s: %zu devices, %zu ranges, %zu revoked; %u live "
		"sessions of devices no longer admitted and %u under a replaced key are being cut",
		d->cfg->keys, res->devices, res->ranges, res->revoked, s.cut, s.rekeyed);
	hbd_notify_reloaded(d);
	return 0;
}
