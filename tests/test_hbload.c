// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbload for real: the built binary (found via $BUILD, default build/, or next to this test's
 * directory) against a small responder on loopback, a few hundred TCP and UDP clients for a
 * couple of seconds each; checks its JSON summary against what the responder saw.
 *
 * Standalone: `test_hbload --serve PORT [--reuseport] [--keys FILE] [--interval-ms N]` runs
 * only the responder (for manual scale checks), until SIGTERM or 10 minutes.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "auth.h"
#include "lib/ht_assert.h"
#include "lib/hbload_responder.h"
#include "lib/run_prog.h"

#define MASTER "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
#define RUN_TIMEOUT_S 40

static char hbload_path[PATH_MAX];
static char keys_path[] = "/tmp/test_hbload_keys.XXXXXX";
static struct hb_keystore *ks;

struct fx {
	struct responder r;
	pthread_t th;
	char port[8];
	char out[16384];
	int status; /* hbload's exit code, or -1 if it did not exit normally */
};

static void *serve(void *arg)
{
	rsp_serve(arg);
	return NULL;
}

/* The responder expires devices after 3 intervals, not hbd's 1.5: on a loaded 2-CPU machine a
 * heartbeating client must never look silent.
 */
static int start(void **state, int family, uint32_t interval_ms)
{
	struct fx *fx = calloc(1, sizeof(*fx));

	fx->r.ks = ks;
	fx->r.interval_ms = interval_ms;
	fx->r.timeout_ms = interval_ms * 3;
	HT_EQ(rsp_open(&fx->r, family, 0, 0), 0, "responder listening");
	snprintf(fx->port, sizeof(fx->port), "%u", fx->r.port);
	HT_EQ(pthread_create(&fx->th, NULL, serve, &fx->r), 0, "responder thread started");
	*state = fx;
	return 0;
}

static int setup4(void **state)
{
	return start(state, AF_INET, 200);
}
static int setup4_fast(void **state)
{
	return start(state, AF_INET, 100);
}
static int setup6(void **state)
{
	return start(state, AF_INET6, 200);
}

static int teardown(void **state)
{
	struct fx *fx = *state;

	fx->r.stop = 1;
	pthread_join(fx->th, NULL);
	rsp_shutdown(&fx->r);
	free(fx);
	return 0;
}

/* Runs hbload with the given arguments (NULL-terminated) plus --port and (unless given) --keys,
 * bounded in time; its stdout lands in fx->out.
 */
static void run(struct fx *fx, ...)
{
	const char *argv[64] = { hbload_path };
	int argc = 1, has_keys = 0;
	va_list ap;

	va_start(ap, fx);
	for (const char *a; (a = va_arg(ap, const char *)) && argc < 58;) {
		has_keys |= !strcmp(a, "--keys");
		argv[argc++] = a;
	}
	va_end(ap);
	argv[argc++] = "--port";
	argv[argc++] = fx->port;
	if (!has_keys) {
		argv[argc++] = "--keys";
		argv[argc++] = keys_path;
	}
	argv[argc++] = "--no-progress";
	/* the responder speaks version 1 only; hbload's version 2 meets the real hbd in
	 * test_hbload_hbd and test_hostile */
	argv[argc++] = "--udp-version";
	argv[argc++] = "1";
	argv[argc] = NULL;
	fx->status = hbt_run(hbload_path, argv, RUN_TIMEOUT_S, fx->out, sizeof(fx->out));
	print_message("hbload %s %s -> exit %d\n%s", argv[1], argv[2], fx->status, fx->out);
}

/* The number after "key": in hbload's JSON (first occurrence); fails the test if absent. */
static long long jnum(const struct fx *fx, const char *key)
{
	long long v = hbt_num(fx->out, key);

	if (v == LLONG_MIN)
		fail_msg("no \"%s\" in hbload's output", key);
	return v;
}

