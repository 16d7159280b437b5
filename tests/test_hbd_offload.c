// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbd in offload mode against maps this test creates and pins in a private bpffs directory
 * (no XDP/sockmap programs): what the daemon writes for the kernel, what it reads back for
 * expiry, the liveness stamp, published counters, and the fallback when maps are missing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <bpf/bpf.h>
#include <cmocka.h>
#include <sys/mman.h>

#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "hbclient.h"
#include "lib/clients.h"
#include "lib/ht_assert.h"
#include "lib/bpf_util.h"
#include "lib/hbd_harness.h"

struct pins {
	char dir[96];
	int conns, sessions, config, ustats, seen, sockhash;
};

static struct pins P;
static struct ht_daemon D;

static const char *const pin_names[] = { HB_MAP_CONNS,	HB_MAP_SESSIONS, HB_MAP_CONFIG,
					 HB_MAP_USTATS, HB_MAP_SEEN,	 HB_MAP_SOCKHASH };
#define NPINS 6

static struct pins live_pins[4]; /* by value: found again after a failed assertion */
static __u32 pins_max_entries = 1024; /* conns and sessions capacity of the next make_pins */
static __u32 pins_seen_entries; /* the seen array of the next make_pins: 0 for none */
static __u32 pins_sockhash_entries = 1024; /* sockhash capacity of the next make_pins */
static __u32 pins_config_size = sizeof(struct hb_config); /* config value of the next make_pins */

static void unpin_all(struct pins *p)
{
	for (int i = 0; i < 4; i++) {
		if (live_pins[i].dir[0] && !strcmp(live_pins[i].dir, p->dir))
			memset(&live_pins[i], 0, sizeof(live_pins[i]));
	}
	char path[160];
	int *fds[] = { &p->conns, &p->sessions, &p->config, &p->ustats, &p->seen, &p->sockhash };

	for (unsigned i = 0; i < NPINS; i++) {
		snprintf(path, sizeof(path), "%s/%s", p->dir, pin_names[i]);
		unlink(path);
		if (*fds[i] >= 0)
			close(*fds[i]);
		*fds[i] = -1;
	}
	if (p->dir[0])
		rmdir(p->dir);
}

/* Creates and pins the maps hbd opens, shaped as hbeat_abi.h says. mmapable_config false makes
 * the daemon take its syscall path for the stamp; with_ustats false leaves counters private. The
 * sockhash carries no programs here: sockets hbd adds to it read as before.
 */
static int make_pins(struct pins *p, const char *tag, bool mmapable_config, bool with_ustats,
		     __u32 conn_value_size)
{
	LIBBPF_OPTS(bpf_map_create_opts, mm, .map_flags = BPF_F_MMAPABLE);
	char path[160];
	int *fds[] = { &p->conns, &p->sessions, &p->config, &p->ustats, &p->seen, &p->sockhash };

	memset(p, 0, sizeof(*p));
	p->conns = p->sessions = p->config = p->ustats = p->seen = p->sockhash = -1;
	snprintf(p->dir, sizeof(p->dir), "/sys/fs/bpf/hbd-test-%d-%s", getpid(), tag);
	if (mkdir(p->dir, 0700) && errno != EEXIST)
		return -1;
	p->conns = bpf_map_create(BPF_MAP_TYPE_HASH, HB_MAP_CONNS, sizeof(struct hb_conn_key),
				  conn_value_size, pins_max_entries, NULL);
	p->sessions =
		bpf_map_create(BPF_MAP_TYPE_HASH, HB_MAP_SESSIONS, sizeof(struct hb_session_key),
			       sizeof(struct hb_session), pins_max_entries, NULL);
	p->config = bpf_map_create(BPF_MAP_TYPE_ARRAY, HB_MAP_CONFIG, sizeof(__u32),
				   pins_config_size, 1, mmapable_config ? &mm : NULL);
	if (with_ustats)
		p->ustats = bpf_map_create(BPF_MAP_TYPE_ARRAY, HB_MAP_USTATS, sizeof(__u32),
					   sizeof(struct hb_ustats), HB_MAX_WORKERS, &mm);
	if (pins_seen_entries)
		p->seen = bpf_map_create(BPF_MAP_TYPE_ARRAY, HB_MAP_SEEN, sizeof(__u32),
					 sizeof(__u64), pins_seen_entries, &mm);
	p->sockhash =
		bpf_map_create(BPF_MAP_TYPE_SOCKHASH, HB_MAP_SOCKHASH, sizeof(struct hb_conn_key),
			       sizeof(__u64), pins_sockhash_entries, NULL);
	for (unsigned i = 0; i < NPINS; i++) {
		if ((i == 3 && !with_ustats) || (i == 4 && !pins_seen_entries))
			continue;
		snprintf(path, sizeof(path), "%s/%s", p->dir, pin_names[i]);
		if (*fds[i] < 0 || bpf_obj_pin(*fds[i], path)) {
			fprintf(stderr, "map %s: %s\n", pin_names[i], strerror(errno));
			unpin_all(p);
			return -1;
		}
	}
	for (int i = 0; i < 4; i++) {
		if (!live_pins[i].dir[0]) {
			live_pins[i] = *p;
			break;
		}
	}
	return 0;
}

/* Teardown of the tests with their own daemon and maps: nothing stays behind on failure. */
static int reap_all(void **state)
{
	ht_reap(state);
	for (int i = 0; i < 4; i++) {
		if (live_pins[i].dir[0]) {
			struct pins p = live_pins[i];

			unpin_all(&p);
		}
	}
	return 0;
}

static int group_setup(void **state)
{
	char path[160];
	const char *args[] = { "--pin-path", path, "--interval",    "0.3",  "--grace", "2",
			       "--workers",  "2",  "--max-payload", "1000", NULL };

	(void)state;
	if (make_pins(&P, "main", true, true, sizeof(struct hb_conn)))
		return -1;
	snprintf(path, sizeof(path), "%s", P.dir);
	if (ht_start(&D, args)) {
		unpin_all(&P);
		return -1;
	}
	return 0;
}

static int count_entries(int fd, size_t key_size)
{
	uint8_t key[16], next[16];
	int n = 0;
	void *prev = NULL;

	while (n < 100000 && !bpf_map_get_next_key(fd, prev, next)) {
		memcpy(key, next, key_size);
		prev = key;
		n++;
	}
	return n;
}

static int group_teardown(void **state)
{
	struct hb_config cfg;
	__u32 zero = 0;
	int rc = ht_stop(&D);

	(void)state;
	if (rc)
		fprintf(stderr, "daemon exit %d\n", rc);
	/* a stopped daemon leaves a stale stamp and no admitted clients behind */
	if (bpf_map_lookup_elem(P.config, &zero, &cfg) || cfg.alive_ns != 0) {
		fprintf(stderr, "config.alive_ns %llu after exit\n",
			(unsigned long long)cfg.alive_ns);
		rc = -1;
	}
	if (count_entries(P.conns, 8) || count_entries(P.sessions, 8) ||
	    count_entries(P.sockhash, 8)) {
		fprintf(stderr, "conns %d sessions %d sockhash %d entries left\n",
			count_entries(P.conns, 8), count_entries(P.sessions, 8),
			count_entries(P.sockhash, 8));
		rc = -1;
	}
	if (ht_exit_stat(&D, "errors") != 0)
		rc = -1;
	ht_cleanup(&D);
	unpin_all(&P);
	return rc;
}

/* The conns entry of device dev (the key is the server socket's cookie). */
static bool find_conn_in(int conns, uint64_t dev, __u64 *cookie, struct hb_conn *v)
{
	struct hb_conn_key k, next;
	void *prev = NULL;

	for (int i = 0; i < 10000 && !bpf_map_get_next_key(conns, prev, &next); i++) {
		k = next;
		prev = &k;
		if (!bpf_map_lookup_elem(conns, &k, v) && v->device_id == dev) {
			*cookie = k.cookie;
			return true;
		}
	}
	return false;
}

static bool find_conn(uint64_t dev, __u64 *cookie, struct hb_conn *v)
{
	return find_conn_in(P.conns, dev, cookie, v);
}

