// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* MQTT 3.1.1 devices on the MQTT port (hbd --mqtt-port): packets in, sessions, replies out.
 *
 * An MQTT connection is a TCP connection of tcp.h's lifecycle with CF_MQTT: the same slots,
 * admission, output queue and close; its bytes come here instead of to the hbeat frame
 * decoder, and what leaves is MQTT packets (no hbeat frame ever: tcp_conn.c drops the final
 * BYE/ERROR of a close, as MQTT 3.1.1 has no server-side DISCONNECT).
 *
 * What a device may do, and what anything else costs it (docs/MQTT.md):
 *   CONNECT first and once: user name = device id, password = hb_mqtt_password() for the
 *     server's realm; protocol level 4 only (5.0 and 3.1 get CONNACK 0x01), bad credentials
 *     CONNACK 0x05, both then closed. A second CONNECT, any packet before CONNECT, a malformed
 *     one (reserved flags, a remaining length of more than 4 bytes, fields that do not fill
 *     it): closed without a word.
 *   PINGREQ -> PINGRESP; PUBLISH QoS 0/1 to devices/<id>/up[/...] -> the sink, PUBACK once it
 *     is written; QoS 2, or another topic: closed, nothing stored. SUBSCRIBE
 *     devices/<id>/down only (anything else SUBACK 0x80); downlinks are PUBLISH QoS 1 whose
 *     PUBACK reports delivery. DISCONNECT: a clean end; any other end records the Will.
 */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "hello.h"
#include "log.h"
#include "mqtt.h"
#include "mqtt_conn.h"
#include "tcp_impl.h"
#include "uring_sock.h"

#define SECONDS_PER_DAY 86400

/* The most a device may send in one packet: a PUBLISH of --max-payload with a topic, or a
 * CONNECT with its strings; it must fit a large chunk while it is gathered. */
#define MQTT_MAX_REMAIN 1900

static void bad(struct hbd_worker *w, uint32_t slot, const char *why)
{
	HBD_STAT_ADD(w->st, mqtt_bad, 1);
	hb_dbg("mqtt: worker %u slot %u: %s: closing", w->id, slot, why);
	hbd_tcp_close(w, slot, 0, 0);
}

static void send_pkt(struct hbd_worker *w, uint32_t slot, const uint8_t *p, size_t n)
{
	hbd_tcp_send_raw(w, slot, p, (uint16_t)n);
}

static void refuse(struct hbd_worker *w, uint32_t slot, uint8_t rc)
{
	uint8_t b[4];

	HBD_STAT_ADD(w->st, mqtt_refused, 1);
	send_pkt(w, slot, b, hb_mqtt_encode_connack(b, sizeof(b), false, rc));
	hbd_tcp_close(w, slot, 0, 0);
}

/* The credentials of a CONNECT: 0 and the device id, or the CONNACK code that refuses them. */
static uint8_t check_credentials(struct hbd_worker *w, const struct hb_mqtt_connect *m,
				 uint64_t *id)
{
	const struct hbd_config *cfg = w->d->cfg;
	uint8_t secret[HB_SECRET_MAX];
	uint32_t today = (uint32_t)(hb_realtime_ms() / 1000 / SECONDS_PER_DAY);
	int slen, rc;

	*id = m->has_user ? hb_mqtt_user_device(m->user) : 0;
	if (!*id || !m->has_pass)
		return HB_MQTT_CONNACK_NOT_AUTHORIZED;
	slen = hb_keystore_secret(hbd_keys(w->d), *id, secret);
	if (slen < 0)
		return HB_MQTT_CONNACK_NOT_AUTHORIZED;
	rc = hb_mqtt_password_check(secret, (size_t)slen, cfg->mqtt_realm, *id, m->pass, today,
				    cfg->mqtt_max_days);
	memset(secret, 0, sizeof(secret));
	if (rc != HB_MQTT_PW_OK) {
		static uint64_t last_log;

		if (hbd_log_due(&last_log, w->now_ms, 1000))
			hb_info("mqtt: CONNECT of device %" PRIu64 " refused: password %s (logged "
				"at most once a second)",
				*id, hb_mqtt_pw_str(rc));
		return HB_MQTT_CONNACK_NOT_AUTHORIZED;
	}
	return HB_MQTT_CONNACK_OK;
}