static void check_clean_run(struct fx *fx, long long clients, long long min_pings)
{
	HT_EQ(fx->status, 0, "exit code of hbload (summary above)");
	HT_EQ(jnum(fx, "clients"), clients, "hbload's clients (summary above)");
	HT_EQ(jnum(fx, "connected"), clients, "hbload's connected (summary above)");
	HT_GE(jnum(fx, "pings"), min_pings, "hbload's pings (its summary is printed above)");
	HT_EQ(jnum(fx, "pongs"), jnum(fx, "pings"), "hbload's pongs (summary above)");
	HT_EQ(jnum(fx, "lost"), 0, "hbload's lost (summary above)");
	HT_EQ(jnum(fx, "lost_closed"), 0, "hbload's lost_closed (summary above)");
	HT_EQ(jnum(fx, "errors"), 0, "hbload's errors (summary above)");
	HT_EQ(jnum(fx, "stray"), 0, "hbload's stray (summary above)");
	HT_EQ(jnum(fx, "connect_failed"), 0, "hbload's connect_failed (summary above)");
	HT_EQ(jnum(fx, "auth_failed"), 0, "hbload's auth_failed (summary above)");
	HT_GT(jnum(fx, "p99"), 0, "hbload's RTT p99 (summary above)");
	HT_LE(jnum(fx, "p50"), jnum(fx, "p99"), "hbload's RTT p50 against p99 (summary above)");
	HT_LE(jnum(fx, "p99"), jnum(fx, "max"), "hbload's RTT p99 against max (summary above)");
	/* the responder saw the same: every PING answered once, every client said BYE. The last
	 * BYEs (UDP datagrams) may still sit in the responder's socket when hbload has exited:
	 * its thread gets up to 2 s to read them */
	HT_EQ((long long)fx->r.pongs, jnum(fx, "pings"),
	      "PONGs the responder sent against hbload's pings");
	for (int i = 0;
	     i < 200 && (long long)__atomic_load_n(&fx->r.byes_rx, __ATOMIC_RELAXED) < clients; i++)
		usleep(10000);
	HT_EQ((long long)fx->r.byes_rx, clients, "BYEs the responder got against the clients");
}

static void test_tcp(void **state)
{
	struct fx *fx = *state;

	run(fx, "--server", "127.0.0.1", "--clients", "300", "--proto", "tcp", "--interval", "0.2",
	    "--duration", "1.5", "--json", "--threads", "2", "--data-every", "3", "--echo-every",
	    "4", "--source", "127.0.1.1-127.0.1.4", NULL);
	/* 300 clients x 1.5 s / 0.2 s: about 2,250 heartbeats; allow for the jitter */
	check_clean_run(fx, 300, 1500);
	HT_GT(jnum(fx, "data_sent"), 0, "hbload's data_sent with --data-every 3 (summary above)");
	HT_EQ(jnum(fx, "data_acked"), jnum(fx, "data_sent"), "hbload's data_acked (summary above)");
	HT_GT(jnum(fx, "echo_sent"), 0, "hbload's echo_sent with --echo-every 4 (summary above)");
	HT_EQ(jnum(fx, "echo_ok"), jnum(fx, "echo_sent"), "hbload's echo_ok (summary above)");
	HT_EQ(jnum(fx, "echo_bad"), 0, "hbload's echo_bad (summary above)");
	HT_EQ((long long)fx->r.acks, jnum(fx, "data_sent"),
	      "ACKs the responder sent against hbload's data_sent");
	HT_EQ(fx->r.tcp_peak, 300, "TCP connections open at once at the responder");
	HT_LT(jnum(fx, "setup_s"), 5, "hbload's seconds to set up 300 clients (summary above)");
}

static void test_udp(void **state)
{
	struct fx *fx = *state;

	/* 16 sockets per thread for 300 sessions: sessions share sockets, told apart by token */
	run(fx, "--server", "127.0.0.1", "--clients", "300", "--proto", "udp", "--interval", "0.2",
	    "--duration", "1.5", "--json", "--threads", "2", "--udp-sockets", "16", "--data-every",
	    "2", "--echo-every", "5", NULL);
	check_clean_run(fx, 300, 1500);
	HT_EQ(jnum(fx, "data_acked"), jnum(fx, "data_sent"), "hbload's data_acked (summary above)");
	HT_EQ(jnum(fx, "echo_ok"), jnum(fx, "echo_sent"), "hbload's echo_ok (summary above)");
	HT_GT(jnum(fx, "echo_sent"), 0, "hbload's echo_sent with --echo-every 5 (summary above)");
}

