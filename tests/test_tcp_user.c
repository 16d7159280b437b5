// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The default TCP mode, hbd answering (hbctl load without --tcp, i.e. --tcp user), on a veth
 * between two namespaces with the real hbctl and hbd:
 *   - the load attaches XDP only, and hbd says it answers TCP heartbeats itself;
 *   - hbctl conns still lists the device: the conns entry hbd writes at its HELLO, the last
 *     heartbeat from the stamp hbd stores as it answers, the peer, RTT and last ACK from the
 *     kernel (sock_diag), and no kernel counts (null, not 0: the kernel answered none);
 *   - bpftool shows the entry by its named fields; it goes when the device closes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include "hbeat_abi.h"
#include "lib/ctl.h"
#include "lib/ht_assert.h"
#include "lib/hbd_harness.h"
#include "lib/netns_env.h"
#include "lib/sh.h"
#include "lib/sock.h"

#define PORT 7653
#define PORT_S "7653"

static struct hn_env E;
static struct ht_daemon D;
static char CTL[108];

/* hbctl conns --json (with sel) through jq filter q: 0 if it holds. */
static int conns_hold(const char *sel, const char *q)
{
	return hbt_sh("nsenter --net=/run/netns/%s %s/hbctl conns --json --pin-path %s %s | "
		      "jq -e '%s' >/dev/null",
		      E.srv_ns, E.build, E.pin, sel, q);
}

static void conns_lists_what_hbd_answers(void **state)
{
	const char *args[] = { "--pin-path", E.pin, "--port", PORT_S, "--interval", "1", NULL };
	uint8_t buf[HB_MAX_FRAME];
	struct hb_ping ping = { .ts = 1 };
	struct hb_frame f;
	int fd, gone = 1;

	(void)state;
	HT_EQ(tc_start(&D, CTL, sizeof(CTL), false, NULL, args), 0, "hbd started in %s", E.srv_ns);
	HT_TRUE(ht_file_contains(D.err, "--tcp user", NULL, 0),
		"hbd says it answers TCP itself (--tcp user) in its log %s", D.err);
	HT_EQ(hn_enter_cli(&E), 0, "into %s", E.cli_ns);
	fd = ht_tcp_login(PORT, 104, false, NULL);
	hn_leave(&E);
	HT_GE(fd, 0, "login of device 104");
	/* PINGs for 1.5 s, each answered by hbd; the listing comes right after the last */
	for (int i = 0; i < 6; i++) {
		ht_sleep_ms(250);
		HT_EQ(ht_send_frame(fd, HB_PING, (uint32_t)(10 + i), &ping, sizeof(ping)), 0,
		      "PING %d sent", i);
		HT_EQ(ht_recv_frame(fd, buf, &f, HT_IO_MS), 1, "an answer to PING %d", i);
		HT_EQ(f.type, HB_PONG, "PONG from hbd to PING %d", i);
	}
	for (int by_device = 0; by_device < 2; by_device++) {
		const char *sel = by_device ? "--device 104" : "--transport tcp";

		HT_EQ(conns_hold(sel, ".count.tcp == 1 and .conns[0].device_id == 104 and "
				      ".conns[0].state == \"authed\""),
		      0, "hbctl conns %s: device 104, authed", sel);
		HT_EQ(conns_hold(sel, ".conns[0].last_seen_ms_ago < 1000"), 0,
		      "hbctl conns %s: the last heartbeat is the last PING's (not the login's, "
		      "1.5 s ago)",
		      sel);
		HT_EQ(conns_hold(sel,
				 ".conns[0].peer | test(\"^10[.]77[.][0-9]+[.][0-9]+:[0-9]+$\")"),
		      0, "hbctl conns %s: the peer, from the kernel", sel);
		HT_EQ(conns_hold(sel, ".conns[0].rtt_us > 0 and .conns[0].last_ack_ms != null"), 0,
		      "hbctl conns %s: the kernel's RTT and last ACK", sel);
		HT_EQ(conns_hold(sel, ".conns[0].pings == null and .conns[0].echoes == null"), 0,
		      "hbctl conns %s: no kernel counts", sel);
	}
	HT_EQ(conns_hold("--silent 5", ".count.tcp == 0"), 0,
	      "hbctl conns --silent 5 leaves out the device that just PINGed");
	HT_EQ(hbt_sh("nsenter --net=/run/netns/%s %s/hbctl conns --pin-path %s | "
		     "grep -Eq '10[.]77[.][0-9.]+:[0-9]+ +104 +authed'",
		     E.srv_ns, E.build, E.pin),
	      0, "the table's row of device 104");
	HT_EQ(hbt_sh("bpftool map dump pinned %s/%s | grep -q '\"device_id\": 104'", E.pin,
		     HB_MAP_CONNS),
	      0, "bpftool shows device 104's conns entry by field name");
	close(fd);
	for (int i = 0; i < 100 && gone; i++, ht_sleep_ms(10))
		gone = conns_hold("", ".count.tcp == 0");
	HT_EQ(gone, 0, "device 104's entry gone within 1 s of its close");
	HT_EQ(ht_stop(&D), 0, "exit code of hbd after SIGTERM");
	tc_cleanup(&D);
}

static int setup(void **state)
{
	(void)state;
	if (hn_up(&E, 'u', 2))
		return -1;
	/* not hn_load, which asks for --tcp kernel: this test is about the default */
	if (hbt_sh("nsenter --net=/run/netns/%s %s/hbctl load --dev %s --mode native --port %d "
		   "--pin-path %s --json | jq -e '.tcp == \"user\" and .sockops_id == 0' >&2",
		   E.srv_ns, E.build, E.srv_if, PORT, E.pin))
		return -1;
	E.loaded = true;
	hn_aim(&E);
	return 0;
}

static int teardown(void **state)
{
	tc_reap(state);
	hn_down(&E);
	return 0;
}

static int each_teardown(void **state)
{
	hn_leave(&E);
	return tc_reap(state);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(conns_lists_what_hbd_answers, each_teardown),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests_name("tcp_user", tests, setup, teardown);
}