/* expiry_lookups summed over the published worker slots */
static uint64_t expiry_lookups(int ustats)
{
	struct hb_ustats u;
	uint64_t sum = 0;

	for (__u32 i = 0; i < HB_MAX_WORKERS; i++)
		if (!bpf_map_lookup_elem(ustats, &i, &u))
			sum += u.expiry_lookups;
	return sum;
}

/* A connection joins the sockhash when its device authenticates, not when it connects: the
 * kernel has nothing to answer before, and HELLO should not pay for the stream parser. */
static void tcp_joins_sockhash_at_hello(void **state)
{
	int n0, idle, fd;

	(void)state;
	n0 = count_entries(P.sockhash, 8);
	idle = ht_tcp(D.port, false);
	HT_GE(idle, 0, "idle TCP connection");
	ht_sleep_ms(200); /* accepted, recv armed: a connect-time insert would be there by now */
	HT_LE(count_entries(P.sockhash, 8), n0,
	      "sockhash entries (%d before) with a connection that has not sent HELLO", n0);
	fd = ht_tcp_login(D.port, 7, false, NULL);
	HT_GE(fd, 0, "login of device 7");
	HT_EQ(count_entries(P.sockhash, 8), n0 + 1, "sockhash entries after one HELLO");
	close(fd);
	close(idle);
}

/* The sockhash has room for one connection: the second device is served in userspace (default)
 * or refused (--on-map-full refuse), and the first one keeps its place either way.
 */
static void sockhash_full(void **state)
{
	struct hb_ping ping = { .ts = 5 };
	struct hb_conn v;
	struct ht_daemon d;
	struct pins p;
	char path[160];
	const char *args[] = { "--pin-path", path, "--on-map-full", "userspace", NULL };
	__u64 cookie;
	int a, b;

	(void)state;
	pins_sockhash_entries = 1;
	HT_EQ(make_pins(&p, "shfull", true, true, sizeof(struct hb_conn)), 0,
	      "pins with a 1-entry sockhash");
	pins_sockhash_entries = 1024;
	snprintf(path, sizeof(path), "%s", p.dir);
	for (int mode = 0; mode < 2; mode++) {
		args[3] = mode ? "refuse" : "userspace";
		HT_EQ(ht_start(&d, args), 0, "hbd with --on-map-full %s started", args[3]);
		a = ht_tcp_login(d.port, 1, false, NULL);
		HT_GE(a, 0, "login of device 1");
		HT_TRUE(find_conn_in(p.conns, 1, &cookie, &v), "conns entry of device 1");
		HT_TRUE(hbt_in_sockhash(p.sockhash, cookie), "device 1's socket in the sockhash");
		if (mode == 0) {
			/* admitted, answered by the daemon */
			b = ht_tcp_login(d.port, 2, false, NULL);
			HT_GE(b, 0,
			      "login of device 2 with the sockhash full (--on-map-full userspace)");
			HT_EQ(ht_send_frame(b, HB_PING, 2, &ping, sizeof(ping)), 0,
			      "PING of device 2 sent");
			HT_TRUE(ht_expect(b, HB_PONG, -1), "PONG from the daemon for device 2");
			close(b);
		} else {
			struct hb_hello h;

			b = ht_tcp(d.port, false);
			ht_hello(&h, 2, 0);
			HT_EQ(ht_send_frame(b, HB_HELLO, 1, &h, sizeof(h)), 0,
			      "HELLO of device 2 sent");
			/* ERROR(FULL) instead of the WELCOME it held */
			HT_TRUE(ht_expect(b, HB_ERROR, HB_ERR_FULL),
				"ERROR(FULL) for device 2, sockhash full, --on-map-full refuse");
			HT_TRUE(ht_eof(b, HT_IO_MS), "close after ERROR(FULL)");
			close(b);
		}
		HT_EQ(ht_send_frame(a, HB_PING, 3, &ping, sizeof(ping)), 0,
		      "PING of device 1 sent");
		HT_TRUE(ht_expect(a, HB_PONG, -1), "PONG for device 1");
		HT_TRUE(hbt_in_sockhash(p.sockhash, cookie),
			"device 1's socket still in the sockhash");
		close(a);
		HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
		HT_EQ(ht_exit_stat(&d, "map_full"), 1, "the map_full exit counter");
		HT_EQ(ht_exit_stat(&d, "pings_user"), mode == 0 ? 2 : 1,
		      "the pings_user exit counter with --on-map-full %s", args[3]);
		HT_TRUE(ht_file_contains(d.err, "sockhash map full", NULL, 0),
			"'sockhash map full' in hbd's log %s", d.err);
		ht_cleanup(&d);
	}
	unpin_all(&p);
}

static void ready_line_says_offload(void **state)
{
	(void)state;
	HT_TRUE(ht_file_contains(D.err, "mode=offload", NULL, 0), "'mode=offload' in hbd's log %s",
		D.err);
	HT_TRUE(ht_file_contains(D.err, "publishing counters", NULL, 0),
		"'publishing counters' in hbd's log %s", D.err);
}

static void tcp_hello_marks_conn_authed(void **state)
{
	struct hb_conn v;
	__u64 cookie;
	uint64_t t0 = hbt_now_ns();
	uint16_t wlen = 0;
	int fd = ht_tcp_login_flags(D.port, 1, false, NULL, &wlen, NULL);

	(void)state;
	HT_GE(fd, 0, "login of device 1");
	HT_EQ(wlen, sizeof(struct hb_welcome), "WELCOME length on the kernel path (no flags)");
	/* written before the WELCOME left, so it is there as soon as the client has it */
	HT_TRUE(find_conn(1, &cookie, &v),
		"conns entry of device 1 as soon as its WELCOME arrived");
	HT_NE(cookie, 0, "cookie of device 1's conns entry");
	HT_EQ(v.state, HB_STATE_AUTHED, "state of device 1's conns entry");
	HT_TRUE(v.last_seen_ns >= t0 && v.last_seen_ns <= hbt_now_ns(),
		"last_seen_ns %llu stamped during the login (after %llu)",
		(unsigned long long)v.last_seen_ns, (unsigned long long)t0);
	/* and the socket joined the sockhash before the WELCOME left too */
	HT_TRUE(hbt_in_sockhash(P.sockhash, cookie),
		"device 1's socket in the sockhash as soon as its WELCOME arrived");
	close(fd);
	/* closed by the client: the daemon deletes the entry (bounded wait) */
	for (int i = 0; i < 200 && find_conn(1, &cookie, &v); i++)
		ht_sleep_ms(10);
	HT_FALSE(find_conn(1, &cookie, &v),
		 "conns entry of device 1 gone within 2 s of the client's close");
}

static void udp_hello_marks_session_authed(void **state)
{
	static const uint8_t lo_mapped[16] = { [10] = 0xff, [11] = 0xff, 127, 0, 0, 1 };
	struct sockaddr_in me;
	socklen_t len = sizeof(me);
	struct hb_session_key k;
	struct hb_session v;
	struct hb_bye bye = { 0 };
	char peer[64];
	int fd = ht_udp(false);

	(void)state;
	k.token = ht_udp_login(fd, D.port, false, 2);
	HT_NE(k.token, 0, "UDP login of device 2");
	HT_EQ(bpf_map_lookup_elem(P.sessions, &k, &v), 0, "sessions entry of device 2");
	HT_EQ(v.state, HB_STATE_AUTHED, "state of device 2's session");
	HT_EQ(v.device_id, 2, "device id of the session");
	assert_memory_equal(v.addr, lo_mapped, 16);
	getsockname(fd, (struct sockaddr *)&me, &len);
	HT_EQ(v.port, me.sin_port, "source port of the session (network order)");
	snprintf(peer, sizeof(peer), "127.0.0.1:%u", ntohs(me.sin_port));
	assert_string_equal(v.peer, peer);
	/* BYE removes it */
	HT_EQ(ht_udp_send(fd, D.port, false, HB_BYE, 2, k.token, &bye, sizeof(bye)), 0, "BYE sent");
	for (int i = 0; i < 200 && !bpf_map_lookup_elem(P.sessions, &k, &v); i++)
		ht_sleep_ms(10);
	HT_NE(bpf_map_lookup_elem(P.sessions, &k, &v), 0,
	      "sessions entry gone within 2 s of the BYE");
	close(fd);
}