/* One lost PONG is not a dead server: every UDP session's second PING goes unanswered, and
 * no device gives its session up (the default --udp-rehello-after is 3 unanswered PINGs in a
 * row). The same loss with --udp-rehello-after 1 makes every device send a new HELLO: the
 * drop is real, and it is the threshold that tells it apart.
 */
static void test_udp_one_lost_pong(void **state)
{
	struct fx *fx = *state;

	fx->r.udp_drop_ping = 2;
	run(fx, "--server", "127.0.0.1", "--clients", "100", "--proto", "udp", "--interval", "0.2",
	    "--duration", "2", "--json", "--threads", "2", NULL);
	HT_EQ(fx->status, 0, "exit code of hbload (summary above)");
	HT_EQ(jnum(fx, "connected"), 100, "hbload's connected (summary above)");
	HT_EQ((long long)fx->r.pongs_dropped, 100, "PONGs the responder dropped: one a device");
	HT_EQ(jnum(fx, "lost"), 100, "hbload's lost: the dropped PONGs (summary above)");
	HT_EQ(jnum(fx, "pongs"), jnum(fx, "pings") - 100, "hbload's pongs (summary above)");
	HT_EQ(jnum(fx, "rehellos"), 0, "hbload's rehellos after one lost PONG (summary above)");
	HT_EQ(jnum(fx, "reconnects"), 0, "hbload's reconnects (summary above)");
	HT_EQ(jnum(fx, "connected_end"), 100, "hbload's connected_end (summary above)");
	HT_EQ(jnum(fx, "errors"), 0, "hbload's errors (summary above)");

	run(fx, "--server", "127.0.0.1", "--clients", "100", "--proto", "udp", "--interval", "0.2",
	    "--duration", "2", "--json", "--threads", "2", "--udp-rehello-after", "1", NULL);
	HT_EQ(fx->status, 0, "exit code of hbload --udp-rehello-after 1 (summary above)");
	HT_GE(jnum(fx, "rehellos"), 100,
	      "hbload's rehellos with --udp-rehello-after 1: every device (summary above)");
	HT_GE(jnum(fx, "reconnects"), 100,
	      "hbload's reconnects: each re-HELLO got a new session (summary above)");
	HT_EQ(jnum(fx, "auth_failed"), 0, "hbload's auth_failed (summary above)");
}

static void test_ipv6(void **state)
{
	struct fx *fx = *state;

	run(fx, "--server", "::1", "--clients", "100", "--proto", "tcp", "--interval", "0.2",
	    "--duration", "1", "--json", NULL);
	check_clean_run(fx, 100, 300);
	run(fx, "--server", "::1", "--clients", "100", "--proto", "udp", "--interval", "0.2",
	    "--duration", "1", "--json", NULL);
	HT_EQ(jnum(fx, "connected"), 100, "hbload's connected (summary above)");
	HT_EQ(jnum(fx, "lost"), 0, "hbload's lost (summary above)");
}

static void test_silent_expire(void **state)
{
	struct fx *fx = *state;

	/* responder timeout 300 ms: the 10 silent clients are expired with BYE(EXPIRED) */
	run(fx, "--server", "127.0.0.1", "--clients", "50", "--proto", "tcp", "--interval", "0.1",
	    "--duration", "1.5", "--json", "--silent", "10", NULL);
	HT_EQ(fx->status, 0, "exit code of hbload (summary above)");
	HT_EQ(jnum(fx, "connected"), 50, "hbload's connected (summary above)");
	HT_EQ(jnum(fx, "expired"), 10, "hbload's expired (summary above)");
	HT_EQ((long long)fx->r.expired_tcp, 10, "TCP devices the responder expired");
	HT_EQ(jnum(fx, "lost"), 0, "hbload's lost (summary above)");
	/* silent clients stay away */
	HT_EQ(jnum(fx, "reconnects"), 0, "hbload's reconnects (summary above)");
	HT_EQ(jnum(fx, "connected_end"), 40, "hbload's connected_end (summary above)");
}