/* Keepalive 0: the device relies on the transport, so the kernel's TCP keepalive watches the
 * connection (the --interval timing of hbctl load --tcp keepalive); its close of a dead peer
 * ends the recv with ETIMEDOUT, which expires the device (tcp_frames.c). */
static void transport_liveness(struct hbd_worker *w, uint32_t slot)
{
	static const int one = 1;
	static int idle, cnt, uto;
	const struct hbd_limits *l = &w->d->lim;
	const struct {
		int level, name;
		const int *v;
	} opts[] = {
		{ SOL_SOCKET, SO_KEEPALIVE, &one },	 { IPPROTO_TCP, TCP_KEEPIDLE, &idle },
		{ IPPROTO_TCP, TCP_KEEPINTVL, &idle },	 { IPPROTO_TCP, TCP_KEEPCNT, &cnt },
		{ IPPROTO_TCP, TCP_USER_TIMEOUT, &uto },
	};

	/* read by the kernel when the SQEs run: static storage, the same for every connection */
	idle = (int)hbd_keepalive_period_s(l->interval_ms);
	cnt = (int)w->d->cfg->keepalive_probes;
	uto = (int)(idle * (cnt + 1) * 1000);
	for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
		struct io_uring_sqe *sqe = hbd_sqe(w);

		if (!sqe)
			return;
		hb_prep_setsockopt(sqe, (int)slot, opts[i].level, opts[i].name, opts[i].v,
				   sizeof(int));
		sqe->flags |= IOSQE_FIXED_FILE | IOSQE_CQE_SKIP_SUCCESS;
		io_uring_sqe_set_data64(sqe, hbd_ud(HBD_OP_CANCEL, slot, w->conns[slot].gen, 0));
	}
	w->conns[slot].flags |= CF_KEEPALIVE;
}