static bool nothing_pending(int fd)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	return poll(&pfd, 1, 0) == 0;
}

static void tcp_expiry_reads_last_seen_from_map(void **state)
{
	struct hb_conn v;
	struct hb_conn_key k;
	uint64_t t0;
	int fd = ht_tcp_login(D.port, 3, false, NULL);

	(void)state;
	HT_GE(fd, 0, "login of device 3");
	HT_TRUE(find_conn(3, &k.cookie, &v), "conns entry of device 3");
	/* the "kernel" answers its heartbeats: fresh last_seen_ns for 1.2 s (timeout 0.45 s)
	 * while the client itself sends nothing at all
	 */
	for (int i = 0; i < 12; i++) {
		HT_EQ(bpf_map_lookup_elem(P.conns, &k, &v), 0,
		      "conns entry of device 3 readable (heartbeat %d)", i);
		v.last_seen_ns = hbt_now_ns();
		v.pings++;
		HT_EQ(bpf_map_update_elem(P.conns, &k, &v, BPF_EXIST), 0,
		      "last_seen_ns of device 3 refreshed (heartbeat %d)", i);
		HT_TRUE(nothing_pending(fd),
			"device 3 not expired while the map says it is seen (heartbeat %d)", i);
		ht_sleep_ms(100);
	}
	HT_TRUE(nothing_pending(fd), "device 3 not expired while the map said it was seen");
	/* the kernel stops seeing it: expired after the timeout */
	t0 = ht_now_ms();
	HT_TRUE(ht_expect(fd, HB_BYE, HB_BYE_EXPIRED),
		"BYE(EXPIRED) once the map's stamp stops moving");
	HT_GE(ht_now_ms() - t0, 300, "ms from the stamp's stop to the expiry (timeout 0.45 s)");
	HT_TRUE(ht_eof(fd, HT_IO_MS), "close of the expired connection");
	HT_NE(bpf_map_lookup_elem(P.conns, &k, &v), 0, "conns entry of the expired device removed");
	close(fd);
}

static void udp_expiry_reads_last_seen_from_map(void **state)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_session_key k;
	struct hb_session v;
	struct hb_frame f;
	uint64_t t0;
	int fd = ht_udp(false);

	(void)state;
	k.token = ht_udp_login(fd, D.port, false, 4);
	HT_NE(k.token, 0, "UDP login of device 4");
	for (int i = 0; i < 12; i++) {
		HT_EQ(bpf_map_lookup_elem(P.sessions, &k, &v), 0,
		      "sessions entry of device 4 readable (heartbeat %d)", i);
		v.last_seen_ns = hbt_now_ns();
		HT_EQ(bpf_map_update_elem(P.sessions, &k, &v, BPF_EXIST), 0,
		      "last_seen_ns of device 4 refreshed (heartbeat %d)", i);
		HT_TRUE(nothing_pending(fd),
			"device 4 not expired while the map says it is seen (heartbeat %d)", i);
		ht_sleep_ms(100);
	}
	t0 = ht_now_ms();
	HT_EQ(ht_udp_recv(fd, buf, &f, HT_IO_MS), 1,
	      "a datagram once the map's stamp stops moving, within %d ms", HT_IO_MS);
	HT_EQ(f.type, HB_BYE, "frame type sent to the silent session");
	HT_EQ(be16toh(*(uint16_t *)f.payload), HB_BYE_EXPIRED, "BYE reason for the silent session");
	HT_GE(ht_now_ms() - t0, 300, "ms from the stamp's stop to the expiry (timeout 0.45 s)");
	HT_NE(bpf_map_lookup_elem(P.sessions, &k, &v), 0,
	      "sessions entry of the expired session removed");
	close(fd);
}

/* The key store without device 8 and with 108 revoked (inside the 100-199 range), or back to
 * the harness's store. */
static void rewrite_keys(bool revoke)
{
	FILE *f;

	if (!revoke) {
		HT_EQ(ht_write_keys(D.keys), 0, "the harness's key store written back to %s",
		      D.keys);
		return;
	}
	f = fopen(D.keys, "w");
	assert_non_null(f);
	for (uint64_t d = 1; d <= 7; d++) {
		uint8_t s[HB_SECRET_MAX];

		ht_secret(d, s);
		fprintf(f, "%" PRIu64 " ", d);
		for (int i = 0; i < 16; i++)
			fprintf(f, "%02x", s[i]);
		fprintf(f, "\n");
	}
	fprintf(f, "100-199 derive %s\n108 revoked\n", HT_MASTER);
	HT_EQ(fclose(f), 0, "key store without device 8 written to %s", D.keys);
}

/* Revocation (SIGHUP reload) takes the devices' entries out of the maps, so the kernel stops
 * answering their heartbeats, and tells them BYE(REVOKED). */
static void revocation_deletes_map_entries(void **state)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_session_key k;
	struct hb_session sv;
	struct hb_conn cv;
	struct hb_frame f;
	__u64 cookie;
	int tcp = ht_tcp_login(D.port, 8, false, NULL), udp = ht_udp(false);

	(void)state;
	HT_GE(tcp, 0, "login of device 8");
	k.token = ht_udp_login(udp, D.port, false, 108);
	HT_NE(k.token, 0, "UDP login of device 108");
	HT_TRUE(find_conn(8, &cookie, &cv), "conns entry of device 8");
	HT_EQ(bpf_map_lookup_elem(P.sessions, &k, &sv), 0, "sessions entry of device 108");
	rewrite_keys(true);
	kill(D.pid, SIGHUP);
	HT_TRUE(ht_expect(tcp, HB_BYE, HB_BYE_REVOKED), "BYE(REVOKED) to device 8 after SIGHUP");
	HT_EQ(ht_udp_recv(udp, buf, &f, HT_IO_MS), 1,
	      "a datagram for device 108 after SIGHUP within %d ms", HT_IO_MS);
	HT_EQ(f.type, HB_BYE, "frame type sent to revoked device 108");
	HT_EQ(be16toh(*(uint16_t *)f.payload), HB_BYE_REVOKED, "BYE reason for device 108");
	/* the entries went before the BYE: nothing for the kernel to answer any more */
	HT_FALSE(find_conn(8, &cookie, &cv), "conns entry of revoked device 8 gone before its BYE");
	HT_NE(bpf_map_lookup_elem(P.sessions, &k, &sv), 0,
	      "sessions entry of revoked device 108 gone before its BYE");
	HT_TRUE(ht_eof(tcp, HT_IO_MS), "close of the revoked connection");
	close(tcp);
	close(udp);
	rewrite_keys(false);
	kill(D.pid, SIGHUP);
	for (int i = 0; i < 300; i++) {
		if ((tcp = ht_tcp_login(D.port, 8, false, NULL)) >= 0)
			break;
		ht_sleep_ms(10);
	}
	HT_GE(tcp, 0, "login of device 8 within 3 s of the key store's return");
	close(tcp);
}

static void stamp_refreshes(void **state)
{
	struct hb_config a, b;
	__u32 zero = 0;

	(void)state;
	HT_EQ(bpf_map_lookup_elem(P.config, &zero, &a), 0, "config entry");
	ht_sleep_ms(600);
	HT_EQ(bpf_map_lookup_elem(P.config, &zero, &b), 0, "config entry 0.6 s later");
	HT_EQ(a.grace_ns, 2000000000ull, "config.grace_ns (--grace 2)");
	HT_EQ(a.max_payload, 1000,
	      "config.max_payload (--max-payload 1000: the kernel reflects no "
	      "larger ECHO)");
	HT_EQ(a.flags, 0, "config.flags (no --require-udp-mac: XDP answers version 1 PINGs)");
	HT_GT(b.alive_ns, a.alive_ns, "alive_ns moved on in 0.6 s (interval 0.3 s)");
	HT_TRUE(b.alive_ns <= hbt_now_ns() && hbt_now_ns() - b.alive_ns < 1000000000ull,
		"alive_ns %llu within 1 s before now", (unsigned long long)b.alive_ns);
}

/* A version 2 session's kernel entry: what XDP needs to check and tag its PINGs (version, the
 * key the device derived, the window) comes from hbd before the device has its WELCOME. */