static void test_storm(void **state)
{
	struct fx *fx = *state;

	run(fx, "--server", "127.0.0.1", "--clients", "200", "--proto", "tcp", "--interval", "0.2",
	    "--duration", "2", "--json", "--storm-at", "0.5", "--storm-window", "0.5", NULL);
	HT_EQ(fx->status, 0, "exit code of hbload (summary above)");
	HT_EQ(jnum(fx, "dropped"), 200, "hbload's dropped (summary above)");
	HT_EQ(jnum(fx, "back"), 200, "hbload's back (summary above)");
	HT_EQ(jnum(fx, "failures"), 0, "hbload's failures (summary above)");
	HT_EQ(jnum(fx, "reconnects"), 200, "hbload's reconnects (summary above)");
	/* a PING in flight when the storm hits is lost with its connection, and only those */
	HT_EQ(jnum(fx, "lost"), jnum(fx, "lost_closed"), "hbload's lost (summary above)");
	HT_LT(jnum(fx, "lost"), 20,
	      "PINGs lost with their connections in the storm (summary above)");
	/* all back within the window plus a little */
	const char *s = strstr(fx->out, "\"seconds\":");
	assert_non_null(s);
	double secs = strtod(s + 10, NULL);
	HT_TRUE(secs > 0 && secs < 1.5, "seconds %f for all 200 to come back after the storm",
		secs);
}

/* The number after "key" inside the JSON object that follows "obj": (the first of each). */
static long long jnum_in(const struct fx *fx, const char *obj, const char *key)
{
	const char *o = strstr(fx->out, obj);
	long long v;

	if (!o)
		fail_msg("no %s in hbload's output", obj);
	v = hbt_num(o, key);
	if (v == LLONG_MIN)
		fail_msg("no \"%s\" after %s in hbload's output", key, obj);
	return v;
}

static int count_of(const char *hay, const char *needle)
{
	int n = 0;

	for (const char *p = hay; (p = strstr(p, needle)); p++)
		n++;
	return n;
}

/* Measurement windows and a rate ramp: the steady window counts its own PINGs and PONGs,
 * every step runs near its rate, each window's PONGs match its PINGs, the events come in
 * order and the histograms add up.
 */
