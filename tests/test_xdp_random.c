// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hb_xdp fed a few hundred thousand seeded random, truncated and half-valid packets through
 * bpf_prog_test_run_opts, under every session and daemon state. Properties:
 *   - XDP_TX only for a well-formed PING carrying the admitted session's token from the
 *     session's own address and port, to a unicast MAC and this host's address, while the
 *     session is AUTHED and the daemon alive (never for broadcast, multicast or another host);
 *   - every such PING is answered (XDP_TX), and what leaves is its PONG;
 *   - any packet not answered leaves the program byte for byte as it came in;
 *   - no other verdict than PASS, DROP or TX.
 * HB_TEST_SEED picks the seed (printed), HB_XDP_CASES the number of cases.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <endian.h>
#include <linux/if_link.h>

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <stdio.h>
#include <stdlib.h>

#include "lib/ht_assert.h"
#include "lib/bpf_util.h"
#include "log.h"
#include "proto.h"
#include "sesskey.h"

#define PORT 7600
#define CPORT 40001
#define TOKEN 0x8877665544332211ull
#define XDP_ABORTED_ 0
#define XDP_DROP_ 1
#define XDP_PASS_ 2
#define XDP_TX_ 3

static struct hbk *H;

static const uint8_t C4[4] = { 10, 9, 0, 2 }, S4[4] = { 10, 9, 0, 1 };
static const uint8_t C6[16] = { 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2 };
static const uint8_t S6[16] = { 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1 };

static uint64_t rs;
static uint32_t rnd(void)
{
	/* xorshift64*: fast, seeded, reproducible */
	rs ^= rs >> 12;
	rs ^= rs << 25;
	rs ^= rs >> 27;
	return (uint32_t)((rs * 0x2545f4914f6cdd1dull) >> 32);
}

/* ------------------------------------------------------------------------------------------ */
/* Session and daemon state                                                                   */

enum state { ST_OK, ST_NOCHECK, ST_NEW, ST_CLOSING, ST_DEAD, ST_NONE, ST_OTHER_ADDR, ST_V2, ST_N };
static const char *const state_name[] = { "authed+alive",  "authed+no-grace", "new",
					  "closing",	   "daemon-dead",     "no-session",
					  "other-address", "version 2" };

static const uint8_t V2KEY[16] = { 0xa0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 };

struct sess {
	enum state st;
	int family;
	uint8_t addr[16]; /* the session's source address (v4-mapped for IPv4) */
	bool answers; /* an admitted PING gets XDP_TX */
	bool v2; /* version 2: tagged under V2KEY, PINGs in a replay window */
	uint64_t last_ts; /* version 2: the newest PING answered (what the map should hold) */
	uint64_t next_ts; /* version 2: the timestamp of the next valid PING made */
};

static void set_state(struct sess *s, enum state st, int family)
{
	struct hb_session_key k = { .token = TOKEN };
	struct hb_session v = { .state = HB_STATE_AUTHED, .device_id = 42 };
	struct hb_config c = { .alive_ns = hbt_now_ns(), .grace_ns = 60000000000ull };
	__u32 zero = 0;

	s->st = st;
	s->family = family;
	s->v2 = st == ST_V2;
	s->last_ts = 0;
	s->next_ts = 1000;
	if (s->v2) {
		v.version = HB_VERSION_2;
		memcpy(v.key, V2KEY, sizeof(v.key));
	}
	/* other-address is admitted too, from a neighbour of the address the PINGs come from */
	s->answers = st == ST_OK || st == ST_NOCHECK || st == ST_OTHER_ADDR || st == ST_V2;
	if (family == 4) {
		v.addr[10] = v.addr[11] = 0xff;
		memcpy(v.addr + 12, C4, 4);
	} else {
		memcpy(v.addr, C6, 16);
	}
	v.port = htons(CPORT);
	if (st == ST_NEW)
		v.state = HB_STATE_NEW;
	if (st == ST_CLOSING)
		v.state = HB_STATE_CLOSING;
	if (st == ST_OTHER_ADDR)
		v.addr[15] ^= 1;
	memcpy(s->addr, v.addr, 16);
	if (st == ST_NOCHECK)
		c.grace_ns = 0;
	if (st == ST_DEAD)
		c.alive_ns -= 120000000000ull, c.grace_ns = 1000000000ull;
	assert_int_equal(bpf_map_update_elem(hbk_map_fd(H, HB_MAP_CONFIG), &zero, &c, BPF_ANY), 0);
	bpf_map_delete_elem(hbk_map_fd(H, HB_MAP_SESSIONS), &k);
	if (st != ST_NONE)
		assert_int_equal(bpf_map_update_elem(hbk_map_fd(H, HB_MAP_SESSIONS), &k, &v,
						     BPF_ANY),
				 0);
}