static void on_connect(struct hbd_worker *w, uint32_t slot, const struct hb_mqtt_pkt *p)
{
	struct hbd_conn *c = &w->conns[slot];
	struct hbd_mqtt_sess *s = &w->mq[slot];
	struct hbd_daemon *d = w->d;
	struct hb_mqtt_connect m;
	struct hb_mqtt_str rest;
	uint64_t id, old_loc = 0, loc = hbd_loc(0, w->id, c->gen, slot);
	unsigned n, pending;
	uint8_t rc;
	uint8_t b[4];
	int prc;

	if (c->state != CONN_NEW) {
		bad(w, slot, "second CONNECT");
		return;
	}
	prc = hb_mqtt_parse_connect(p, &m);
	if (prc == HB_MQTT_E_LEVEL || prc == HB_MQTT_E_PROTO_NAME) {
		refuse(w, slot, HB_MQTT_CONNACK_PROTOCOL);
		return;
	}
	if (prc) {
		bad(w, slot, hb_mqtt_rc_str(prc));
		return;
	}
	/* MQTT-3.1.3-8: an empty client id asks for a clean session */
	if (!m.client_id.len && !m.clean_session) {
		refuse(w, slot, HB_MQTT_CONNACK_ID);
		return;
	}
	rc = check_credentials(w, &m, &id);
	/* a Will is published to the device's own uplink or not at all */
	if (!rc && m.will &&
	    (hb_mqtt_topic_device(m.will_topic, "up", &rest) != id ||
	     m.will_msg.len > d->cfg->max_payload))
		rc = HB_MQTT_CONNACK_NOT_AUTHORIZED;
	if (rc) {
		uint32_t src = w->src ? w->src[slot] : HBD_KEY_NONE;

		HBD_STAT_ADD(w->st, auth_fail, 1);
		if (src != HBD_KEY_NONE)
			hbd_keytab_charge_at(&d->sources, src, hb_mono_us());
		refuse(w, slot, rc);
		return;
	}
	n = __atomic_load_n(&d->tcp_clients, __ATOMIC_RELAXED);
	pending = __atomic_load_n(&d->tcp_pending, __ATOMIC_RELAXED);
	if (n > pending && n - pending >= d->cfg->max_clients) {
		HBD_STAT_ADD(w->st, full, 1);
		refuse(w, slot, HB_MQTT_CONNACK_UNAVAILABLE);
		return;
	}
	hbd_mqtt_sess_reset(s);
	if (m.will && hbd_mqtt_sess_set_will(s, m.will_msg.p, m.will_msg.len)) {
		HBD_STAT_ADD(w->st, errors, 1);
		refuse(w, slot, HB_MQTT_CONNACK_UNAVAILABLE);
		return;
	}
	if (hbd_devices_claim(d->devices, id, loc, hb_keystore_tag(hbd_keys(d)), &old_loc)) {
		HBD_STAT_ADD(w->st, errors, 1);
		refuse(w, slot, HB_MQTT_CONNACK_UNAVAILABLE);
		return;
	}
	s->keepalive = m.keepalive;
	c->device_id = id;
	c->state = CONN_AUTHED;
	hbd_tcp_pending_done(w, c);
	c->last_seen = hbd_tcp_now32(w);
	hb_wheel_del(&w->tcp_wheel, slot);
	/* with mqtt_kernel the kernel answers its PINGREQs from here on, and the CONNACK waits
	 * until it can; the entry's flags say MQTT and the keepalive for hbctl conns */
	if (hbd_tcp_kernel_admit(w, slot, id,
				 HB_CONN_MQTT | (uint32_t)m.keepalive << HB_CONN_MQTT_KA_SHIFT)) {
		refuse(w, slot, HB_MQTT_CONNACK_UNAVAILABLE);
		return;
	}
	if (m.keepalive)
		hb_wheel_add(&w->tcp_wheel, slot, w->now_ms + hbd_mqtt_timeout_ms(s));
	else
		transport_liveness(w, slot);
	send_pkt(w, slot, b, hb_mqtt_encode_connack(b, sizeof(b), false, HB_MQTT_CONNACK_OK));
	HBD_STAT_ADD(w->st, auth_ok, 1);
	HBD_STAT_ADD(w->st, tcp_authed, 1);
	HBD_STAT_ADD(w->st, mqtt_connects, 1);
	hb_dbg("mqtt: device %" PRIu64 " connected, keepalive %u s (worker %u slot %u)", id,
	       m.keepalive, w->id, slot);
	hbd_presence(w, HBD_EV_ONLINE, id, loc, NULL, 0);
	/* MQTT's client-id takeover, across transports: the older session goes */
	hbd_supersede(w, old_loc);
}

/* A subtopic is kept in the sink as it came: letters, digits and "/_-." only, so the record
 * needs no escaping and stays within its line length. */
static bool topic_chars_ok(struct hb_mqtt_str t)
{
	for (uint16_t i = 0; i < t.len; i++) {
		uint8_t ch = t.p[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '/' || ch == '_' || ch == '-' || ch == '.'))
			return false;
	}
	return true;
}

static void on_publish(struct hbd_worker *w, uint32_t slot, const struct hb_mqtt_pkt *p)
{
	struct hbd_conn *c = &w->conns[slot];
	struct hb_mqtt_publish m;
	struct hb_mqtt_str rest;
	struct hbd_ack a = { .slot = slot, .gen = c->gen };
	struct timespec now;
	uint8_t key[16];
	int rc = hb_mqtt_parse_publish(p, &m);

	if (rc) {
		bad(w, slot, hb_mqtt_rc_str(rc));
		return;
	}
	if (m.qos == 2) {
		bad(w, slot, "QoS 2 is not supported");
		return;
	}
	if (hb_mqtt_topic_device(m.topic, "up", &rest) != c->device_id ||
	    m.topic.len > HBD_SINK_TOPIC_MAX || !topic_chars_ok(m.topic)) {
		bad(w, slot, "PUBLISH outside the device's devices/<id>/up");
		return;
	}
	if (m.payload_len > w->d->cfg->max_payload) {
		HBD_STAT_ADD(w->st, too_large, 1);
		bad(w, slot, "PUBLISH above --max-payload");
		return;
	}
	hbd_key_u64(c->device_id, key);
	if (c->sink_pending == UINT16_MAX || !hbd_keytab_take(&w->d->data_rl, key, hb_mono_us())) {
		HBD_STAT_ADD(w->st, data_rate_limited, 1);
		hbd_tcp_close(w, slot, 0, 0);
		return;
	}
	/* the ACK's seq is the packet id to acknowledge, 0 for QoS 0 (no PUBACK) */
	a.seq = m.qos ? m.packet_id : 0;
	clock_gettime(CLOCK_REALTIME, &now);
	if (hbd_sink_add_topic(&w->sink, c->device_id, "mqtt", (const char *)m.topic.p, m.topic.len,
			       a.seq, &now, m.payload, m.payload_len, &a)) {
		HBD_STAT_ADD(w->st, errors, 1);
		hbd_tcp_close(w, slot, 0, 0);
		return;
	}
	HBD_STAT_ADD(w->st, frames_data, 1);
	HBD_STAT_ADD(w->st, mqtt_publish, 1);
	c->sink_pending++;
}

