/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* MQTT on the sockhash: the stream parser and verdict hb_parser/hb_verdict switch to for a
 * socket on the MQTT port (sk_skb_hb.bpf.c). The parser frames MQTT's fixed header (one type
 * byte, a 1..4 byte remaining length); the verdict answers PINGREQ (C0 00) with PINGRESP
 * (D0 00) on an admitted connection and hands every other packet to hbd, with the rules of
 * hbeat's PING: conns entry AUTHED, daemon alive, otherwise hbd answers.
 *
 * As for hbeat frames, a packet does not start at offset 0 of the skb the programs see (two
 * packets coalesced in one segment): off is the strparser's offset of the message.
 */
#ifndef HB_MQTT_BPF_H
#define HB_MQTT_BPF_H

#include "hb_vmlinux.bpf.h"
#include <bpf/bpf_helpers.h>

#include "hbeat_abi.h"
#include "hb_maps.bpf.h"

/* The MQTT port, host order (0: none); set by the loader (hbctl load --mqtt-port). */
const volatile __u16 hb_mqtt_port = 0;

/* Larger MQTT packets are not hbd's to take (it closes the connection for them): the parser
 * hands what it has to hbd at once instead of buffering up to a length the device claims. */
#define HB_MQTT_BPF_MAX_REMAIN 1900

static __always_inline int hb_mqtt_sock(struct __sk_buff *skb)
{
	return hb_mqtt_port && skb->local_port == hb_mqtt_port;
}

/* The length of the MQTT packet at off; 0 while its header is incomplete; everything
 * available when the header is malformed (a fifth length byte) or the packet is too large, so
 * hbd sees it and closes. */
static __always_inline int hb_mqtt_parse(struct __sk_buff *skb, __u32 off)
{
	__u8 h[5] = {};
	__u32 avail, want, len = 0;

	if (off >= skb->len)
		return 0;
	avail = skb->len - off;
	if (avail < 2)
		return 0;
	want = avail < sizeof(h) ? avail : sizeof(h);
	/* a constant size for the verifier: load 2..5 bytes by cases */
	if (want == 5) {
		if (bpf_skb_load_bytes(skb, off, h, 5) < 0)
			return avail;
	} else if (want == 4) {
		if (bpf_skb_load_bytes(skb, off, h, 4) < 0)
			return avail;
	} else if (want == 3) {
		if (bpf_skb_load_bytes(skb, off, h, 3) < 0)
			return avail;
	} else {
		if (bpf_skb_load_bytes(skb, off, h, 2) < 0)
			return avail;
	}
#pragma unroll
	for (int i = 1; i < 5; i++) {
		if ((__u32)i >= want)
			return 0; /* the length goes on past what has arrived */
		len |= (__u32)(h[i] & 0x7f) << (7 * (i - 1));
		if (!(h[i] & 0x80)) {
			if (len > HB_MQTT_BPF_MAX_REMAIN) {
				HB_COUNT(sk_malformed);
				return avail;
			}
			return 1 + i + len;
		}
	}
	HB_COUNT(sk_malformed);
	return avail;
}

#define HB_MQTT_TO_DAEMON (-1) /* the caller hands the packet to hbd (to_daemon) */

/* Verdict for the MQTT packet at off: SK_PASS once answered (or when an answer failed and the
 * packet is left in place for hbd), HB_MQTT_TO_DAEMON for hbd. */
static __always_inline int hb_mqtt_verdict(struct __sk_buff *skb, __u32 off,
					   struct hb_conn_key *key)
{
	__u8 h[2], resp = 0xd0, req = 0xc0;
	struct hb_conn *conn;
	__u64 now;

	if (bpf_skb_load_bytes(skb, off, h, 2) < 0 || h[0] != req || h[1] != 0) {
		HB_COUNT(mq_pass);
		return HB_MQTT_TO_DAEMON;
	}
	conn = bpf_map_lookup_elem(&conns, key);
	if (!conn) {
		HB_COUNT(sk_no_conn);
		return HB_MQTT_TO_DAEMON;
	}
	if (conn->state != HB_STATE_AUTHED) {
		HB_COUNT(sk_not_authed);
		return HB_MQTT_TO_DAEMON;
	}
	now = bpf_ktime_get_ns();
	if (!hb_daemon_alive(now)) {
		HB_COUNT(sk_daemon_dead);
		return HB_MQTT_TO_DAEMON;
	}
	/* rewrite, then redirect; a refused redirect puts the PINGREQ back for hbd */
	if (bpf_skb_store_bytes(skb, off, &resp, 1, 0) < 0) {
		HB_COUNT(sk_redirect_err);
		return SK_PASS;
	}
	if (bpf_sk_redirect_hash(skb, &sockhash, key, 0) != SK_PASS) {
		bpf_skb_store_bytes(skb, off, &req, 1, 0);
		HB_COUNT(sk_redirect_err);
		return SK_PASS;
	}
	conn->last_seen_ns = now;
	__sync_fetch_and_add(&conn->pings, 1);
	hb_stamp_seen(conn->seen_slot, now);
	HB_COUNT(mq_pong);
	return SK_PASS;
}

#endif /* HB_MQTT_BPF_H */