static void test_windows_and_steps(void **state)
{
	struct fx *fx = *state;
	char ev[] = "/tmp/test_hbload_ev.XXXXXX", hist[] = "/tmp/test_hbload_hist.XXXXXX";
	char evbuf[4096] = "", histbuf[65536] = "";
	long long pongs = 0;
	FILE *f;

	close(mkstemp(ev));
	close(mkstemp(hist));
	/* 200 clients every 0.2 s = 1000/s in the steady window; then 500/s and 2000/s */
	run(fx, "--server", "127.0.0.1", "--clients", "200", "--proto", "tcp", "--interval", "0.2",
	    "--duration", "1.6", "--warmup", "0.3", "--steady", "1", "--steps", "500,2000",
	    "--step-stop-p99", "0", "--step-s", "1.2", "--step-settle", "0.4", "--events", ev,
	    "--hist", hist, "--json", NULL);
	HT_EQ(fx->status, 0, "exit code of hbload (summary above)");
	HT_EQ(jnum(fx, "lost"), 0, "hbload's lost (summary above)");
	HT_EQ(jnum_in(fx, "\"steady\":", "rate"), 1000,
	      "hbload's rate in the steady window (summary above)");
	HT_GT(jnum_in(fx, "\"steady\":", "pings"), 800,
	      "PINGs in the steady window at 1000/s (summary above)");
	HT_LT(jnum_in(fx, "\"steady\":", "pings"), 1200,
	      "PINGs in the steady window at 1000/s (summary above)");
	HT_EQ(jnum_in(fx, "\"steady\":", "pongs"), jnum_in(fx, "\"steady\":", "pings"),
	      "hbload's pongs in the steady window (summary above)");
	HT_EQ(count_of(strstr(fx->out, "\"steps\":"), "\"rate\":"), 2,
	      "steps in hbload's summary (above)");
	/* 0.8 s measured a step: ~400 and ~1600 PINGs */
	HT_GT(jnum_in(fx, "\"steps\":[{", "pings"), 300,
	      "PINGs in 0.8 s of the 500/s step (summary above)");
	HT_LT(jnum_in(fx, "\"steps\":[{", "pings"), 500,
	      "PINGs in 0.8 s of the 500/s step (summary above)");
	HT_GT(jnum_in(fx, "},{\"rate\":2000", "pings"), 1300,
	      "PINGs in 0.8 s of the 2000/s step (summary above)");
	HT_LT(jnum_in(fx, "},{\"rate\":2000", "pings"), 1900,
	      "PINGs in 0.8 s of the 2000/s step (summary above)");
	HT_EQ(jnum_in(fx, "},{\"rate\":2000", "pongs"), jnum_in(fx, "},{\"rate\":2000", "pings"),
	      "hbload's pongs in the 2000/s step (summary above)");
	HT_EQ(jnum(fx, "ceiling_hb_per_s"), 2000, "hbload's ceiling_hb_per_s (summary above)");
	HT_EQ(jnum(fx, "breaks_at_hb_per_s"), -1, "hbload's breaks_at_hb_per_s (summary above)");
	assert_non_null(strstr(fx->out, "\"ramp_stopped\":false"));

	f = fopen(ev, "r");
	assert_non_null(f);
	HT_GT(fread(evbuf, 1, sizeof(evbuf) - 1, f), 0, "bytes read from the events file %s", ev);
	fclose(f);
	print_message("events:\n%s", evbuf);
	const char *order[] = { " setup_done ", " window_start steady 1000", " window_end steady",
				" step 1 500",	" window_start step1 500",   " window_end step1",
				" step 2 2000", " window_start step2 2000",  " window_end step2",
				" run_end" };
	/* the ramp ends with the run here: the clients are not sent back to --interval */
	assert_null(strstr(evbuf, "ramp_end"));
	const char *p = evbuf;

	for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
		p = strstr(p, order[i]);
		if (!p)
			fail_msg("event '%s' missing or out of order", order[i]);
	}

	/* the histograms: one block per window, the steady block's counts = its PONGs */
	f = fopen(hist, "r");
	assert_non_null(f);
	HT_GT(fread(histbuf, 1, sizeof(histbuf) - 1, f), 0, "bytes read from the histogram file %s",
	      hist);
	fclose(f);
	HT_EQ(count_of(histbuf, "# "), 3, "blocks in the histogram file %s", hist);
	p = strstr(histbuf, "# steady:");
	assert_non_null(p);
	p = strchr(p, '\n') + 1;
	while (*p && *p != '\n' && *p != '#') {
		unsigned long long lo, hi, n;

		HT_EQ(sscanf(p, "%llu %llu %llu", &lo, &hi, &n), 3,
		      "a 'low high count' histogram line in %s", hist);
		HT_LE(lo, hi, "histogram bucket [%llu, %llu] in order", lo, hi);
		pongs += (long long)n;
		p = strchr(p, '\n') + 1;
	}
	HT_EQ(pongs, jnum_in(fx, "\"steady\":", "pongs"),
	      "counts in the steady histogram block against the steady window's PONGs");
	unlink(ev);
	unlink(hist);
}

/* A step whose p99 exceeds --step-stop-p99 ends the ramp there: later steps never run, and the
 * clients go back to --interval for the rest of the run.
 */
