// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbeat beside other XDP programs on one NIC (a veth between two namespaces of our own):
 *  - a NIC that already runs a program outside libxdp's dispatcher is refused, clearly, and
 *    that program is left alone;
 *  - where the kernel loads freplace programs, hb_xdp joins libxdp's dispatcher and a second
 *    program loads beside it with xdp-loader; where it does not (this project's 6.18 machines),
 *    hbctl says so and why, xdp-loader lists hb_xdp, and a second xdp-loader load is refused
 *    without disturbing hbeat;
 *  - hbctl load --then chains an unrelated program after hb_xdp: hb_xdp still answers a
 *    heartbeat with XDP_TX, and the other program drops what it was written to drop.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <bpf/bpf.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <poll.h>
#include <stdio.h>
#include <unistd.h>

#include "hb_env.h"
#include "lib/ht_assert.h"
#include "lib/hbd_harness.h"
#include "lib/sh.h"

#define HB_PORT 7600
#define DROP_PORT 9999 /* examples/xdp_portfilter.bpf.c drops UDP to it */
#define PASS_PORT 9998

static struct {
	const char *build;
	char name[16], srv[32], cli[32], sif[24], pin[64], out[64];
	int home; /* this process's own network namespace */
} C;

static int hbctl(const char *args)
{
	return hbt_sh("nsenter --net=/run/netns/%s %s/hbctl %s --pin-path %s > %s 2>&1", C.srv,
		      C.build, args, C.pin, C.out);
}

static bool out_has(const char *s)
{
	return ht_file_contains(C.out, s, NULL, 0);
}

static int teardown(void **state)
{
	(void)state;
	if (C.home >= 0)
		setns(C.home, CLONE_NEWNET);
	hbt_sh("nsenter --net=/run/netns/%s %s/hbctl unload --dev %s --pin-path %s >/dev/null 2>&1",
	       C.srv, C.build, C.sif, C.pin);
	hbt_sh("rm -rf %s %s", C.pin, C.out);
	hbt_sh("BUILD=%s scripts/netns.sh down %s", C.build, C.name);
	if (C.home >= 0)
		close(C.home);
	return 0;
}

static int setup(void **state)
{
	C.build = getenv("BUILD") && *getenv("BUILD") ? getenv("BUILD") : "build";
	snprintf(C.name, sizeof(C.name), "hbo%d", (int)(getpid() % 100000));
	snprintf(C.srv, sizeof(C.srv), "%s-srv", C.name);
	snprintf(C.cli, sizeof(C.cli), "%s-cli", C.name);
	snprintf(C.sif, sizeof(C.sif), "%s-s", C.name);
	snprintf(C.pin, sizeof(C.pin), "/sys/fs/bpf/hbeat-ops-%d", (int)getpid());
	snprintf(C.out, sizeof(C.out), "/tmp/hbo-coexist-%d.out", (int)getpid());
	C.home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	if (C.home < 0 || hbt_sh("BUILD=%s scripts/netns.sh up %s 1 >&2", C.build, C.name)) {
		teardown(state);
		return -1;
	}
	return 0;
}

static void enter(const char *ns)
{
	char p[64];
	int fd;

	snprintf(p, sizeof(p), "/run/netns/%s", ns);
	fd = open(p, O_RDONLY | O_CLOEXEC);
	HT_GE(fd, 0, "open of netns %s", p);
	HT_EQ(setns(fd, CLONE_NEWNET), 0, "setns into %s", ns);
	close(fd);
}

static int udp_bound(const char *ns, const char *addr, uint16_t port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	int fd;

	enter(ns);
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	inet_pton(AF_INET, addr, &sa.sin_addr);
	HT_EQ(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0,
	      "bind of a UDP socket to %s port %u in %s", addr, port, ns);
	HT_EQ(setns(C.home, CLONE_NEWNET), 0, "setns back to this test's netns");
	return fd;
}

static void send_to(int fd, uint16_t port, const void *buf, size_t n)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };

	inet_pton(AF_INET, "10.77.0.1", &sa.sin_addr);
	HT_EQ(sendto(fd, buf, n, 0, (struct sockaddr *)&sa, sizeof(sa)), (ssize_t)n,
	      "datagram of %zu bytes sent to port %u", n, port);
}

static bool arrives(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char b[64];

	return poll(&p, 1, ms) == 1 && recv(fd, b, sizeof(b), 0) > 0;
}

static long long jq(const char *filter)
{
	char cmd[512], line[64] = "";
	FILE *p;

	snprintf(cmd, sizeof(cmd), "jq -r '%s' %s", filter, C.out);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	if (!fgets(line, sizeof(line), p))
		line[0] = 0;
	pclose(p);
	return line[0] && line[0] != 'n' ? atoll(line) : -1;
}