static void v2_session_entry(void **state)
{
	struct hb_session_key k;
	struct hb_session sv;
	struct hbc c;
	int fd = ht_udp(false);

	(void)state;
	HT_EQ(ht_v2_login(fd, D.port, 109, &c), 0, "version 2 login of device 109");
	k.token = c.token;
	HT_EQ(bpf_map_lookup_elem(P.sessions, &k, &sv), 0, "sessions entry of device 109");
	HT_EQ(sv.version, HB_VERSION_2, "the entry's version");
	HT_TRUE(!memcmp(sv.key, c.key, HB_SESSION_KEY_LEN), "the entry's key is the device's");
	HT_EQ(sv.last_ts, 0, "a fresh replay window");
	HT_EQ(sv.device_id, 109, "the entry's device");
	close(fd);
}

/* One replay window for XDP and hbd: a PING older than what the kernel's entry says XDP took is
 * not answered by hbd either, and what hbd takes goes into the entry (no XDP on this daemon's
 * NIC here: every PING reaches hbd, as when the fast path is down). */
static void v2_window_shared_with_xdp(void **state)
{
	const uint64_t xdp_took = 1ULL << 40;
	uint8_t p[HB_MAX_FRAME], buf[HB_MAX_FRAME];
	struct hb_session_key k;
	struct hb_session sv;
	struct hb_frame f;
	struct hbc_ev ev;
	struct hbc c;
	int fd = ht_udp(false), n;

	(void)state;
	HT_EQ(ht_v2_login(fd, D.port, 110, &c), 0, "version 2 login of device 110");
	k.token = c.token;
	HT_EQ(bpf_map_lookup_elem(P.sessions, &k, &sv), 0, "sessions entry of device 110");
	sv.last_ts = xdp_took; /* as if XDP had answered PINGs up to there */
	HT_EQ(bpf_map_update_elem(P.sessions, &k, &sv, BPF_EXIST), 0, "the entry's window moved");
	n = hbc_ping(&c, p, sizeof(p), xdp_took - 5, NULL);
	HT_EQ(ht_udp_send_raw(fd, D.port, p, (size_t)n), 0, "an old PING sent");
	HT_NE(ht_udp_recv(fd, buf, &f, 300), 1, "no answer to a PING older than XDP's window");
	n = hbc_ping(&c, p, sizeof(p), xdp_took + 10, NULL);
	HT_EQ(ht_udp_send_raw(fd, D.port, p, (size_t)n), 0, "a newer PING sent");
	HT_EQ(ht_udp_recv(fd, buf, &f, HT_IO_MS), 1, "the newer PING answered by hbd");
	HT_EQ(hbc_input(&c, &f, xdp_took * 2, &ev), HBC_EV_PONG, "a PONG under the key");
	HT_EQ(bpf_map_lookup_elem(P.sessions, &k, &sv), 0, "sessions entry again");
	HT_EQ(sv.last_ts, xdp_took + 10, "hbd put the PING it took into the entry's window");
	close(fd);
}

static void pings_reaching_daemon_are_answered_and_counted(void **state)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_ping p = { .ts = 77 };
	struct hb_frame f;
	struct hb_ustats u;
	uint64_t sum = 0;
	int fd = ht_tcp_login(D.port, 5, true, NULL);

	(void)state;
	HT_GE(fd, 0, "IPv6 login of device 5");
	/* no verdict program here, so the PING reaches hbd: answered, and counted as such */
	HT_EQ(ht_send_frame(fd, HB_PING, 3, &p, sizeof(p)), 0, "PING sent");
	HT_EQ(ht_recv_frame(fd, buf, &f, HT_IO_MS), 1, "an answer to the PING within %d ms",
	      HT_IO_MS);
	HT_EQ(f.type, HB_PONG, "frame type of the answer to the PING");
	close(fd);
	for (__u32 i = 0; i < HB_MAX_WORKERS; i++) {
		HT_EQ(bpf_map_lookup_elem(P.ustats, &i, &u), 0, "published counters of worker %u",
		      i);
		sum += u.pings_user;
	}
	HT_GE(sum, 1, "pings_user summed over the workers");
}

/* With the seen array (hbctl load pins one) expiry reads the kernel's stamps from memory: stamps
 * alone keep a TCP connection and a UDP session alive without one map lookup, and when they stop,
 * each silence is confirmed in the map once before the device is expired. A slot's stamps from
 * before its device authenticated (here: far in the future) do not count for it.
 */
static void expiry_reads_seen_stamps(void **state)
{
	const __u32 n = 1 << 16; /* TCP slots of both workers, then the sessions */
	struct pins p;
	struct ht_daemon d;
	struct hb_session_key sk;
	struct hb_session sv;
	struct hb_conn cv;
	__u64 cookie, *seen;
	char path[160];
	const char *args[] = { "--pin-path", path, "--interval", "0.3", "--workers", "2", NULL };
	uint8_t buf[HB_MAX_FRAME];
	struct hb_frame f;
	int tcp, udp, late;

	(void)state;
	pins_seen_entries = n;
	HT_EQ(make_pins(&p, "seen", true, true, sizeof(struct hb_conn)), 0,
	      "pins with a seen array of %u slots", n);
	pins_seen_entries = 0;
	seen = mmap(NULL, n * sizeof(__u64), PROT_READ | PROT_WRITE, MAP_SHARED, p.seen, 0);
	HT_TRUE(seen != MAP_FAILED, "seen array mmap'd");
	for (__u32 i = 0; i < n; i++)
		seen[i] = hbt_now_ns() + 3600ull * 1000000000ull;
	snprintf(path, sizeof(path), "%s", p.dir);
	/* reap_all unpins on failure */
	HT_EQ(ht_start(&d, args), 0, "hbd with the seen array started");
	HT_TRUE(ht_file_contains(d.err, "mode=offload", NULL, 0), "'mode=offload' in hbd's log %s",
		d.err);
	HT_FALSE(ht_file_contains(d.err, "no heartbeat stamps", NULL, 0),
		 "'no heartbeat stamps' in hbd's log %s", d.err);

	/* a device whose slot held an hour-ahead stamp: expired all the same */
	late = ht_tcp_login(d.port, 120, false, NULL);
	HT_GE(late, 0, "login of device 120");
	HT_TRUE(ht_expect(late, HB_BYE, HB_BYE_EXPIRED),
		"BYE(EXPIRED) to device 120 despite the hour-ahead stamp in its slot");
	close(late);

	tcp = ht_tcp_login(d.port, 121, false, NULL);
	HT_GE(tcp, 0, "login of device 121");
	HT_TRUE(find_conn_in(p.conns, 121, &cookie, &cv), "conns entry of device 121");
	HT_TRUE(cv.seen_slot > 0 && cv.seen_slot < n, "seen slot %u of device 121 within 1..%u",
		cv.seen_slot, n - 1);
	udp = ht_udp(false);
	sk.token = ht_udp_login(udp, d.port, false, 122);
	HT_NE(sk.token, 0, "UDP login of device 122");
	HT_EQ(bpf_map_lookup_elem(p.sessions, &sk, &sv), 0, "sessions entry of device 122");
	HT_TRUE(sv.seen_slot > 0 && sv.seen_slot < n && sv.seen_slot != cv.seen_slot,
		"seen slot %u of session 122 within 1..%u and not the TCP one (%u)", sv.seen_slot,
		n - 1, cv.seen_slot);
	HT_EQ(expiry_lookups(p.ustats), 1, "expiry map lookups so far (device 120's confirmation)");

	/* 1.2 s of "kernel" heartbeats (timeout 0.45 s) that only the stamps record */
	for (int i = 0; i < 12; i++) {
		__atomic_store_n(&seen[cv.seen_slot], hbt_now_ns(), __ATOMIC_RELAXED);
		__atomic_store_n(&seen[sv.seen_slot], hbt_now_ns(), __ATOMIC_RELAXED);
		HT_TRUE(nothing_pending(tcp),
			"TCP device 121 not expired while its stamp moves (heartbeat %d)", i);
		HT_TRUE(nothing_pending(udp),
			"UDP device 122 not expired while its stamp moves (heartbeat %d)", i);
		ht_sleep_ms(100);
	}
	HT_TRUE(nothing_pending(tcp), "TCP device 121 not expired while its stamp moved");
	HT_TRUE(nothing_pending(udp), "UDP device 122 not expired while its stamp moved");
	HT_EQ(expiry_lookups(p.ustats), 1, "expiry map lookups while the stamps moved (none new)");

	/* the stamps stop: both expired, each after one look at its map entry */
	HT_TRUE(ht_expect(tcp, HB_BYE, HB_BYE_EXPIRED),
		"BYE(EXPIRED) to device 121 once its stamp stops");
	HT_EQ(ht_udp_recv(udp, buf, &f, HT_IO_MS), 1,
	      "a datagram for device 122 once its stamp stops, within %d ms", HT_IO_MS);
	HT_EQ(f.type, HB_BYE, "frame type sent to the silent session");
	HT_EQ(be16toh(*(uint16_t *)f.payload), HB_BYE_EXPIRED, "BYE reason for the silent session");
	HT_EQ(expiry_lookups(p.ustats), 3,
	      "expiry map lookups: one confirmation each for 120, 121, 122");
	close(tcp);
	close(udp);
	munmap(seen, n * sizeof(__u64));
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	HT_EQ(ht_exit_stat(&d, "expired_tcp"), 2, "the expired_tcp exit counter");
	HT_EQ(ht_exit_stat(&d, "expired_udp"), 1, "the expired_udp exit counter");
	ht_cleanup(&d);
	unpin_all(&p);
}

