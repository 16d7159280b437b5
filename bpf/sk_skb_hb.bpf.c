// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hb_parser + hb_verdict: frame the TCP byte stream of every service socket in the sockhash and
 * answer heartbeats of authenticated connections without waking the daemon.
 *
 * Both programs run on the strparser's skb, which is a clone of the whole TCP segment (or, for a
 * frame split across segments, the first segment with the later ones chained on its frag_list).
 * The frame does NOT start at offset 0: with two frames coalesced in one segment the second one
 * starts mid-skb. Its real start is the strparser offset kept in the kernel skb's control block,
 * struct sk_skb_cb → strp.strp.offset, read here through bpf_cast_to_kern_ctx(). All frame
 * access goes through bpf_skb_load_bytes/bpf_skb_store_bytes at that offset, which also copes
 * with non-linear data (a header split across frags or frag_list members).
 *
 * Verdict per frame (one strparser message):
 *  - PING on an AUTHED connection, daemon alive: type byte rewritten to PONG, redirected to the
 *    same socket's egress (bpf_sk_redirect_hash, flags 0), conn heartbeat fields updated (sk_pong);
 *  - BEAT on an AUTHED connection, daemon alive: conn heartbeat fields updated and the frame
 *    consumed (SK_DROP, sk_beat): TCP has already ACKed it, and that ACK is all a BEAT asks for;
 *  - ECHO on an AUTHED connection, daemon alive, payload within the daemon's --max-payload
 *    (config.max_payload): redirected back unchanged (sk_echo);
 *  - everything else: into the daemon's receive queue, redirected to the socket's own ingress
 *    (to_daemon() says why not SK_PASS; sk_pass, sk_not_authed, sk_daemon_dead, sk_no_conn say
 *    why it went there).
 *
 * Kernel features: sockhash + sk_skb stream parser/verdict (4.18), redirect to a socket's
 * ingress with BPF_F_INGRESS (4.17), bpf_get_socket_cookie for sk_skb (4.12),
 * bpf_cast_to_kern_ctx kfunc (6.2), kfunc calls from sk_skb programs (6.2 via the common kfunc
 * set), BTF-typed access to skb->cb as scalar scratch space.
 */
#include "hb_vmlinux.bpf.h"
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "hbeat_abi.h"
#include "hb_frame.bpf.h"
#include "hb_maps.bpf.h"
#include "hb_mqtt.bpf.h"

/* Returns the kernel's struct sk_buff behind the program's __sk_buff (a trusted BTF pointer). */
extern void *bpf_cast_to_kern_ctx(void *obj) __ksym;

/* Start of the current message inside the skb.
 *
 * The direct read is accepted: the verifier walks struct sk_buff's BTF, finds the access inside
 * the char cb[48] array and treats it as scalar scratch space (btf_struct_walk allows an access
 * of any size inside an array of ints, "e.g. skb->cb[]"). The field offsets are CO-RE relocated
 * against the running kernel's sk_skb_cb, so a layout change is caught at load, not misread.
 * On 6.18 the verifier inlines the kfunc to a register move, leaving one 4-byte load at
 * skb + 40 (cb) + 28 (strp.strp.offset); no bpf_probe_read_kernel fallback is needed.
 * tests/test_sockmap.c has the coalesced and split frames that fail if this offset is wrong. */
static __always_inline __u32 strp_msg_offset(struct __sk_buff *skb)
{
	struct sk_buff *kskb = bpf_cast_to_kern_ctx(skb);
	struct sk_skb_cb *scb = (struct sk_skb_cb *)kskb->cb;

	return scb->strp.strp.offset;
}

SEC("sk_skb/stream_parser")
int hb_parser(struct __sk_buff *skb)
{
	__u32 off = strp_msg_offset(skb);
	struct hb_hdr h;
	__u32 avail;

	if (hb_mqtt_sock(skb))
		return hb_mqtt_parse(skb, off);
	/* skb->len counts from the start of the cloned segment; the message begins at off. */
	if (off >= skb->len)
		return 0;
	avail = skb->len - off;
	if (avail < sizeof(h))
		return 0; /* header incomplete: the strparser calls again when more arrives */
	if (bpf_skb_load_bytes(skb, off, &h, sizeof(h)) < 0 || !hb_hdr_valid(&h)) {
		/* Not a frame we can delimit. Hand everything we have to the daemon as one message:
		 * it reports HB_ERR_MALFORMED and closes. avail > 0 also satisfies the strparser's
		 * rule that a message must reach into the newest skb. */
		HB_COUNT(sk_malformed);
		return avail;
	}
	return sizeof(h) + bpf_ntohs(h.len);
}