/* ------------------------------------------------------------------------------------------ */
/* The one packet that may be answered, judged plainly over raw bytes                          */

static uint16_t be16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

/* True if b is an Ethernet frame (up to two VLAN tags) with an IPv4 (unfragmented, any header
 * length) or IPv6 (no extension header) UDP datagram to PORT from the session's address (in
 * the session's family) and port, whose UDP length fits the packet and holds exactly one well-formed PING frame with
 * the session's token (and, over IPv6, a nonzero checksum). Sets *l3, *l4.
 */
static bool admitted_ping(const uint8_t *b, size_t n, const struct sess *s, size_t *l3, size_t *l4)
{
	size_t off = 14, ip, u;
	uint16_t et;
	int tags = 0;

	if (n < 14)
		return false;
	et = be16(b + 12);
	while ((et == 0x8100 || et == 0x88a8) && tags < 2) {
		if (n < off + 4)
			return false;
		et = be16(b + off + 2);
		off += 4;
		tags++;
	}
	ip = off;
	if (s->family == 4) {
		if (et != 0x0800 || n < ip + 20 || (b[ip] & 0x0f) < 5 ||
		    n < ip + (b[ip] & 0x0f) * 4u)
			return false;
		if ((be16(b + ip + 6) & 0x3fff) || b[ip + 9] != 17 ||
		    memcmp(b + ip + 12, s->addr + 12, 4))
			return false;
		u = ip + (b[ip] & 0x0f) * 4u;
	} else {
		if (et != 0x86dd || n < ip + 40 || b[ip + 6] != 17 ||
		    memcmp(b + ip + 8, s->addr, 16))
			return false;
		u = ip + 40;
	}
	/* addressed to this host: a unicast MAC and the one local address of the family */
	if ((b[0] & 1) ||
	    (s->family == 4 ? memcmp(b + ip + 16, S4, 4) : memcmp(b + ip + 24, S6, 16)))
		return false;
	if (n < u + 8 || be16(b + u) != CPORT || be16(b + u + 2) != PORT)
		return false;
	size_t tag = s->v2 ? HB_TAG_LEN : 0;

	if (be16(b + u + 4) != 8 + 16 + 8 + tag || n < u + 8 + 24 + tag)
		return false;
	if (s->family == 6 && !be16(b + u + 6))
		return false;
	const uint8_t *f = b + u + 8;
	uint64_t tok, ts;

	memcpy(&tok, f + 8, 8);
	if (be16(f) != HB_MAGIC || f[2] != (s->v2 ? HB_VERSION_2 : HB_VERSION) || f[3] != HB_PING ||
	    be16(f + 4) != 8 || be64toh(tok) != TOKEN)
		return false;
	/* version 2: the tag under the session key, and newer than the last PING answered */
	if (s->v2) {
		if (!hb_frame_tag_ok(V2KEY, f, 24))
			return false;
		ts = hb_get_be64(f + 16);
		if (s->last_ts && (ts <= s->last_ts || ts - s->last_ts > HB_V2_TS_AHEAD))
			return false;
	}
	*l3 = ip;
	*l4 = u;
	return true;
}

/* ------------------------------------------------------------------------------------------ */
/* Packet generators                                                                          */

/* A valid PING from C4/C6 port CPORT (the session's source, except in ST_OTHER_ADDR); in
 * version 2 tagged under the session key with a fresh timestamp (cur_v2 set by the caller). */
static struct sess *cur_v2;