/* Authentication moves a connection from --hello-timeout to the heartbeat timeout: it is not
 * due, and not looked up in the map, before that (no seen array here, so every look would be a
 * lookup).
 */
static void authed_connection_waits_for_its_timeout(void **state)
{
	struct pins p;
	struct ht_daemon d;
	char path[160];
	const char *args[] = {
		"--pin-path", path, "--interval", "2", "--hello-timeout", "0.2", NULL
	};
	int fd;

	(void)state;
	HT_EQ(make_pins(&p, "hellotmo", true, true, sizeof(struct hb_conn)), 0,
	      "pins without a seen array");
	snprintf(path, sizeof(path), "%s", p.dir);
	/* reap_all unpins on failure */
	HT_EQ(ht_start(&d, args), 0, "hbd with --hello-timeout 0.2 started");
	fd = ht_tcp_login(d.port, 123, false, NULL);
	HT_GE(fd, 0, "login of device 123");
	ht_sleep_ms(700); /* past 3 hello timeouts, within the 3 s heartbeat timeout */
	HT_TRUE(nothing_pending(fd), "device 123 not expired by the hello timeout once authed");
	HT_EQ(expiry_lookups(p.ustats), 0,
	      "expiry map lookups of an authenticated device before its timeout");
	close(fd);
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	HT_EQ(ht_exit_stat(&d, "hello_timeout"), 0, "the hello_timeout exit counter");
	ht_cleanup(&d);
	unpin_all(&p);
}

/* A seen array smaller than the daemon's slots: one line says so, and what does not fit (here
 * every UDP session, numbered after both workers' TCP slots) gets no slot and is looked up. */
static void seen_smaller_than_the_daemon(void **state)
{
	struct pins p;
	struct ht_daemon d;
	struct hb_session_key sk;
	struct hb_session sv;
	char path[160];
	const char *args[] = { "--pin-path", path, "--workers", "2", NULL };
	int udp;

	(void)state;
	pins_seen_entries = 8;
	HT_EQ(make_pins(&p, "seensmall", true, true, sizeof(struct hb_conn)), 0,
	      "pins with a seen array of 8 slots");
	pins_seen_entries = 0;
	snprintf(path, sizeof(path), "%s", p.dir);
	/* reap_all unpins on failure */
	HT_EQ(ht_start(&d, args), 0, "hbd with a seen array of 8 slots started");
	HT_TRUE(ht_file_contains(d.err, "holds 8 heartbeat stamps, fewer than", NULL, 0),
		"the 'fewer than' line for the small seen array in %s", d.err);
	udp = ht_udp(false);
	sk.token = ht_udp_login(udp, d.port, false, 124);
	HT_NE(sk.token, 0, "UDP login of device 124");
	HT_EQ(bpf_map_lookup_elem(p.sessions, &sk, &sv), 0, "sessions entry of device 124");
	HT_EQ(sv.state, HB_STATE_AUTHED, "state of device 124's session");
	HT_EQ(sv.seen_slot, 0, "seen slot of a session that does not fit the seen array (0: none)");
	close(udp);
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	ht_cleanup(&d);
	unpin_all(&p);
}

/* The stamp through the update syscall (config not mmapable), counters kept private. */
static void stamp_without_mmap(void **state)
{
	struct pins p;
	struct ht_daemon d;
	struct hb_config a, b;
	__u32 zero = 0;
	char path[160];
	const char *args[] = { "--pin-path", path, NULL };

	(void)state;
	HT_EQ(make_pins(&p, "nommap", false, false, sizeof(struct hb_conn)), 0,
	      "pins with a config map that is not mmapable");
	/* fields the loader owns survive the daemon's stamps */
	memset(&a, 0, sizeof(a));
	a.port = 7600;
	a.ifindex = 1;
	snprintf(a.ifname, sizeof(a.ifname), "lo");
	HT_EQ(bpf_map_update_elem(p.config, &zero, &a, BPF_ANY), 0,
	      "loader's fields written into the config map");
	snprintf(path, sizeof(path), "%s", p.dir);
	/* reap_all unpins on failure */
	HT_EQ(ht_start(&d, args), 0, "hbd with a config map it cannot mmap started");
	HT_TRUE(ht_file_contains(d.err, "mode=offload", NULL, 0), "'mode=offload' in hbd's log %s",
		d.err);
	ht_sleep_ms(600);
	HT_EQ(bpf_map_lookup_elem(p.config, &zero, &b), 0, "config entry after 0.6 s");
	HT_TRUE(b.alive_ns > 0 && hbt_now_ns() - b.alive_ns < 1000000000ull,
		"alive_ns %llu stamped within the last second", (unsigned long long)b.alive_ns);
	HT_EQ(b.grace_ns, 5000000000ull, "config.grace_ns (the default 5 s)");
	HT_EQ(b.port, 7600, "config.port (the loader's, kept)");
	assert_string_equal(b.ifname, "lo");
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	HT_EQ(bpf_map_lookup_elem(p.config, &zero, &b), 0, "config entry after hbd's exit");
	HT_EQ(b.alive_ns, 0, "alive_ns after hbd's exit (0: not alive)");
	ht_cleanup(&d);
	unpin_all(&p);
}

/* Pins of an hbctl from before config.max_payload (a 48-byte config value, mmapable and not):
 * hbd upgraded alone keeps the fast paths and stamps, and says the kernel's ECHO limit is the
 * protocol's. */
static void config_of_an_older_hbctl(void **state)
{
	for (int mm = 0; mm < 2; mm++) {
		struct pins p;
		struct ht_daemon d;
		struct hb_config b;
		__u32 zero = 0;
		char path[160];
		const char *args[] = { "--pin-path", path, "--max-payload", "100", NULL };

		(void)state;
		pins_config_size = offsetof(struct hb_config, max_payload);
		HT_EQ(make_pins(&p, mm ? "oldcfg-mm" : "oldcfg", mm, false, sizeof(struct hb_conn)),
		      0, "pins with the config value of an older hbctl");
		pins_config_size = sizeof(struct hb_config);
		snprintf(path, sizeof(path), "%s", p.dir);
		HT_EQ(ht_start(&d, args), 0, "hbd on the older pins");
		HT_TRUE(ht_file_contains(d.err, "mode=offload", NULL, 0),
			"'mode=offload' in hbd's log %s", d.err);
		HT_TRUE(ht_file_contains(d.err, "loaded by an older hbctl", NULL, 0),
			"hbd says the kernel ignores --max-payload there (%s)", d.err);
		ht_sleep_ms(400);
		HT_EQ(bpf_map_lookup_elem(p.config, &zero, &b), 0, "config entry");
		HT_TRUE(b.alive_ns > 0 && hbt_now_ns() - b.alive_ns < 1000000000ull,
			"alive_ns %llu stamped within the last second (%s)",
			(unsigned long long)b.alive_ns, mm ? "mmapped" : "by syscall");
		HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
		ht_cleanup(&d);
		unpin_all(&p);
	}
}