static void test_ramp_stops(void **state)
{
	struct fx *fx = *state;
	char ev[] = "/tmp/test_hbload_ev.XXXXXX", evbuf[4096] = "";
	FILE *f;

	close(mkstemp(ev));
	/* no loopback answer takes less than 1 us: the first step fails */
	run(fx, "--server", "127.0.0.1", "--clients", "100", "--proto", "tcp", "--interval", "0.2",
	    "--duration", "0.5", "--steps", "500,1000,2000", "--step-s", "1", "--step-settle",
	    "0.3", "--step-stop-p99", "0.001", "--events", ev, "--json", NULL);
	HT_EQ(fx->status, 0, "exit code of hbload (summary above)");
	HT_EQ(count_of(strstr(fx->out, "\"steps\":"), "\"rate\":"), 1,
	      "steps run before the ramp stopped (summary above)");
	assert_non_null(strstr(fx->out, "\"ok\":false"));
	assert_non_null(strstr(fx->out, "\"ramp_stopped\":true"));
	HT_EQ(jnum(fx, "ceiling_hb_per_s"), 0, "hbload's ceiling_hb_per_s (summary above)");
	HT_EQ(jnum(fx, "breaks_at_hb_per_s"), 500, "hbload's breaks_at_hb_per_s (summary above)");
	HT_EQ(jnum(fx, "lost"), 0, "hbload's lost (summary above)");
	f = fopen(ev, "r");
	assert_non_null(f);
	HT_GT(fread(evbuf, 1, sizeof(evbuf) - 1, f), 0, "bytes read from the events file %s", ev);
	fclose(f);
	unlink(ev);
	print_message("events:\n%s", evbuf);
	/* step 2 started before step 1 was judged (1 s after its end); step 3 never did */
	assert_non_null(strstr(evbuf, " ramp_end 1\n"));
	assert_null(strstr(evbuf, " step 3 "));
	/* back at 100 clients / 0.2 s = 500/s after the stop: from its judgement (~2.5 s) to
	 * the end (3.5 s) about 500 PINGs, not the 2000/s of step 3
	 */
	HT_LT(jnum(fx, "pings"), 500 + 300 + 1000 + 1200,
	      "PINGs of a ramp stopped after its first step (summary above)");
}

static void test_unreachable(void **state)
{
	struct fx *fx = *state;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);

	/* a port nobody listens on: bound, read, closed */
	HT_EQ(bind(fd, (struct sockaddr *)&a, len), 0, "bind of the port nothing will listen on");
	getsockname(fd, (struct sockaddr *)&a, &len);
	close(fd);
	snprintf(fx->port, sizeof(fx->port), "%u", ntohs(a.sin_port));
	run(fx, "--server", "127.0.0.1", "--clients", "20", "--proto", "tcp", "--interval", "1",
	    "--duration", "1", "--json", NULL);
	HT_EQ(fx->status, 2, "exit code of hbload (summary above)");
	HT_EQ(jnum(fx, "connected"), 0, "hbload's connected (summary above)");
	HT_GE(jnum(fx, "connect_failed"), 8,
	      "hbload's connect_failed with nothing listening (summary above)");
	HT_GE(jnum(fx, "connrefused"), 8,
	      "hbload's connrefused with nothing listening (summary above)");
	/* UDP: the ICMP port unreachable comes back as ECONNREFUSED on the socket */
	run(fx, "--server", "127.0.0.1", "--clients", "20", "--proto", "udp", "--interval", "1",
	    "--duration", "1", "--json", NULL);
	HT_EQ(fx->status, 2, "exit code of hbload (summary above)");
	HT_EQ(jnum(fx, "connected"), 0, "hbload's connected (summary above)");
}