static void refuses_a_program_outside_the_dispatcher(void **state)
{
	char id_before[32] = "", id_after[32] = "";

	(void)state;
	HT_EQ(hbt_sh("ip -n %s link set dev %s xdpdrv obj %s/bpf/xdp_pass.bpf.o sec xdp", C.srv,
		     C.sif, C.build),
	      0, "xdp_pass attached to %s in %s", C.sif, C.srv);
	HT_EQ(hbt_sh("ip -j -n %s link show %s | jq -r '.[0].xdp.prog.id' > %s", C.srv, C.sif,
		     C.out),
	      0, "xdp prog id of %s into %s", C.sif, C.out);
	HT_TRUE(ht_file_contains(C.out, "", id_before, sizeof(id_before)),
		"xdp prog id of %s before the load, in %s", C.sif, C.out);
	HT_EQ(hbctl("load --dev hbo-none --mode native"), 2,
	      "exit code of hbctl load on a NIC that does not exist (2: environment; output in %s)",
	      C.out);
	{
		char args[96];

		snprintf(args, sizeof(args), "load --dev %s --mode native", C.sif);
		HT_EQ(hbctl(args), 3,
		      "exit code of hbctl %s beside a program outside the dispatcher (%s)", args,
		      C.out);
	}
	HT_TRUE(out_has("already runs XDP program xdp_pass"),
		"the refusal names the program already there (hbctl output in %s)", C.out);
	HT_TRUE(out_has("not multi-program aware"), "the refusal says why (hbctl output in %s)",
		C.out);
	HT_TRUE(out_has("--then FILE[:PROG]"), "the refusal names the way out (hbctl output in %s)",
		C.out);
	HT_TRUE(out_has("everything it attached has been removed again"),
		"the refusal says nothing stayed attached (hbctl output in %s)", C.out);
	/* the other program is exactly where it was */
	HT_EQ(hbt_sh("ip -j -n %s link show %s | jq -r '.[0].xdp.prog.id' > %s", C.srv, C.sif,
		     C.out),
	      0, "xdp prog id of %s into %s", C.sif, C.out);
	HT_TRUE(ht_file_contains(C.out, "", id_after, sizeof(id_after)),
		"xdp prog id of %s after the refused load, in %s", C.sif, C.out);
	assert_string_equal(id_before, id_after);
	HT_NE(access(C.pin, F_OK), 0, "no pin directory %s left by the refused load", C.pin);
	HT_EQ(hbt_sh("ip -n %s link set dev %s xdpdrv off", C.srv, C.sif), 0,
	      "xdp_pass detached from %s", C.sif);
}