/* No maps, or maps of another layout: one clear line, and the userspace path serves. */
static void fallback_to_userspace(void **state)
{
	struct pins p;
	struct ht_daemon d;
	char path[160];
	const char *args[] = { "--pin-path", path, NULL };
	int fd;

	(void)state;
	snprintf(path, sizeof(path), "/sys/fs/bpf/hbd-test-%d-none", getpid());
	HT_EQ(ht_start(&d, args), 0, "hbd with a pin path that holds no maps started");
	HT_TRUE(ht_file_contains(d.err, "BPF fast path not loaded at", NULL, 0),
		"'BPF fast path not loaded at' in hbd's log %s", d.err);
	HT_TRUE(ht_file_contains(d.err, "hbctl load --dev IFACE", NULL, 0),
		"the 'hbctl load --dev IFACE' hint in hbd's log %s", d.err);
	HT_TRUE(ht_file_contains(d.err, "mode=userspace(bpf-not-loaded)", NULL, 0),
		"'mode=userspace(bpf-not-loaded)' in hbd's log %s", d.err);
	fd = ht_tcp_login(d.port, 1, false, NULL);
	HT_GE(fd, 0, "login of device 1 served in userspace");
	close(fd);
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	ht_cleanup(&d);

	HT_EQ(make_pins(&p, "badabi", true, true, 80), 0, "pins with an 80-byte conns value");
	snprintf(path, sizeof(path), "%s", p.dir);
	HT_EQ(ht_start(&d, args), 0, "hbd with maps of another layout started");
	HT_TRUE(ht_file_contains(d.err, "value 80", NULL, 0),
		"the 'value 80' complaint in hbd's log %s", d.err);
	HT_TRUE(ht_file_contains(d.err, "mode=userspace(bpf-not-loaded)", NULL, 0),
		"'mode=userspace(bpf-not-loaded)' in hbd's log %s", d.err);
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	ht_cleanup(&d);
	unpin_all(&p);
}

/* --no-offload with the maps present: nothing AUTHED in the kernel, counters still published. */
static void no_offload_leaves_maps_alone(void **state)
{
	struct pins p;
	struct ht_daemon d;
	struct hb_ustats u;
	char path[160];
	const char *args[] = { "--pin-path", path, "--no-offload", NULL };
	__u32 zero = 0;
	int fd, ufd = ht_udp(false);

	(void)state;
	HT_EQ(make_pins(&p, "nooff", true, true, sizeof(struct hb_conn)), 0,
	      "pins for --no-offload");
	snprintf(path, sizeof(path), "%s", p.dir);
	HT_EQ(ht_start(&d, args), 0, "hbd with --no-offload and the maps present started");
	fd = ht_tcp_login(d.port, 1, false, NULL);
	HT_GE(fd, 0, "login of device 1");
	HT_NE(ht_udp_login(ufd, d.port, false, 2), 0, "UDP login of device 2");
	HT_EQ(count_entries(p.conns, 8), 0, "conns entries with --no-offload");
	HT_EQ(count_entries(p.sessions, 8), 0, "sessions entries with --no-offload");
	HT_EQ(bpf_map_lookup_elem(p.ustats, &zero, &u), 0, "published counters of worker 0");
	close(fd);
	close(ufd);
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	ht_cleanup(&d);
	unpin_all(&p);
}

/* Loaded with hbctl load --tcp user (config.tcp_path): hbd answers TCP heartbeats itself and
 * adds nothing to the sockhash, while UDP sessions still go to the kernel for XDP. It keeps a
 * conns entry per authenticated connection all the same (no sock_ops made one), and stamps each
 * heartbeat it answers in the entry's seen slot: that is what hbctl conns and bpftool list.
 */
static void tcp_user_path(void **state)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_ping ping = { .ts = 9 };
	struct hb_config c = { .tcp_path = HB_TCP_USER, .port = 7600 };
	struct hb_frame f;
	struct hb_conn v;
	struct ht_daemon d;
	struct pins p;
	char path[160];
	const char *args[] = { "--pin-path", path, "--workers", "2", NULL };
	__u32 zero = 0;
	__u64 cookie = 0, stamp = 0, t_ping;
	uint16_t wlen;
	int fd, ufd = ht_udp(false), gone = 0;

	(void)state;
	HT_GE(ufd, 0, "UDP socket");
	pins_seen_entries = 1 << 16; /* TCP slots of both workers, then the sessions */
	HT_EQ(make_pins(&p, "tcpuser", true, true, sizeof(struct hb_conn)), 0,
	      "pins for --tcp user, with a seen array");
	pins_seen_entries = 0;
	HT_EQ(bpf_map_update_elem(p.config, &zero, &c, BPF_ANY), 0,
	      "config with tcp_path HB_TCP_USER written");
	snprintf(path, sizeof(path), "%s", p.dir);
	HT_EQ(ht_start(&d, args), 0, "hbd with config.tcp_path user started");
	HT_TRUE(ht_file_contains(d.err, "mode=offload", NULL, 0), "'mode=offload' in hbd's log %s",
		d.err);
	HT_TRUE(ht_file_contains(d.err, "--tcp user", NULL, 0), "'--tcp user' in hbd's log %s",
		d.err);
	fd = ht_tcp_login_flags(d.port, 1, false, NULL, &wlen, NULL);
	HT_GE(fd, 0, "login of device 1");
	HT_EQ(wlen, sizeof(struct hb_welcome), "WELCOME length with --tcp user (no flags)");
	HT_TRUE(find_conn_in(p.conns, 1, &cookie, &v),
		"conns entry of device 1, written by hbd, there when its WELCOME arrived");
	HT_NE(cookie, 0, "the entry's key is the socket's cookie");
	HT_EQ(v.state, HB_STATE_AUTHED, "state of device 1's conns entry");
	HT_NE(v.seen_slot, 0, "device 1's entry names a seen slot");
	HT_EQ(count_entries(p.sockhash, 8), 0, "nothing in the sockhash with --tcp user");
	usleep(20 * 1000); /* the stamp below is then the PING's, not the login's */
	t_ping = hbt_now_ns();
	HT_EQ(ht_send_frame(fd, HB_PING, 2, &ping, sizeof(ping)), 0, "PING sent");
	HT_EQ(ht_recv_frame(fd, buf, &f, HT_IO_MS), 1, "an answer to the PING within %d ms",
	      HT_IO_MS);
	HT_EQ(f.type, HB_PONG, "frame type of the answer (from hbd itself)");
	HT_EQ(bpf_map_lookup_elem(p.seen, &v.seen_slot, &stamp), 0, "seen[%u] read", v.seen_slot);
	/* the worker's clock has ms steps and is read when it wakes: up to 2 ms before t_ping */
	HT_TRUE(stamp + 2000000 >= t_ping && stamp <= hbt_now_ns(),
		"seen[%u] = %llu: the PING's time (sent at %llu)", v.seen_slot,
		(unsigned long long)stamp, (unsigned long long)t_ping);
	HT_NE(ht_udp_login(ufd, d.port, false, 2), 0, "UDP login of device 2");
	HT_EQ(count_entries(p.sessions, 8), 1, "sessions entries (UDP still offloaded)");
	close(fd);
	for (int i = 0; i < 100 && !gone; i++, usleep(10 * 1000))
		gone = bpf_map_lookup_elem(p.conns, &cookie, &v) && errno == ENOENT;
	HT_TRUE(gone, "device 1's conns entry deleted within 1 s of its close");
	close(ufd);
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	ht_cleanup(&d);
	unpin_all(&p);
}

/* Loaded with hbctl load --tcp keepalive but no sock_ops here to turn keepalive on: hbd writes
 * its timing into config, keeps conns entries, adds nothing to the sockhash, and, since the
 * entry says the kernel does not track the connection, tells the device to PING (a 16-byte
 * WELCOME) and expires it itself. A timing TCP keepalive cannot express is refused at start.
 */
