// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Presence events: what the workers tell subscribers of the control socket and, in fleet mode,
 * the fleet thread (which writes them into the hbeat_presence bucket whether or not anyone
 * watches). */
#include "presence.h"

#include <string.h>

#include "worker.h"

void hbd_presence(struct hbd_worker *w, enum hbd_ev_kind kind, uint64_t device, uint64_t loc,
		  const uint8_t *addr, uint16_t port)
{
	struct hbd_daemon *d = w->d;
	bool watched = hbd_events_watched(&d->ctl.events);
	struct hbd_event ev;

	if (!device || (!watched && !d->fleet.on))
		return;
	memset(&ev, 0, sizeof(ev));
	ev.kind = (uint8_t)kind;
	ev.udp = !!(loc & HBD_LOC_UDP);
	ev.device = device;
	ev.session = loc;
	ev.ts_ms = hb_realtime_ms();
	if (addr)
		hbd_peer_str(addr, port, ev.peer);
	if (watched)
		hbd_events_push(&d->ctl.events, &ev);
	if (d->fleet.on)
		hbd_events_push(&d->fleet.q, &ev);
}

enum hbd_ev_kind hbd_presence_end(uint8_t bye_reason)
{
	switch (bye_reason) {
	case HB_BYE_EXPIRED:
		return HBD_EV_EXPIRED;
	case HB_BYE_REVOKED:
		return HBD_EV_REVOKED;
	case HB_BYE_SUPERSEDED:
		return HBD_EV_SUPERSEDED;
	case HB_BYE_SHUTDOWN:
		return HBD_EV_SHUTDOWN;
	default:
		return HBD_EV_OFFLINE;
	}
}