static void test_local_failures(void **state)
{
	struct fx *fx = *state;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd;

	/* a first source address this host does not have: refused at start (the probe binds) */
	run(fx, "--server", "127.0.0.1", "--clients", "20", "--proto", "tcp", "--interval", "1",
	    "--duration", "1", "--json", "--source", "192.0.2.1", NULL);
	HT_EQ(fx->status, 1, "exit code of hbload (summary above)");
	/* one good and one bad source: half the clients connect, the binds of the others fail
	 * with EADDRNOTAVAIL, are counted and retried until the setup timeout; nothing crashes
	 */
	run(fx, "--server", "127.0.0.1", "--clients", "20", "--proto", "tcp", "--interval", "0.2",
	    "--duration", "0.5", "--json", "--source", "127.0.1.1,192.0.2.1", "--setup-timeout",
	    "1.5", NULL);
	HT_EQ(fx->status, 0, "exit code of hbload (summary above)");
	HT_EQ(jnum(fx, "connected"), 10, "hbload's connected (summary above)");
	HT_EQ(jnum(fx, "lost"), 0, "hbload's lost (summary above)");
	HT_GE(jnum(fx, "addrnotavail"), 10,
	      "hbload's addrnotavail for 20 clients on too few source ports (summary above)");
	HT_EQ(jnum(fx, "connect_failed"), jnum(fx, "addrnotavail"),
	      "hbload's connect_failed (summary above)");
	assert_non_null(strstr(fx->out, "\"setup_complete\":false"));

	/* a listener that never accepts: its queue fills, later SYNs go unanswered (connect
	 * timeouts) and the few that connect never get a WELCOME (HELLO timeouts)
	 */
	fd = socket(AF_INET, SOCK_STREAM, 0);
	HT_EQ(bind(fd, (struct sockaddr *)&a, len), 0, "bind of the port that never accepts");
	HT_EQ(listen(fd, 0), 0, "listen with a backlog of 0");
	getsockname(fd, (struct sockaddr *)&a, &len);
	snprintf(fx->port, sizeof(fx->port), "%u", ntohs(a.sin_port));
	run(fx, "--server", "127.0.0.1", "--clients", "10", "--proto", "tcp", "--interval", "1",
	    "--duration", "1", "--json", "--connect-timeout", "0.3", "--hello-timeout", "0.3",
	    "--setup-timeout", "3", NULL);
	close(fd);
	HT_EQ(fx->status, 2, "exit code of hbload (summary above)");
	HT_EQ(jnum(fx, "connected"), 0, "hbload's connected (summary above)");
	HT_GE(jnum(fx, "timeout"), 1,
	      "hbload's timeout: connects cancelled by their link timeout (summary above)");
	HT_GE(jnum(fx, "timeouts"), 1, "hbload's timeouts: HELLOs without WELCOME (summary above)");
}

static void test_auth_refused(void **state)
{
	struct fx *fx = *state;
	char other[] = "/tmp/test_hbload_other.XXXXXX";
	int fd = mkstemp(other);
	const char *line = "1-1000 derive ffeeddccbbaa99887766554433221100\n";

	HT_EQ(write(fd, line, strlen(line)), (ssize_t)strlen(line),
	      "key file with another master written");
	close(fd);
	/* hbload signs with another master key than the responder knows: every HELLO refused */
	run(fx, "--server", "127.0.0.1", "--clients", "20", "--proto", "tcp", "--interval", "1",
	    "--duration", "1", "--json", "--keys", other, NULL);
	HT_EQ(fx->status, 2, "exit code of hbload (summary above)");
	HT_EQ(jnum(fx, "connected"), 0, "hbload's connected (summary above)");
	HT_GE(jnum(fx, "auth_failed"), 8,
	      "hbload's auth_failed with the wrong master key (summary above)");
	HT_GE(fx->r.auth_fail, 8, "HELLOs the responder refused");
	run(fx, "--server", "127.0.0.1", "--clients", "20", "--proto", "udp", "--interval", "1",
	    "--duration", "1", "--json", "--keys", other, NULL);
	unlink(other);
	HT_EQ(fx->status, 2, "exit code of hbload (summary above)");
	HT_GE(jnum(fx, "auth_failed"), 8,
	      "hbload's auth_failed over UDP with the wrong master key (summary above)");
}