static void dispatcher_or_a_clear_refusal(void **state)
{
	char args[160], why[256];
	bool freplace = hbe_probe_freplace(why, sizeof(why)) == 0;

	(void)state;
	snprintf(args, sizeof(args), "load --dev %s --mode native --json", C.sif);
	HT_EQ(hbctl(args), 0, "exit code of hbctl %s (output in %s)", args, C.out);
	HT_TRUE(out_has("{\"loaded\":true,\"dev\":\""),
		"hbctl load --json says loaded (output in %s)", C.out);
	/* the default TCP path is hbd's (--tcp user): no sk_skb or sock_ops program */
	HT_TRUE(out_has("\"tcp\":\"user\",\"parser_id\":0,\"verdict_id\":0,\"sockops_id\":0"),
		"--tcp user by default, no TCP programs attached (hbctl output in %s)", C.out);
	HT_TRUE(out_has(freplace ? "\"attach\":\"libxdp-dispatcher\""
				 : "\"attach\":\"libxdp-single\""),
		"the attach mode this kernel allows (freplace %d; hbctl output in %s)", freplace,
		C.out);
	HT_EQ(hbt_sh("nsenter --net=/run/netns/%s xdp-loader status %s > %s 2>&1", C.srv, C.sif,
		     C.out),
	      0, "xdp-loader status %s into %s", C.sif, C.out);
	HT_TRUE(out_has("hb_xdp"), "hb_xdp in xdp-loader status (%s)", C.out);
	if (freplace) {
		/* a kernel with BPF trampolines: hb_xdp sits in the dispatcher, others join */
		HT_EQ(hbctl("status --json"), 0, "exit code of hbctl status --json (output in %s)",
		      C.out);
		HT_TRUE(out_has("\"attach\":\"libxdp-dispatcher\""),
			"hbctl status says libxdp-dispatcher (output in %s)", C.out);
		HT_EQ(hbt_sh("nsenter --net=/run/netns/%s xdp-loader load -m native %s "
			     "%s/examples/xdp_portfilter.bpf.o >/dev/null 2>&1",
			     C.srv, C.sif, C.build),
		      0, "xdp_portfilter added to the dispatcher on %s", C.sif);
		HT_EQ(hbt_sh("nsenter --net=/run/netns/%s xdp-loader status %s > %s 2>&1", C.srv,
			     C.sif, C.out),
		      0, "xdp-loader status %s into %s", C.sif, C.out);
		HT_TRUE(out_has("hb_xdp") && out_has("portfilter"),
			"both hb_xdp and portfilter in xdp-loader status (%s)", C.out);
	} else {
		/* this kernel: said at load, said by status, and nothing else can join */
		HT_EQ(hbctl("status --json"), 0, "exit code of hbctl status --json (output in %s)",
		      C.out);
		HT_TRUE(out_has("\"attach\":\"libxdp-single\""),
			"hbctl status says libxdp-single (output in %s)", C.out);
		HT_TRUE(out_has("\"dispatcher_unavailable\":\"the kernel refuses freplace "
				"(BPF_PROG_TYPE_EXT) programs"),
			"hbctl status says why there is no dispatcher (output in %s)", C.out);
		HT_NE(hbt_sh("nsenter --net=/run/netns/%s xdp-loader load -m native %s "
			     "%s/examples/xdp_portfilter.bpf.o > %s 2>&1",
			     C.srv, C.sif, C.build, C.out),
		      0, "xdp-loader refused a program beside hb_xdp without a dispatcher (%s)",
		      C.out);
		HT_TRUE(out_has("not using a dispatcher"),
			"xdp-loader says hb_xdp uses no dispatcher (output in %s)", C.out);
		HT_EQ(hbt_sh("nsenter --net=/run/netns/%s xdp-loader status %s > %s 2>&1", C.srv,
			     C.sif, C.out),
		      0, "xdp-loader status %s into %s", C.sif, C.out);
		HT_TRUE(out_has("hb_xdp"), "hb_xdp in xdp-loader status (%s)", C.out);
		HT_FALSE(out_has("portfilter"),
			 "portfilter not attached beside hb_xdp (xdp-loader status in %s)", C.out);
	}
	snprintf(args, sizeof(args), "unload --dev %s --json", C.sif);
	HT_EQ(hbctl(args), 0, "exit code of hbctl %s (output in %s)", args, C.out);
	HT_TRUE(out_has("\"xdp_detached\":true,\"sockops_detached\":false,") &&
			out_has("\"tcp\":\"user\""),
		"hbctl unload --json says XDP detached, no TCP programs (output in %s)", C.out);
	HT_TRUE(out_has("\"pin_dir_removed\":true"),
		"hbctl unload --json says the pin directory went (output in %s)", C.out);
}

/* A PING for an admitted session (written into the pinned map as hbd would), from the client
 * namespace: answered by hb_xdp with XDP_TX, whatever runs after it. */
static void heartbeat_answered_by_xdp(int fd, uint64_t token)
{
	uint8_t buf[HB_MAX_FRAME];
	struct hb_session s = { .state = HB_STATE_AUTHED, .device_id = 1, .port = htons(40000) };
	struct hb_session_key k = { .token = token };
	struct hb_ping ping = { .ts = htobe64(42) };
	char path[128];
	struct hb_frame f;
	size_t n;
	int mfd;

	s.addr[10] = s.addr[11] = 0xff;
	inet_pton(AF_INET, "10.77.0.2", s.addr + 12);
	snprintf(path, sizeof(path), "%s/%s", C.pin, HB_MAP_SESSIONS);
	mfd = bpf_obj_get(path);
	HT_GE(mfd, 0, "open of the pinned sessions map %s", path);
	HT_EQ(bpf_map_update_elem(mfd, &k, &s, BPF_ANY), 0,
	      "session for token %#llx written into %s", (unsigned long long)token, path);
	close(mfd);
	n = hb_encode(buf, sizeof(buf), HB_UDP, HB_PING, 5, token, &ping, sizeof(ping));
	send_to(fd, HB_PORT, buf, n);
	HT_EQ(ht_udp_recv(fd, buf, &f, 2000), 1, "an answer to the PING within 2 s");
	HT_EQ(f.type, HB_PONG, "frame type of the answer from hb_xdp");
	HT_EQ(f.seq, 5, "sequence number of the PONG");
}