/* Hands a frame to the daemon by redirecting it into the same socket's receive queue
 * (BPF_F_INGRESS) instead of returning SK_PASS; both reach the daemon's recv() in order.
 * Why: on this kernel (6.18) an SK_PASS message can be counted twice in TCP's copied_seq, once
 * when the strparser read that parsed it settles and again when the daemon reads it. copied_seq
 * then runs ahead of rcv_nxt, tcp_data_ready() sees nothing to read, the strparser is never
 * woken, and the device's next small frames (its PINGs) sit unparsed in the receive queue until
 * hbd expires it. Measured at 500k connections: 230 HELLOs double-counted by exactly their 64
 * bytes (scripts/copied-seq.bt) and 227 devices expired while heartbeating. A redirected
 * message is settled once, by the strparser read, and the daemon's read of it does not move
 * copied_seq. Falls back to SK_PASS if the redirect is refused. */
static __always_inline int to_daemon(struct __sk_buff *skb, struct hb_conn_key *key)
{
	if (bpf_sk_redirect_hash(skb, &sockhash, key, BPF_F_INGRESS) != SK_PASS)
		HB_COUNT(sk_redirect_err);
	return SK_PASS;
}

/* A heartbeat the kernel took (a PING it answered, a BEAT it recorded): what hbd's expiry and
 * hbctl conns read. */
static __always_inline void heartbeat_seen(struct hb_conn *conn, __u64 now, __u16 seq)
{
	conn->last_seen_ns = now;
	conn->last_seq = seq;
	__sync_fetch_and_add(&conn->pings, 1);
	hb_stamp_seen(conn->seen_slot, now);
}

SEC("sk_skb/stream_verdict")
int hb_verdict(struct __sk_buff *skb)
{
	__u32 off = strp_msg_offset(skb);
	struct hb_conn_key key = { .cookie = bpf_get_socket_cookie(skb) };
	__u8 pong = HB_PONG, ping = HB_PING;
	struct hb_conn *conn;
	struct hb_hdr h;
	__u64 now;

	/* the MQTT port's packets (hbctl load --mqtt-port) */
	if (hb_mqtt_sock(skb)) {
		int rc = hb_mqtt_verdict(skb, off, &key);

		return rc == HB_MQTT_TO_DAEMON ? to_daemon(skb, &key) : rc;
	}
	/* A malformed blob from the parser (already counted there) goes to the daemon as is. */
	if (bpf_skb_load_bytes(skb, off, &h, sizeof(h)) < 0 || !hb_hdr_valid(&h))
		return SK_PASS;

	conn = bpf_map_lookup_elem(&conns, &key);
	if (!conn) {
		HB_COUNT(sk_no_conn);
		return to_daemon(skb, &key);
	}
	/* an ECHO larger than the daemon takes is the daemon's to refuse (ERROR(TOO_LARGE)): the
	 * kernel must not reflect what the daemon would not */
	if ((h.type != HB_PING && h.type != HB_ECHO && h.type != HB_BEAT) ||
	    (h.type == HB_ECHO && bpf_ntohs(h.len) > hb_max_payload())) {
		HB_COUNT(sk_pass);
		return to_daemon(skb, &key);
	}
	if (conn->state != HB_STATE_AUTHED) {
		HB_COUNT(sk_not_authed);
		return to_daemon(skb, &key);
	}
	now = bpf_ktime_get_ns();
	if (!hb_daemon_alive(now)) {
		HB_COUNT(sk_daemon_dead);
		return to_daemon(skb, &key);
	}

	if (h.type == HB_BEAT) {
		/* Nothing goes back: the verdict runs after TCP accepted (and ACKed) the segment,
		 * so dropping the frame here only spares the daemon and the kworker. */
		heartbeat_seen(conn, now, bpf_ntohs(h.seq));
		HB_COUNT(sk_beat);
		return SK_DROP;
	}
	if (h.type == HB_PING) {
		/* Rewrite first, then redirect: if the redirect fails the type is put back, so the
		 * daemon receives the PING it can answer, never a half-made PONG. */
		if (bpf_skb_store_bytes(skb, off + offsetof(struct hb_hdr, type), &pong, 1, 0) <
		    0) {
			HB_COUNT(sk_redirect_err);
			return SK_PASS;
		}
		if (bpf_sk_redirect_hash(skb, &sockhash, &key, 0) != SK_PASS) {
			bpf_skb_store_bytes(skb, off + offsetof(struct hb_hdr, type), &ping, 1, 0);
			HB_COUNT(sk_redirect_err);
			return SK_PASS;
		}
		heartbeat_seen(conn, now, bpf_ntohs(h.seq));
		HB_COUNT(sk_pong);
		return SK_PASS;
	}

	/* ECHO: back out verbatim. It proves the device alive as much as a PING does. */
	if (bpf_sk_redirect_hash(skb, &sockhash, &key, 0) != SK_PASS) {
		HB_COUNT(sk_redirect_err);
		return SK_PASS;
	}
	conn->last_seen_ns = now;
	__sync_fetch_and_add(&conn->echoes, 1);
	hb_stamp_seen(conn->seen_slot, now);
	HB_COUNT(sk_echo);
	return SK_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