static size_t valid_ping(uint8_t *b, int family, int vlans)
{
	size_t flen = cur_v2 ? HB_PING_V2_BYTES : HB_PING_UDP_BYTES;
	size_t off = 12, ip, u;

	memset(b, 0, 128);
	memcpy(b, "\x02\0\0\0\0\x01\x02\0\0\0\0\x02", 12);
	for (int i = 0; i < vlans; i++) {
		uint16_t tpid = i == 0 && vlans == 2 ? 0x88a8 : 0x8100;

		b[off] = tpid >> 8, b[off + 1] = tpid & 0xff, b[off + 3] = (uint8_t)(5 + i);
		off += 4;
	}
	b[off] = family == 4 ? 0x08 : 0x86, b[off + 1] = family == 4 ? 0x00 : 0xdd;
	ip = off + 2;
	if (family == 4) {
		b[ip] = 0x45, b[ip + 3] = (uint8_t)(20 + 8 + flen), b[ip + 6] = 0x40,
		b[ip + 8] = 64, b[ip + 9] = 17;
		memcpy(b + ip + 12, C4, 4), memcpy(b + ip + 16, S4, 4);
		u = ip + 20;
	} else {
		b[ip] = 0x60, b[ip + 5] = (uint8_t)(8 + flen), b[ip + 6] = 17, b[ip + 7] = 64;
		memcpy(b + ip + 8, C6, 16), memcpy(b + ip + 24, S6, 16);
		u = ip + 40;
	}
	b[u] = CPORT >> 8, b[u + 1] = CPORT & 0xff, b[u + 2] = PORT >> 8, b[u + 3] = PORT & 0xff;
	b[u + 5] = (uint8_t)(8 + flen), b[u + 6] = 0x12, b[u + 7] = 0x34; /* any nonzero sum */
	if (cur_v2) {
		uint64_t ts = htobe64(cur_v2->next_ts++);

		hb_encode_v2(b + u + 8, flen, HB_PING, (uint16_t)rnd(), TOKEN, &ts, 8, V2KEY);
	} else {
		hb_encode(b + u + 8, 24, HB_UDP, HB_PING, (uint16_t)rnd(), TOKEN,
			  "\1\2\3\4\5\6\7\x8", 8);
	}
	return u + 8 + flen;
}

static const uint8_t edge[] = { 0, 1, 3, 4, 5, 8, 9, 16, 17, 24, 0x40, 0x45, 0x7f, 0x80, 0xff };

/* Changes a few bytes of a packet, biased to the headers, or its length. */
static size_t mutate(uint8_t *b, size_t n, size_t cap)
{
	int k = 1 + (int)(rnd() % 4);

	while (k--) {
		size_t at = rnd() % 3 ? rnd() % (n < 80 ? n : 80) : rnd() % n;

		switch (rnd() % 5) {
		case 0:
			b[at] ^= (uint8_t)(1u << (rnd() % 8));
			break;
		case 1:
			b[at] = edge[rnd() % sizeof(edge)];
			break;
		case 2:
			b[at] = (uint8_t)rnd();
			break;
		case 3:
			n = rnd() % (n + 1);
			break;
		default:
			for (int i = rnd() % 24; i > 0 && n < cap; i--)
				b[n++] = (uint8_t)rnd();
			break;
		}
		if (!n)
			break;
	}
	return n;
}

enum kind { K_RANDOM, K_TRUNCATED, K_MUTATED, K_VALID, K_FOREIGN, K_REPLAY, K_N };
static const char *const kind_name[] = {
	"random bytes", "truncated PINGs",	   "mutated PINGs",
	"valid PINGs",	"PINGs not for this host", "replayed PINGs"
};

/* The last PING answered, for K_REPLAY: sent again as it was, or from a neighbour address. */
static uint8_t last_tx[1024];
static size_t last_tx_len;

/* A valid PING whose destination is not this host's unicast address: a group MAC, a broadcast
 * or multicast IP, or another host's (bridged or forwarded traffic). */
static size_t foreign_ping(uint8_t *b, int family)
{
	static const uint8_t v4[][4] = { { 255, 255, 255, 255 }, { 10, 9, 0, 255 },
					 { 224, 0, 0, 1 },	 { 239, 1, 2, 3 },
					 { 10, 9, 0, 7 },	 { 192, 0, 2, 1 } };
	static const uint8_t v6[][2] = { { 0xff, 0x02 }, { 0xff, 0x05 }, { 0xfd, 0x01 } };
	int vlans = (int)(rnd() % 3);
	size_t n = valid_ping(b, family, vlans), ip = 14 + 4 * (size_t)vlans;

	switch (rnd() % 3) {
	case 0: /* broadcast or multicast MAC, address unchanged */
		b[0] = rnd() % 2 ? 0xff : family == 4 ? 0x01 : 0x33;
		break;
	case 1: /* a group MAC bit alone */
		b[0] |= 1;
		break;
	default:
		if (family == 4)
			memcpy(b + ip + 16, v4[rnd() % 6], 4);
		else
			memcpy(b + ip + 24, v6[rnd() % 3], 2), b[ip + 39] = (uint8_t)rnd();
		break;
	}
	return n;
}

