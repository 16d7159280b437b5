// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Version 2 UDP frames: every one tagged under its session's key, PINGs in a replay window,
 * and a session that moves only after path validation (RFC 9000 8.2).
 *
 * A frame from a source that is not the session's address, with a good tag, gets a
 * PATH_CHALLENGE sent to that source: 8 random bytes under the session key. The session moves
 * when a PATH_RESPONSE carrying them comes back from that same source, which only the device
 * (holding the key, and receiving at that address) can send. Until then the session's answers
 * go to its old address only, and none goes to the new one but the challenge, which is no
 * larger than the frame that caused it and sent at most every CHALLENGE_GAP_MS a session.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "log.h"
#include "maps.h"
#include "proto.h"
#include "sessions.h"
#include "udp_tx.h"
#include "udp_v2.h"
#include "worker.h"

#define CHALLENGE_GAP_MS 200

int hbd_udp_v2_session(struct hbd_worker *w, const uint8_t addr[16], uint16_t port,
		       const struct hb_frame *f, struct hbd_sess_view *v)
{
	struct hbd_v2_in in = {
		.frame = f->raw,
		.len = f->size,
		.ping = f->type == HB_PING,
		.ts = f->type == HB_PING ? hb_get_be64(f->payload) : 0,
		.response = f->type == HB_PATH_RESPONSE ? f->payload : NULL,
		.challenge_gap_ms = CHALLENGE_GAP_MS,
	};
	struct hbd_maps *m = &w->d->kern.maps;
	bool kern = w->d->kern.offload && in.ping;
	struct hb_session e;
	struct hb_path ch;
	int rc;

	/* One window for a session, though two keep it: XDP's in the entry, ours in the table. A
	 * PING here must be newer than the newest either took, and what we take goes into the
	 * entry, so that XDP never answers a copy of it either (a PING reaches us with XDP in
	 * place only from a new address, or while XDP does not answer: then it costs a lookup). */
	if (kern && !hbd_maps_sess_get(m, f->token, &e))
		in.floor_ts = e.last_ts;
	rc = hbd_sess_touch_v2(&w->d->sessions, f->token, addr, port, (uint32_t)w->now_ms, &in, v);
	if (!rc && kern && !hbd_maps_sess_get(m, f->token, &e) && e.last_ts < in.ts) {
		e.last_ts = in.ts;
		hbd_maps_sess_move(m, f->token,
				   &e); /* only over the entry: a killed one stays gone */
	}
	if (rc == -ENOENT) {
		HBD_STAT_ADD(w->st, unknown_session, 1);
		return 1;
	}
	if (rc == -EBADMSG) {
		HBD_STAT_ADD(w->st, udp_bad_tag, 1);
		return 1;
	}
	if (rc == -EALREADY) {
		HBD_STAT_ADD(w->st, udp_replay, 1);
		return 1;
	}
	if (v->challenge) {
		memcpy(ch.data, &v->challenge, sizeof(ch.data));
		HBD_STAT_ADD(w->st, path_challenges, 1);
		hbd_udp_send(w, addr, port, HB_PATH_CHALLENGE, 0, f->token, &ch, sizeof(ch),
			     v->key);
		hb_dbg("udp: session of device %" PRIu64 " heard from a new address: challenged",
		       v->device_id);
	}
	if (v->rebound)
		HBD_STAT_ADD(w->st, path_moves, 1);
	return 0;
}