static void keepalive_config_without_sock_ops(void **state)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_ping ping = { .ts = 3 };
	struct hb_config c = { .tcp_path = HB_TCP_KEEPALIVE, .port = 7600 };
	struct hb_welcome wel;
	struct hb_frame f;
	struct ht_daemon d;
	struct pins p;
	char path[160];
	const char *args[] = { "--pin-path",	     path, "--interval", "1",
			       "--keepalive-probes", "3",  NULL };
	const char *too_long[] = { "--pin-path", path, "--interval", "40000", NULL };
	uint16_t wlen;
	uint32_t flags;
	__u32 zero = 0;
	int fd;

	(void)state;
	HT_EQ(make_pins(&p, "kanosops", true, true, sizeof(struct hb_conn)), 0,
	      "pins for --tcp keepalive");
	HT_EQ(bpf_map_update_elem(p.config, &zero, &c, BPF_ANY), 0,
	      "config with tcp_path HB_TCP_KEEPALIVE written");
	snprintf(path, sizeof(path), "%s", p.dir);
	HT_NE(ht_start(&d, too_long), 0, "hbd with --interval 40000 in keepalive mode refused");
	HT_EQ(ht_start(&d, args), 0, "hbd with config.tcp_path keepalive started");
	HT_TRUE(ht_file_contains(d.err, "--tcp keepalive", NULL, 0),
		"'--tcp keepalive' in hbd's log %s", d.err);
	HT_EQ(bpf_map_lookup_elem(p.config, &zero, &c), 0, "config read back");
	HT_EQ(c.ka_idle_s, 1, "TCP_KEEPIDLE hbd wrote (--interval 1)");
	HT_EQ(c.ka_intvl_s, 1, "TCP_KEEPINTVL hbd wrote");
	HT_EQ(c.ka_cnt, 3, "TCP_KEEPCNT hbd wrote (--keepalive-probes 3)");
	HT_EQ(c.ka_user_timeout_ms, 4000, "TCP_USER_TIMEOUT hbd wrote: 1 s x (3 + 1)");
	fd = ht_tcp_login_flags(d.port, 1, false, &wel, &wlen, &flags);
	HT_GE(fd, 0, "login of device 1");
	HT_EQ(wlen, sizeof(struct hb_welcome), "WELCOME length for a connection sock_ops missed");
	HT_EQ(flags, 0, "WELCOME flags for a connection sock_ops missed");
	HT_EQ(count_entries(p.conns, 8), 1, "conns entries in keepalive mode");
	HT_EQ(count_entries(p.sockhash, 8), 0, "sockhash entries in keepalive mode");
	HT_EQ(ht_send_frame(fd, HB_PING, 2, &ping, sizeof(ping)), 0, "PING sent");
	HT_EQ(ht_recv_frame(fd, buf, &f, HT_IO_MS), 1, "an answer to the PING within %d ms",
	      HT_IO_MS);
	HT_EQ(f.type, HB_PONG, "frame type of the answer (from hbd)");
	/* silent: hbd's own expiry after 1.5 intervals */
	HT_TRUE(ht_expect(fd, HB_BYE, HB_BYE_EXPIRED), "BYE(EXPIRED) for the silent device");
	close(fd);
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	HT_EQ(ht_exit_stat(&d, "expired_tcp"), 1, "the expired_tcp exit counter");
	HT_EQ(ht_exit_stat(&d, "keepalive_expired"), 0, "the keepalive_expired exit counter");
	ht_cleanup(&d);
	unpin_all(&p);
}

/* Kernel maps with room for two clients: the third is served in userspace (default) or
 * refused (--on-map-full refuse); the first two keep their entries either way.
 */
static void full_map(void **state)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_ping ping = { .ts = 5 };
	struct hb_frame f;
	struct hb_hello h;
	struct ht_daemon d;
	struct pins p;
	char path[160];
	const char *args[] = { "--pin-path", path, "--on-map-full", "userspace", NULL };
	int tcp[3], udp[3];
	uint64_t tok;

	(void)state;
	pins_max_entries = 2;
	HT_EQ(make_pins(&p, "full", true, true, sizeof(struct hb_conn)), 0,
	      "pins with room for 2 conns and 2 sessions");
	pins_max_entries = 1024;
	snprintf(path, sizeof(path), "%s", p.dir);
	for (int mode = 0; mode < 2; mode++) {
		args[3] = mode ? "refuse" : "userspace";
		HT_EQ(ht_start(&d, args), 0, "hbd with --on-map-full %s started", args[3]);
		for (int i = 0; i < 2; i++) {
			tcp[i] = ht_tcp_login(d.port, (uint64_t)(1 + i), false, NULL);
			udp[i] = ht_udp(false);
			HT_GE(tcp[i], 0, "TCP login of device %d", 1 + i);
			HT_NE(ht_udp_login(udp[i], d.port, false, (uint64_t)(3 + i)), 0,
			      "UDP login of device %d", 3 + i);
		}
		HT_EQ(count_entries(p.conns, 8), 2, "conns entries of the first two TCP devices");
		HT_EQ(count_entries(p.sessions, 8), 2,
		      "sessions entries of the first two UDP devices");
		/* one client too many for the kernel maps */
		tcp[2] = ht_tcp(d.port, false);
		udp[2] = ht_udp(false);
		ht_hello(&h, 5, 0);
		HT_EQ(ht_send_frame(tcp[2], HB_HELLO, 1, &h, sizeof(h)), 0,
		      "HELLO of TCP device 5 sent");
		ht_hello(&h, 6, 0);
		HT_EQ(ht_udp_send(udp[2], d.port, false, HB_HELLO, 1, 0, &h, sizeof(h)), 0,
		      "HELLO of UDP device 6 sent");
		HT_EQ(ht_udp_recv(udp[2], buf, &f, HT_IO_MS), 1,
		      "an answer to UDP device 6's HELLO within %d ms", HT_IO_MS);
		if (mode == 0) {
			/* served by the daemon: WELCOME, and its PINGs answered in userspace */
			HT_TRUE(ht_expect(tcp[2], HB_WELCOME, -1),
				"WELCOME for TCP device 5, maps full, --on-map-full userspace");
			HT_EQ(f.type, HB_WELCOME,
			      "frame type of the answer to UDP device 6 (--on-map-full userspace)");
			tok = f.token;
			HT_EQ(ht_send_frame(tcp[2], HB_PING, 2, &ping, sizeof(ping)), 0,
			      "PING of TCP device 5 sent");
			HT_TRUE(ht_expect(tcp[2], HB_PONG, -1),
				"PONG from the daemon for TCP device 5");
			HT_EQ(ht_udp_send(udp[2], d.port, false, HB_PING, 2, tok, &ping,
					  sizeof(ping)),
			      0, "PING of UDP device 6 sent");
			HT_EQ(ht_udp_recv(udp[2], buf, &f, HT_IO_MS), 1,
			      "an answer to UDP device 6's PING within %d ms", HT_IO_MS);
			HT_EQ(f.type, HB_PONG, "frame type of the answer to UDP device 6's PING");
		} else {
			HT_TRUE(ht_expect(tcp[2], HB_ERROR, HB_ERR_FULL),
				"ERROR(FULL) for TCP device 5 (--on-map-full refuse)");
			HT_TRUE(ht_eof(tcp[2], HT_IO_MS), "close after ERROR(FULL)");
			HT_EQ(f.type, HB_ERROR,
			      "frame type of the answer to UDP device 6 (--on-map-full refuse)");
			HT_EQ(be16toh(*(uint16_t *)f.payload), HB_ERR_FULL,
			      "ERROR code for UDP device 6");
		}
		/* the first two are untouched: still AUTHED in the kernel maps, still served */
		HT_EQ(count_entries(p.conns, 8), 2, "conns entries of the first two, kept");
		HT_EQ(count_entries(p.sessions, 8), 2, "sessions entries of the first two, kept");
		for (int i = 0; i < 2; i++) {
			HT_EQ(ht_send_frame(tcp[i], HB_PING, 3, &ping, sizeof(ping)), 0,
			      "PING of TCP device %d sent", 1 + i);
			HT_TRUE(ht_expect(tcp[i], HB_PONG, -1), "PONG for TCP device %d", 1 + i);
		}
		for (int i = 0; i < 3; i++) {
			close(tcp[i]);
			close(udp[i]);
		}
		HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
		HT_EQ(ht_exit_stat(&d, "map_full"), 2, "the map_full exit counter");
		HT_TRUE(ht_file_contains(d.err, "map full", NULL, 0), "'map full' in hbd's log %s",
			d.err);
		ht_cleanup(&d);
	}
	unpin_all(&p);
}