static size_t make_packet(enum kind k, uint8_t *b, size_t cap, int family)
{
	size_t n;

	switch (k) {
	case K_RANDOM:
		n = 14 + rnd() % 300;
		for (size_t i = 0; i < n; i++)
			b[i] = (uint8_t)rnd();
		if (rnd() % 2) { /* aim it at the service: IPv4 or IPv6, UDP, port */
			size_t v6 = rnd() % 2;

			b[12] = v6 ? 0x86 : 0x08, b[13] = v6 ? 0xdd : 0x00;
			b[14] = v6 ? 0x60 : 0x45;
			b[v6 ? 20 : 23] = 17;
			b[(v6 ? 54 : 34) + 2] = PORT >> 8, b[(v6 ? 54 : 34) + 3] = PORT & 0xff;
		}
		return n;
	case K_TRUNCATED:
		n = valid_ping(b, family, (int)(rnd() % 3));
		return rnd() % 8 ? rnd() % (n + 1) : n + rnd() % 16; /* shorter, or padded */
	case K_MUTATED:
		n = valid_ping(b, family, (int)(rnd() % 3));
		return mutate(b, n, cap);
	case K_FOREIGN:
		return foreign_ping(b, family);
	case K_REPLAY:
		if (!last_tx_len)
			return valid_ping(b, family, 0);
		memcpy(b, last_tx, last_tx_len);
		if (rnd() %
		    2) /* from another source address: the copy's sender is not the device */
			b[(b[12] == 0x08 ? 14 + 15 : 14 + 23)] ^= 1;
		return last_tx_len;
	default:
		return valid_ping(b, family, (int)(rnd() % 3));
	}
}

/* ------------------------------------------------------------------------------------------ */

struct tally {
	unsigned long verdict[4], kind[K_N], tx_by_state[ST_N], skipped;
};

static void check_one(struct sess *s, enum kind k, const uint8_t *in, size_t n, struct tally *t)
{
	uint8_t out[1024];
	size_t l3 = 0, l4 = 0;
	bool admitted = admitted_ping(in, n, s, &l3, &l4);
	LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = in, .data_size_in = (__u32)n, .data_out = out,
		    .data_size_out = sizeof(out), .repeat = 1);
	int rc = bpf_prog_test_run_opts(hbk_prog_fd(H, HBK_PROG_XDP), &o);

	if (n < 14) { /* the kernel refuses test runs shorter than an Ethernet header */
		t->skipped++;
		return;
	}
	assert_int_equal(rc, 0);
	t->kind[k]++;
	if (o.retval > XDP_TX_ || o.retval == XDP_ABORTED_)
		fail_msg("%s, %s: verdict %u", kind_name[k], state_name[s->st], o.retval);
	t->verdict[o.retval]++;
	if (o.retval == XDP_TX_ && !(admitted && s->answers)) {
		fprintf(stderr, "packet (%zu bytes):", n);
		for (size_t i = 0; i < n; i++)
			fprintf(stderr, " %02x", in[i]);
		fprintf(stderr, "\n");
		fail_msg("%s, %s: XDP_TX for a packet that is not an admitted PING (admitted=%d)",
			 kind_name[k], state_name[s->st], admitted);
	}
	if (admitted && s->answers && o.retval != XDP_TX_)
		fail_msg("%s, %s: an admitted PING was not answered (verdict %u)", kind_name[k],
			 state_name[s->st], o.retval);
	assert_int_equal(o.data_size_out, n);
	if (o.retval != XDP_TX_) {
		if (memcmp(in, out, n))
			fail_msg("%s, %s: verdict %u but the packet was changed", kind_name[k],
				 state_name[s->st], o.retval);
		return;
	}
	t->tx_by_state[s->st]++;
	if (n <= sizeof(last_tx)) {
		memcpy(last_tx, in, n);
		last_tx_len = n;
	}
	if (s->v2)
		s->last_ts = hb_get_be64(in + l4 + 8 + 16);
	/* the PONG: MACs, addresses and ports swapped, type PONG, the rest as it came */
	assert_memory_equal(out, in + 6, 6);
	assert_memory_equal(out + 6, in, 6);
	if (s->family == 4) {
		assert_memory_equal(out + l3 + 12, in + l3 + 16, 4);
		assert_memory_equal(out + l3 + 16, in + l3 + 12, 4);
	} else {
		assert_memory_equal(out + l3 + 8, in + l3 + 24, 16);
		assert_memory_equal(out + l3 + 24, in + l3 + 8, 16);
	}
	assert_memory_equal(out + l4, in + l4 + 2, 2);
	assert_memory_equal(out + l4 + 2, in + l4, 2);
	assert_int_equal(out[l4 + 8 + 3], HB_PONG);
	if (!s->v2) {
		assert_memory_equal(out + l4 + 8 + 4, in + l4 + 8 + 4, n - (l4 + 8 + 4));
		return;
	}
	/* version 2: the PONG carries its own tag under the session key */
	assert_memory_equal(out + l4 + 8 + 4, in + l4 + 8 + 4, 20);
	HT_TRUE(hb_frame_tag_ok(V2KEY, out + l4 + 8, 24), "the PONG's tag under the session key");
}