static void on_subscribe(struct hbd_worker *w, uint32_t slot, const struct hb_mqtt_pkt *p)
{
	struct hbd_conn *c = &w->conns[slot];
	struct hb_mqtt_subscribe s;
	uint8_t codes[HB_MQTT_MAX_FILTERS], b[16];
	int rc = hb_mqtt_parse_subscribe(p, &s);

	if (rc) {
		bad(w, slot, hb_mqtt_rc_str(rc));
		return;
	}
	for (unsigned i = 0; i < s.n; i++) {
		struct hb_mqtt_str rest;
		bool own = hb_mqtt_topic_device(s.filter[i], "down", &rest) == c->device_id &&
			   !rest.len;

		/* downlinks go out at QoS 1 at most */
		codes[i] = own ? (s.qos[i] ? 1 : 0) : HB_MQTT_SUBACK_FAIL;
		if (own)
			w->mq[slot].subscribed = true;
	}
	send_pkt(w, slot, b, hb_mqtt_encode_suback(b, sizeof(b), s.packet_id, codes, s.n));
}

static void on_packet(struct hbd_worker *w, uint32_t slot, const struct hb_mqtt_pkt *p)
{
	struct hbd_conn *c = &w->conns[slot];
	static const uint8_t pingresp[2] = { HB_MQTT_PINGRESP_B0, 0 };
	uint16_t pid;

	if (p->type == HB_MQTT_CONNECT) {
		on_connect(w, slot, p);
		return;
	}
	if (c->state != CONN_AUTHED) {
		bad(w, slot, "a packet before CONNECT");
		return;
	}
	hbd_tcp_heard(w, slot);
	switch (p->type) {
	case HB_MQTT_PINGREQ:
		if (hb_mqtt_parse_empty(p)) {
			bad(w, slot, "PINGREQ with a body");
			return;
		}
		/* the kernel did not answer this one (not admitted to its map, or no MQTT
		 * programs): the daemon is the fallback, as for hbeat's PING */
		HBD_STAT_ADD(w->st, mqtt_pings_user, 1);
		send_pkt(w, slot, pingresp, sizeof(pingresp));
		return;
	case HB_MQTT_PUBLISH:
		on_publish(w, slot, p);
		return;
	case HB_MQTT_PUBACK:
		if (hb_mqtt_parse_ack(p, &pid)) {
			bad(w, slot, "malformed PUBACK");
			return;
		}
		hbd_down_acked(w, hbd_loc(0, w->id, c->gen, slot), pid);
		return;
	case HB_MQTT_SUBSCRIBE:
		on_subscribe(w, slot, p);
		return;
	case HB_MQTT_DISCONNECT:
		if (hb_mqtt_parse_empty(p)) {
			bad(w, slot, "DISCONNECT with a body");
			return;
		}
		/* MQTT-3.14.4-3: a DISCONNECT discards the Will */
		hbd_mqtt_sess_reset(&w->mq[slot]);
		HBD_STAT_ADD(w->st, frames_bye, 1);
		hbd_tcp_close(w, slot, 0, 0);
		return;
	default:
		/* QoS 2 flows, UNSUBSCRIBE and the server's own packets: not taken here */
		bad(w, slot, hb_mqtt_type_str(p->type));
		return;
	}
}