static void then_chains_an_unrelated_program(void **state)
{
	int ping = udp_bound(C.cli, "10.77.0.2", 40000), tx = udp_bound(C.cli, "10.77.0.2", 0);
	int rx_drop = udp_bound(C.srv, "0.0.0.0", DROP_PORT);
	int rx_pass = udp_bound(C.srv, "0.0.0.0", PASS_PORT);
	char args[256];

	(void)state;
	/* without the chain, both ports get their datagrams (the control case) */
	snprintf(args, sizeof(args), "load --dev %s --mode native", C.sif);
	HT_EQ(hbctl(args), 0, "exit code of hbctl %s (output in %s)", args, C.out);
	send_to(tx, DROP_PORT, "a", 1);
	HT_TRUE(arrives(rx_drop, 2000),
		"control case: a datagram for port %d arrives without the chain", DROP_PORT);
	snprintf(args, sizeof(args), "unload --dev %s", C.sif);
	HT_EQ(hbctl(args), 0, "exit code of hbctl %s (output in %s)", args, C.out);

	snprintf(args, sizeof(args),
		 "load --dev %s --mode native --then %s/examples/xdp_portfilter.bpf.o", C.sif,
		 C.build);
	HT_EQ(hbctl(args), 0, "exit code of hbctl %s (output in %s)", args, C.out);
	HT_TRUE(out_has("then "), "hbctl load names the chained program (output in %s)", C.out);
	HT_EQ(hbctl("status --json"), 0, "exit code of hbctl status --json (output in %s)", C.out);
	HT_TRUE(out_has("\"then\":{\"prog_id\":"),
		"hbctl status --json shows the chained program's id (output in %s)", C.out);
	HT_TRUE(out_has("\"name\":\"portfilter\""),
		"hbctl status --json names portfilter (output in %s)", C.out);
	HT_GT(jq(".xdp.then.prog_id"), 0, "prog id of the chained program in %s", C.out);
	/* hbeat first: its heartbeat is answered in the driver */
	heartbeat_answered_by_xdp(ping, 0x1122334455667788ull);
	/* then the other program on what hbeat passed: one port dropped, another delivered */
	for (int i = 0; i < 3; i++)
		send_to(tx, DROP_PORT, "b", 1);
	send_to(tx, PASS_PORT, "c", 1);
	HT_TRUE(arrives(rx_pass, 2000), "a datagram for port %d passed by both programs",
		PASS_PORT);
	HT_FALSE(arrives(rx_drop, 300), "datagrams for port %d dropped by the chained program",
		 DROP_PORT);
	/* a chained program that is not XDP is refused before anything is attached */
	snprintf(args, sizeof(args), "unload --dev %s", C.sif);
	HT_EQ(hbctl(args), 0, "exit code of hbctl %s (output in %s)", args, C.out);
	snprintf(args, sizeof(args), "load --dev %s --then %s/bpf/sk_skb_hb.bpf.o", C.sif, C.build);
	HT_EQ(hbctl(args), 3,
	      "exit code of hbctl %s: a chained program that is not XDP (output in %s)", args,
	      C.out);
	HT_TRUE(out_has("has no XDP program"),
		"the refusal of a non-XDP program (hbctl output in %s)", C.out);
	HT_NE(access(C.pin, F_OK), 0, "no pin directory %s left by the refused load", C.pin);
	close(ping);
	close(tx);
	close(rx_drop);
	close(rx_pass);
}

/* hbctl load --tcp user: XDP only, the choice recorded in config for hbd and shown by status;
 * unload has no TCP programs to detach. A wrong value is a usage error. */