#define CPU_CONNS 16

struct from_cpu {
	int cpu;
	uint16_t port;
	uint64_t dev; /* logs in over UDP */
	int fd[CPU_CONNS];
	int ufd;
	uint64_t token;
	bool pinned;
};

/* On loopback the kernel processes a packet (SYN or datagram) on the sending thread's CPU. */
static void *connect_from_cpu(void *arg)
{
	struct from_cpu *f = arg;
	cpu_set_t one;

	CPU_ZERO(&one);
	CPU_SET(f->cpu, &one);
	f->pinned = !sched_setaffinity(0, sizeof(one), &one);
	for (unsigned i = 0; i < CPU_CONNS; i++)
		f->fd[i] = f->pinned ? ht_tcp(f->port, false) : -1;
	f->ufd = ht_udp(false);
	f->token = f->pinned && f->ufd >= 0 ? ht_udp_login(f->ufd, f->port, false, f->dev) : 0;
	return NULL;
}

static void run_from_cpu(struct from_cpu *f)
{
	pthread_t t;

	HT_EQ(pthread_create(&t, NULL, connect_from_cpu, f), 0, "client thread for CPU %d", f->cpu);
	pthread_join(t, NULL);
	HT_TRUE(f->pinned, "client thread pinned to CPU %d", f->cpu);
	for (unsigned i = 0; i < CPU_CONNS; i++)
		HT_GE(f->fd[i], 0, "connection %u from CPU %d", i, f->cpu);
	HT_NE(f->token, 0, "UDP login of device %" PRIu64 " from CPU %d", f->dev, f->cpu);
}

static void close_from_cpu(struct from_cpu *f)
{
	for (unsigned i = 0; i < CPU_CONNS; i++)
		if (f->fd[i] >= 0)
			close(f->fd[i]);
	if (f->ufd >= 0)
		close(f->ufd);
}

/* Waits (at most 2 s) until the workers have accepted want connections in all, then reads
 * each one's count. */
static void accepted_by_worker(int ustats, unsigned want, uint64_t got[2], uint64_t udp[2])
{
	for (int tries = 0; tries < 200; tries++) {
		struct hb_ustats st;

		for (__u32 w = 0; w < 2; w++) {
			HT_EQ(bpf_map_lookup_elem(ustats, &w, &st), 0, "ustats of worker %u", w);
			got[w] = st.tcp_accepted;
			udp[w] = st.udp_sessions;
		}
		if (got[0] + got[1] >= want)
			return;
		ht_sleep_ms(10);
	}
}

struct on_cpu {
	char want[32];
	int n;
};

static void count_on_cpu(const char *status, void *ctx)
{
	struct on_cpu *c = ctx;

	c->n += strstr(status, c->want) != NULL;
}

/* Threads of pid whose allowed CPUs are exactly cpu ("Cpus_allowed_list:\t1"). */
static int threads_on_cpu(pid_t pid, int cpu)
{
	struct on_cpu c = { .n = 0 };

	snprintf(c.want, sizeof(c.want), "Cpus_allowed_list:\t%d\n", cpu);
	return ht_each_thread_status(pid, count_on_cpu, &c) < 0 ? -1 : c.n;
}

/* hbd --cpus 0,1 with 2 workers: worker 0 runs on CPU 0 and worker 1 on CPU 1, and every TCP
 * connection and UDP session is taken by the worker on the CPU that received it. Without the
 * steering, SO_REUSEPORT spreads them by hash: 16 connections from one CPU would all land on
 * its worker once in 2^16 runs.
 */
static void workers_take_what_their_cpu_received(void **state)
{
	struct from_cpu c0 = { .cpu = 0, .dev = 1 }, c1 = { .cpu = 1, .dev = 2 };
	uint64_t tcp[2] = { 0, 0 }, udp[2] = { 0, 0 };
	struct ht_daemon d;
	struct pins p;
	char path[160];
	const char *args[] = { "--pin-path", path, "--workers", "2", "--cpus", "0,1", NULL };

	(void)state;
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
		fprintf(stderr, "one CPU online: nothing to steer between\n");
		skip();
	}
	HT_EQ(make_pins(&p, "cpus", true, true, sizeof(struct hb_conn)), 0, "pins for --cpus");
	snprintf(path, sizeof(path), "%s", p.dir);
	HT_EQ(ht_start(&d, args), 0, "hbd --workers 2 --cpus 0,1 started");
	HT_TRUE(ht_file_contains(d.err, "workers on CPUs 0-1", NULL, 0),
		"hbd's log says where its workers run: %s", d.err);
	HT_GE(threads_on_cpu(d.pid, 0), 1, "hbd threads allowed CPU 0 alone (worker 0)");
	HT_GE(threads_on_cpu(d.pid, 1), 1, "hbd threads allowed CPU 1 alone (worker 1)");

	c0.port = c1.port = d.port;
	run_from_cpu(&c0);
	accepted_by_worker(p.ustats, CPU_CONNS, tcp, udp);
	HT_EQ(tcp[0], CPU_CONNS, "connections from CPU 0 that worker 0 (CPU 0) accepted");
	HT_EQ(tcp[1], 0, "connections from CPU 0 that worker 1 (CPU 1) accepted");
	HT_EQ(udp[0], 1, "UDP sessions from CPU 0 on worker 0");
	HT_EQ(udp[1], 0, "UDP sessions from CPU 0 on worker 1");

	run_from_cpu(&c1);
	accepted_by_worker(p.ustats, 2 * CPU_CONNS, tcp, udp);
	HT_EQ(tcp[0], CPU_CONNS, "worker 0's connections after CPU 1 connected");
	HT_EQ(tcp[1], CPU_CONNS, "connections from CPU 1 that worker 1 (CPU 1) accepted");
	HT_EQ(udp[1], 1, "UDP sessions from CPU 1 on worker 1");

	close_from_cpu(&c0);
	close_from_cpu(&c1);
	HT_EQ(ht_stop(&d), 0, "exit code of hbd after SIGTERM");
	ht_cleanup(&d);
	unpin_all(&p);
}

int main(void)
{
	const struct CMUnitTest shared[] = {
		cmocka_unit_test(ready_line_says_offload),
		cmocka_unit_test(tcp_hello_marks_conn_authed),
		cmocka_unit_test(tcp_joins_sockhash_at_hello),
		cmocka_unit_test(udp_hello_marks_session_authed),
		cmocka_unit_test(tcp_expiry_reads_last_seen_from_map),
		cmocka_unit_test(udp_expiry_reads_last_seen_from_map),
		cmocka_unit_test(stamp_refreshes),
		cmocka_unit_test(v2_session_entry),
		cmocka_unit_test(v2_window_shared_with_xdp),
		cmocka_unit_test(pings_reaching_daemon_are_answered_and_counted),
		cmocka_unit_test(revocation_deletes_map_entries),
	};
	const struct CMUnitTest own[] = {
		cmocka_unit_test_teardown(stamp_without_mmap, reap_all),
		cmocka_unit_test_teardown(config_of_an_older_hbctl, reap_all),
		cmocka_unit_test_teardown(fallback_to_userspace, reap_all),
		cmocka_unit_test_teardown(no_offload_leaves_maps_alone, reap_all),
		cmocka_unit_test_teardown(full_map, reap_all),
		cmocka_unit_test_teardown(sockhash_full, reap_all),
		cmocka_unit_test_teardown(tcp_user_path, reap_all),
		cmocka_unit_test_teardown(keepalive_config_without_sock_ops, reap_all),
		cmocka_unit_test_teardown(expiry_reads_seen_stamps, reap_all),
		cmocka_unit_test_teardown(authed_connection_waits_for_its_timeout, reap_all),
		cmocka_unit_test_teardown(seen_smaller_than_the_daemon, reap_all),
		cmocka_unit_test_teardown(workers_take_what_their_cpu_received, reap_all),
	};
	int rc;

	signal(SIGPIPE, SIG_IGN);
	rc = cmocka_run_group_tests_name("hbd_offload", shared, group_setup, group_teardown);
	rc |= cmocka_run_group_tests_name("hbd_offload_own_daemon", own, NULL, NULL);
	return rc;
}