/* Hands one whole packet to on_packet; p may sit in the partial chunk, detached first so a
 * close while it is handled cannot free it under us. False when the connection is done. */
static bool take(struct hbd_worker *w, uint32_t slot, const struct hb_mqtt_pkt *p)
{
	on_packet(w, slot, p);
	return hbd_conn_live(&w->conns[slot]);
}

void hbd_mqtt_input(struct hbd_worker *w, uint32_t slot, const uint8_t *p, size_t n)
{
	struct hbd_conn *c = &w->conns[slot];
	struct hb_mqtt_pkt pkt;
	int rc;

	while (n || c->partial != HBD_NONE) {
		if (c->partial != HBD_NONE) {
			uint32_t idx = c->partial;
			struct hbd_chunk *k = hbd_chunk(&w->chunks, idx);
			size_t room = hbd_chunk_cap(&w->chunks, idx) - k->len;
			size_t put = n < room ? n : room, left;

			memcpy(k->data + k->len, p, put);
			k->len += (uint16_t)put;
			p += put;
			n -= put;
			rc = hb_mqtt_decode(k->data, k->len, MQTT_MAX_REMAIN, &pkt);
			if (rc == HB_MQTT_MORE)
				return; /* all of p is in the chunk: a packet fits it whole */
			if (rc < 0)
				goto malformed;
			/* bytes taken past the packet belong to the next one: give them back */
			left = k->len - pkt.size;
			p -= left;
			n += left;
			c->partial = HBD_NONE;
			if (!take(w, slot, &pkt)) {
				hbd_chunk_put(&w->chunks, idx);
				return;
			}
			hbd_chunk_put(&w->chunks, idx);
			continue;
		}
		rc = hb_mqtt_decode(p, n, MQTT_MAX_REMAIN, &pkt);
		if (rc == HB_MQTT_MORE) {
			uint32_t idx = hbd_chunk_alloc(&w->chunks, MQTT_MAX_REMAIN + 5);

			if (idx == HBD_NONE) {
				HBD_STAT_ADD(w->st, errors, 1);
				hbd_tcp_close(w, slot, 0, 0);
				return;
			}
			memcpy(hbd_chunk(&w->chunks, idx)->data, p, n);
			hbd_chunk(&w->chunks, idx)->len = (uint16_t)n;
			c->partial = idx;
			return;
		}
		if (rc < 0)
			goto malformed;
		if (!take(w, slot, &pkt))
			return;
		p += pkt.size;
		n -= pkt.size;
	}
	return;
malformed:
	if (rc == HB_MQTT_E_TOO_LARGE)
		HBD_STAT_ADD(w->st, too_large, 1);
	bad(w, slot, hb_mqtt_rc_str(rc));
}

void hbd_mqtt_ack(struct hbd_worker *w, uint32_t slot, uint16_t packet_id)
{
	uint8_t b[4];

	if (packet_id)
		send_pkt(w, slot, b, hb_mqtt_encode_ack(b, sizeof(b), HB_MQTT_PUBACK, packet_id));
}

int hbd_mqtt_send_down(struct hbd_worker *w, uint32_t slot, uint16_t seq, const void *payload,
		       uint16_t len)
{
	struct hbd_conn *c = &w->conns[slot];
	uint8_t b[HB_MAX_PAYLOAD + HB_MQTT_TOPIC_MAX + 8];
	char topic[HB_MQTT_TOPIC_MAX];
	struct hb_mqtt_publish m = { .qos = 1, .packet_id = seq, .payload = payload };
	size_t n;

	/* a device that did not subscribe to its downlink cannot take one */
	if (!w->mq[slot].subscribed || !seq)
		return -ENOENT;
	m.topic = hb_mqtt_cstr(topic, hb_mqtt_topic(topic, sizeof(topic), c->device_id, "down"));
	m.payload_len = len;
	n = hb_mqtt_encode_publish(b, sizeof(b), &m);
	if (!n)
		return -ENOMEM;
	send_pkt(w, slot, b, n);
	return c->flags & CF_BROKEN ? -ENOMEM : 0;
}