static void tcp_user_attaches_no_tcp_programs(void **state)
{
	char args[160];

	(void)state;
	snprintf(args, sizeof(args), "load --dev %s --tcp sideways", C.sif);
	HT_EQ(hbctl(args), 1, "exit code of hbctl %s: a usage error (output in %s)", args, C.out);
	HT_TRUE(out_has("--tcp must be kernel, user or keepalive"),
		"the usage error for --tcp sideways (hbctl output in %s)", C.out);
	/* the kernel answers MQTT PINGREQs only on its own TCP path */
	snprintf(args, sizeof(args), "load --dev %s --mqtt-port 1883", C.sif);
	HT_EQ(hbctl(args), 1, "exit code of hbctl %s: a usage error (output in %s)", args, C.out);
	HT_TRUE(out_has("which takes --tcp kernel"),
		"the usage error for --mqtt-port with --tcp user (hbctl output in %s)", C.out);
	HT_NE(access(C.pin, F_OK), 0, "nothing loaded by the refused load");
	snprintf(args, sizeof(args), "load --dev %s --mode native --tcp user --json", C.sif);
	HT_EQ(hbctl(args), 0, "exit code of hbctl %s (output in %s)", args, C.out);
	HT_TRUE(out_has("\"tcp\":\"user\",\"parser_id\":0,\"verdict_id\":0,\"sockops_id\":0"),
		"hbctl load --tcp user attaches no TCP programs (output in %s)", C.out);
	HT_EQ(hbctl("status --json"), 0, "exit code of hbctl status --json (output in %s)", C.out);
	HT_TRUE(out_has("\"tcp\":\"user\",\"sockmap\":{\"parser_id\":0,\"verdict_id\":0}"),
		"hbctl status shows --tcp user without sockmap programs (output in %s)", C.out);
	HT_TRUE(out_has("\"sockops\":{\"link_id\":0,"),
		"hbctl status shows no sock_ops link (output in %s)", C.out);
	snprintf(args, sizeof(args), "unload --dev %s --json", C.sif);
	HT_EQ(hbctl(args), 0, "exit code of hbctl %s (output in %s)", args, C.out);
	HT_TRUE(out_has("\"xdp_detached\":true,\"sockops_detached\":false,"),
		"hbctl unload detached XDP and no sock_ops (output in %s)", C.out);
	HT_TRUE(out_has("\"tcp\":\"user\",\"pins_removed\":9,\"pin_dir_removed\":true"),
		"hbctl unload removed every pin and the directory (output in %s)", C.out);
	HT_NE(access(C.pin, F_OK), 0, "pin directory %s removed by unload", C.pin);
}

/* hbctl load --tcp keepalive: sock_ops (which turns TCP keepalive on) but no stream parser or
 * verdict; status shows the mode, without timing until an hbd writes it; unload detaches
 * sock_ops. */
static void tcp_keepalive_attaches_sock_ops_only(void **state)
{
	char args[160];

	(void)state;
	snprintf(args, sizeof(args), "load --dev %s --mode native --tcp keepalive --json", C.sif);
	HT_EQ(hbctl(args), 0, "exit code of hbctl %s (output in %s)", args, C.out);
	HT_TRUE(out_has("\"tcp\":\"keepalive\",\"parser_id\":0,\"verdict_id\":0,"),
		"hbctl load --tcp keepalive attaches no sk_skb programs (output in %s)", C.out);
	/* (libxdp's warnings share the output: no jq here) */
	HT_TRUE(out_has("\"sockops_id\":") && !out_has("\"sockops_id\":0"),
		"hb_sockops attached by --tcp keepalive (output in %s)", C.out);
	HT_EQ(hbctl("status --json"), 0, "exit code of hbctl status --json (output in %s)", C.out);
	HT_TRUE(out_has("\"tcp\":\"keepalive\",\"keepalive\":null,"
			"\"sockmap\":{\"parser_id\":0,\"verdict_id\":0}"),
		"hbctl status shows --tcp keepalive, no timing before hbd, no sockmap programs "
		"(output in %s)",
		C.out);
	HT_GE(jq(".sockops.link_id"), 1, "hbctl status shows the sock_ops link (output in %s)",
	      C.out);
	HT_EQ(hbctl("status"), 0, "exit code of hbctl status (output in %s)", C.out);
	HT_TRUE(out_has("TCP keepalive (--tcp keepalive), no timing yet"),
		"hbctl status says keepalive mode waits for hbd's timing (output in %s)", C.out);
	snprintf(args, sizeof(args), "unload --dev %s --json", C.sif);
	HT_EQ(hbctl(args), 0, "exit code of hbctl %s (output in %s)", args, C.out);
	HT_TRUE(out_has("\"xdp_detached\":true,\"sockops_detached\":true,"),
		"hbctl unload detached XDP and sock_ops (output in %s)", C.out);
	HT_TRUE(out_has("\"tcp\":\"keepalive\",\"pins_removed\":10,\"pin_dir_removed\":true"),
		"hbctl unload removed every pin and the directory (output in %s)", C.out);
	HT_NE(access(C.pin, F_OK), 0, "pin directory %s removed by unload", C.pin);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(refuses_a_program_outside_the_dispatcher),
		cmocka_unit_test(dispatcher_or_a_clear_refusal),
		cmocka_unit_test(then_chains_an_unrelated_program),
		cmocka_unit_test(tcp_user_attaches_no_tcp_programs),
		cmocka_unit_test(tcp_keepalive_attaches_sock_ops_only),
	};

	return cmocka_run_group_tests_name("coexist", tests, setup, teardown);
}