static void test_random_packets(void **state)
{
	const char *seed_env = getenv("HB_TEST_SEED"), *n_env = getenv("HB_XDP_CASES");
	unsigned long cases = n_env ? strtoul(n_env, NULL, 0) : 500000;
	uint64_t seed = seed_env ? strtoull(seed_env, NULL, 0) : 0x6862656174ull;
	struct tally t = { 0 };
	struct sess s;
	uint8_t pkt[1024];
	uint64_t t0 = hbt_now_ns();

	rs = seed ? seed : 1;
	printf("random packets: seed %#llx (HB_TEST_SEED), %lu cases (HB_XDP_CASES)\n",
	       (unsigned long long)seed, cases);
	set_state(&s, ST_OK, 4);
	for (unsigned long i = 0; i < cases; i++) {
		if (i % 1000 == 0) { /* a new session/daemon state and family every 1000 packets */
			set_state(&s, (enum state)(rnd() % ST_N), rnd() % 2 ? 4 : 6);
			cur_v2 = s.v2 ? &s : NULL;
			last_tx_len = 0;
		}
		enum kind k = (enum kind)(rnd() % K_N);
		size_t n = make_packet(k, pkt, sizeof(pkt), s.family);

		check_one(&s, k, pkt, n, &t);
	}
	printf("random packets: %lu TX, %lu PASS, %lu DROP (%lu under 14 bytes not run) in %.1f s\n",
	       t.verdict[XDP_TX_], t.verdict[XDP_PASS_], t.verdict[XDP_DROP_], t.skipped,
	       (hbt_now_ns() - t0) / 1e9);
	for (int i = 0; i < ST_N; i++)
		printf("  %-16s %lu TX\n", state_name[i], t.tx_by_state[i]);
	HT_TRUE(t.kind[K_FOREIGN] > 0 && t.kind[K_REPLAY] > 0 && t.tx_by_state[ST_V2] > 0,
		"PINGs to other destinations, replays and answered v2 PINGs were generated");
	/* the generators reach every verdict, and answers happen only in the answering states */
	HT_TRUE(t.verdict[XDP_TX_] > cases / 50 && t.verdict[XDP_PASS_] && t.verdict[XDP_DROP_],
		"the generators reach every verdict: %lu TX (more than %lu), %lu PASS, %lu DROP",
		t.verdict[XDP_TX_], cases / 50, t.verdict[XDP_PASS_], t.verdict[XDP_DROP_]);
	(void)state;
}

static int group_setup(void **state)
{
	struct hbk_opts o = { .port = PORT, .max_conns = 64, .max_sessions = 64 };

	hb_log_init("test_xdp_random", HB_LOG_WARN);
	hbk_route_logs();
	if (hbt_ensure_bpffs() || hbk_open(&H, &o))
		return -1;
	hbt_local_addr(H, 4, S4, HB_LOCAL_NIC);
	hbt_local_addr(H, 6, S6, HB_LOCAL_NIC);
	/* by value never answered, whatever an entry says */
	hbt_local_addr(H, 4, (const uint8_t[]){ 255, 255, 255, 255 }, HB_LOCAL_NIC);
	return 0;
}

static int group_teardown(void **state)
{
	hbk_close(H);
	H = NULL;
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_random_packets),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