static void test_bad_args(void **state)
{
	struct fx *fx = *state;

	run(fx, "--server", "127.0.0.1", "--clients", "10", "--proto", "sctp", "--interval", "1",
	    "--duration", "1", NULL);
	HT_EQ(fx->status, 1, "exit code of hbload (summary above)");
	run(fx, "--server", "127.0.0.1", "--proto", "tcp", "--interval", "1", "--duration", "1",
	    NULL);
	HT_EQ(fx->status, 1, "exit code of hbload (summary above)");
	run(fx, "--server", "127.0.0.1", "--clients", "10", "--interval", "1", "--duration", "1",
	    "--source", "10.0.0.9-10.0.0.1", NULL);
	HT_EQ(fx->status, 1, "exit code of hbload (summary above)");
	/* devices outside the key store's range are refused before any connection */
	run(fx, "--server", "127.0.0.1", "--clients", "10", "--interval", "1", "--duration", "1",
	    "--first-device", "999995", NULL);
	HT_EQ(fx->status, 1, "exit code of hbload (summary above)");
	HT_EQ(fx->r.hellos, 0, "HELLOs the responder got from refused runs");
}

static int serve_main(int argc, char **argv)
{
	static struct responder r;
	const char *keys = NULL;
	uint32_t interval_ms = 1000;
	char err[256];
	int reuse = 0;

	/* argv: test_hbload --serve PORT [options] */
	for (int i = 3; i < argc; i++) {
		if (!strcmp(argv[i], "--reuseport"))
			reuse = 1;
		else if (!strcmp(argv[i], "--keys") && i + 1 < argc)
			keys = argv[++i];
		else if (!strcmp(argv[i], "--interval-ms") && i + 1 < argc)
			interval_ms = (uint32_t)atoi(argv[++i]);
	}
	if (!keys || hb_keystore_load(keys, &ks, err, sizeof(err))) {
		fprintf(stderr, "--serve needs --keys FILE (%s)\n", keys ? err : "missing");
		return 1;
	}
	r.ks = ks;
	r.interval_ms = interval_ms;
	r.timeout_ms = interval_ms * 3 / 2;
	if (rsp_open(&r, AF_INET, (uint16_t)atoi(argv[2]), reuse)) {
		perror("responder");
		return 1;
	}
	alarm(600);
	fprintf(stderr, "responder on 127.0.0.1:%u (pid %d)\n", r.port, getpid());
	rsp_serve(&r);
	return 0;
}

int main(int argc, char **argv)
{
	char err[256];
	int fd, rc;

	if (argc > 2 && !strcmp(argv[1], "--serve"))
		return serve_main(argc, argv);
	if (hbt_find("hbload", argv[0], hbload_path, sizeof(hbload_path))) {
		fprintf(stderr, "test_hbload: no hbload binary ($BUILD/hbload or %s)\n",
			hbload_path);
		return 1;
	}
	fd = mkstemp(keys_path);
	if (fd < 0 || dprintf(fd, "1-1000000 derive %s\n", MASTER) < 0)
		return 1;
	close(fd);
	if (hb_keystore_load(keys_path, &ks, err, sizeof(err))) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_tcp, setup4, teardown),
		cmocka_unit_test_setup_teardown(test_udp, setup4, teardown),
		cmocka_unit_test_setup_teardown(test_udp_one_lost_pong, setup4, teardown),
		cmocka_unit_test_setup_teardown(test_ipv6, setup6, teardown),
		cmocka_unit_test_setup_teardown(test_silent_expire, setup4_fast, teardown),
		cmocka_unit_test_setup_teardown(test_storm, setup4, teardown),
		cmocka_unit_test_setup_teardown(test_windows_and_steps, setup4, teardown),
		cmocka_unit_test_setup_teardown(test_ramp_stops, setup4, teardown),
		cmocka_unit_test_setup_teardown(test_unreachable, setup4, teardown),
		cmocka_unit_test_setup_teardown(test_local_failures, setup4, teardown),
		cmocka_unit_test_setup_teardown(test_auth_refused, setup4, teardown),
		cmocka_unit_test_setup_teardown(test_bad_args, setup4, teardown),
	};
	rc = cmocka_run_group_tests_name("hbload", tests, NULL, NULL);
	unlink(keys_path);
	hb_keystore_free(ks);
	return rc;
}
