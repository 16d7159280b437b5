// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The device library (user/device/hbdev.h) and the example device against the real hbd:
 * sessions over TCP and UDP with heartbeats, DATA until ACKed, downlinks, reconnection with
 * backoff across a daemon restart, refused HELLOs, revocation, and examples/device.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <errno.h>
#include <openssl/evp.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "hbdev.h"
#include "lib/ht_assert.h"
#include "lib/ctl.h"

static struct ht_daemon D;
static char CTL[108];

static int group_setup(void **state)
{
	static const char *const args[] = { "--no-offload", "--workers",     "2",  "--interval",
					    "0.2",	    "--expiry-mult", "10", NULL };

	(void)state;
	return tc_start(&D, CTL, sizeof(CTL), false, NULL, args);
}

static int group_teardown(void **state)
{
	int rc = ht_stop(&D);

	(void)state;
	tc_cleanup(&D);
	tc_reap(state);
	return rc;
}

static struct hbdev *open_dev_beat(uint16_t port, uint64_t id, enum hb_transport t,
				   const struct hbc_backoff *bo, bool beat)
{
	uint8_t secret[HB_SECRET_MAX];
	struct hbdev_config cfg = {
		.host = "127.0.0.1",
		.port = port,
		.transport = t,
		.device_id = id,
		.secret = secret,
		.secret_len = (size_t)ht_secret(id, secret),
		.io_timeout_ms = (uint32_t)HT_IO_MS,
		.data_retry_ms = 200,
		.beat = beat,
	};
	struct hbdev *d = NULL;

	if (bo)
		cfg.backoff = *bo;
	HT_EQ(hbdev_open(&d, &cfg), 0, "hbdev_open of device %llu", (unsigned long long)id);
	return d;
}

static struct hbdev *open_dev(uint16_t port, uint64_t id, enum hb_transport t,
			      const struct hbc_backoff *bo)
{
	return open_dev_beat(port, id, t, bo, false);
}

/* Polls until an event of type arrives (others are passed over); fails after ms. */
static void wait_event(struct hbdev *d, enum hbdev_event type, int ms, struct hbdev_ev *ev)
{
	uint64_t end = ht_now_ms() + (uint64_t)ms;

	while (ht_now_ms() < end) {
		if (hbdev_poll(d, (int)(end - ht_now_ms()), ev) == 1 && ev->type == type)
			return;
	}
	fail_msg("no event %d within %d ms", type, ms);
}

/* Sends a downlink through the control socket; returns the fd its answer will come on. */
static int downlink(uint64_t dev, const char *text)
{
	char b64[64], req[128];
	int fd = tc_connect(CTL);

	HT_GE(fd, 0, "connection to the control socket %s", CTL);
	tc_b64(text, (int)strlen(text), b64);
	snprintf(req, sizeof(req), "send %" PRIu64 " %s\n", dev, b64);
	HT_EQ(tc_write(fd, req), 0, "request '%s' written", req);
	return fd;
}

static void session(enum hb_transport t, uint64_t id)
{
	struct hbdev *d = open_dev(D.port, id, t, NULL);
	struct hbdev_ev ev;
	char line[512], want[64];
	int pongs = 0, ctl;
	uint64_t end;

	HT_FALSE(hbdev_connected(d), "hbdev connected before hbdev_connect");
	HT_EQ(hbdev_connect(d), 0, "hbdev_connect of device %llu", (unsigned long long)id);
	HT_TRUE(hbdev_connected(d), "hbdev connected after hbdev_connect");
	HT_EQ(hbdev_state(d)->interval_ms, 200,
	      "heartbeat interval the WELCOME gave (--interval 0.2)");
	/* heartbeats at the server's interval: a second is about five */
	for (end = ht_now_ms() + 1000; ht_now_ms() < end;)
		if (hbdev_poll(d, (int)(end - ht_now_ms()), &ev) == 1 && ev.type == HBDEV_EV_PONG) {
			HT_GT(ev.rtt_ns, 0, "RTT of a PONG");
			pongs++;
		}
	assert_in_range(pongs, 3, 8);
	/* DATA: acknowledged once written */
	HT_EQ(hbdev_send(d, "t=21.5", 6, HT_IO_MS), 0, "DATA sent and ACKed within %d ms",
	      HT_IO_MS);
	snprintf(want, sizeof(want), "\"device\":%" PRIu64 ",\"transport\":\"%s\"", id,
		 t == HB_UDP ? "udp" : "tcp");
	HT_TRUE(ht_file_contains(D.sink, want, line, sizeof(line)),
		"the DATA's sink line (%s) in %s", want, D.sink);
	assert_non_null(strstr(line, "\"payload\":\"dD0yMS41\""));
	HT_EQ(hbdev_send(d, "", 0, 100), -EINVAL, "an empty DATA refused");
	/* a downlink arrives, already acknowledged: the application hears "delivered" */
	ctl = downlink(id, "set rate 60");
	wait_event(d, HBDEV_EV_DOWNLINK, HT_IO_MS, &ev);
	HT_EQ(ev.len, 11, "length of the downlink");
	assert_memory_equal(ev.payload, "set rate 60", 11);
	HT_EQ(tc_line(ctl, line, sizeof(line), HT_IO_MS), 0,
	      "reply line to the downlink's send within %d ms", HT_IO_MS);
	assert_non_null(strstr(line, "\"status\":\"delivered\""));
	close(ctl);
	hbdev_close(d); /* says BYE */
}

static void tcp_session(void **state)
{
	(void)state;
	session(HB_TCP, 3);
}

static void udp_session(void **state)
{
	(void)state;
	session(HB_UDP, 103);
}

static void refused_hello_backs_off(void **state)
{
	const struct hbc_backoff bo = { .base_ms = 100, .max_ms = 400, .jitter_pct = 0 };
	uint8_t wrong[16] = { 1 };
	struct hbdev_config cfg = { .host = "127.0.0.1",
				    .port = D.port,
				    .transport = HB_TCP,
				    .device_id = 4,
				    .secret = wrong,
				    .secret_len = 16,
				    .backoff = bo };
	uint64_t t[5];
	struct hbdev *d;
	struct hbdev_ev ev;

	(void)state;
	HT_EQ(hbdev_open(&d, &cfg), 0, "hbdev_open with the wrong secret");
	HT_EQ(hbdev_connect(d), -EACCES, "hbdev_connect with the wrong secret");
	/* retried on its own, each time after a longer wait: 100, 200, 400, 400 ms */
	for (int i = 0; i < 5; i++) {
		wait_event(d, HBDEV_EV_AUTH_FAILED, 2000, &ev);
		t[i] = ht_now_ms();
	}
	HT_GE(t[1] - t[0], 150,
	      "ms between the first and the second retry (backoff 100 ms, jittered)");
	HT_GE(t[2] - t[1], 350, "ms between the second and the third retry (backoff 200 ms)");
	HT_TRUE(t[3] - t[2] >= 350 && t[3] - t[2] < 1000,
		"ms %llu between the third and the fourth retry: 400 ms, capped at max_ms",
		(unsigned long long)(t[3] - t[2]));
	hbdev_close(d);
	/* configuration errors are caught before any I/O */
	cfg.secret_len = 3;
	HT_EQ(hbdev_open(&d, &cfg), -EINVAL, "hbdev_open with a 3-byte secret");
}

/* Beat mode: BEATs keep the session alive through many of the server's timeouts with no frame
 * coming back; the RTT is the kernel's; DATA still works. */
static void beat_session(void **state)
{
	static const char *const args[] = { "--no-offload", "--interval", "0.2", NULL };
	struct ht_daemon a;
	struct hbdev *d;
	struct hbdev_ev ev;
	uint32_t rtt = 0;
	int events = 0;
	uint64_t end;

	(void)state;
	HT_EQ(ht_start(&a, args), 0, "hbd with --interval 0.2 started");
	d = open_dev_beat(a.port, 6, HB_TCP, NULL, true);
	HT_EQ(hbdev_connect(d), 0, "hbdev_connect of device 6 in beat mode");
	/* 1.5 s: five of the server's 300 ms timeouts; an expiry would be a DISCONNECTED */
	for (end = ht_now_ms() + 1500; ht_now_ms() < end;)
		if (hbdev_poll(d, (int)(end - ht_now_ms()), &ev) == 1) {
			fprintf(stderr, "event %d code %u in beat mode\n", ev.type, ev.code);
			events++;
		}
	HT_EQ(events, 0, "events in 1.5 s of beat mode (no PONG, no expiry)");
	HT_TRUE(hbdev_connected(d), "still connected after 1.5 s of BEATs");
	HT_EQ(hbdev_rtt_us(d, &rtt), 0, "the kernel's RTT of the connection");
	HT_GT(rtt, 0, "RTT in beat mode");
	HT_EQ(hbdev_send(d, "beat", 4, HT_IO_MS), 0, "DATA in beat mode sent and ACKed");
	hbdev_close(d);
	HT_EQ(ht_stop(&a), 0, "exit code of hbd after SIGTERM");
	HT_GE(ht_exit_stat(&a, "beats_user"), 6, "BEATs hbd took (80-100%% of 0.2 s apart)");
	HT_EQ(ht_exit_stat(&a, "pings_user"), 0, "PINGs hbd answered (none in beat mode)");
	HT_EQ(ht_exit_stat(&a, "expired_tcp"), 0, "devices hbd expired");
	ht_cleanup(&a);
}

static void reconnects_after_restart(void **state)
{
	static const char *const args[] = { "--no-offload", "--workers", "1",
					    "--interval",   "0.2",	 NULL };
	const struct hbc_backoff bo = { .base_ms = 50, .max_ms = 400, .jitter_pct = 100 };
	const char *again[] = { "--no-offload", "--workers", "1",  "--interval",
				"0.2",		"--port",    NULL, NULL };
	struct ht_daemon a, b;
	struct hbdev *d;
	struct hbdev_ev ev;
	char port[8];

	(void)state;
	HT_EQ(ht_start(&a, args), 0, "hbd with one worker started");
	d = open_dev(a.port, 5, HB_TCP, &bo);
	HT_EQ(hbdev_connect(d), 0, "hbdev_connect of device 5");
	/* the daemon drains: BYE(SHUTDOWN) */
	kill(a.pid, SIGTERM);
	wait_event(d, HBDEV_EV_DISCONNECTED, HT_IO_MS, &ev);
	HT_EQ(ev.code, HB_BYE_SHUTDOWN, "BYE reason when hbd drains");
	HT_EQ(ht_stop(&a), 0, "exit code of hbd after SIGTERM");
	/* nobody listens for a while: attempts fail, quietly, and the backoff grows */
	HT_EQ(hbdev_poll(d, 600, &ev), 0, "events while nobody listens");
	HT_GE(hbdev_state(d)->attempt, 2, "connection attempts while nobody listens");
	HT_EQ(hbdev_send(d, "x", 1, 300), -ETIMEDOUT, "DATA while nobody listens");
	/* back on the same port: the device reconnects by itself */
	snprintf(port, sizeof(port), "%u", a.port);
	again[6] = port;
	ht_cleanup(&a);
	HT_EQ(ht_start(&b, again), 0, "hbd on the same port %s started", port);
	wait_event(d, HBDEV_EV_CONNECTED, 5000, &ev);
	HT_EQ(hbdev_state(d)->attempt, 0,
	      "connection attempts after a WELCOME (it resets the backoff)");
	HT_EQ(hbdev_send(d, "after", 5, HT_IO_MS), 0, "DATA after the reconnect sent and ACKed");
	hbdev_close(d);
	HT_EQ(ht_stop(&b), 0, "exit code of the second hbd after SIGTERM");
	HT_EQ(ht_exit_stat(&b, "data_acked"), 1, "the second hbd's data_acked");
	ht_cleanup(&b);
}

static void revoked_device_is_told(void **state)
{
	struct hbdev *d = open_dev(D.port, 150, HB_UDP, NULL);
	struct hbdev_ev ev;
	char line[512];
	FILE *f;

	(void)state;
	HT_EQ(hbdev_connect(d), 0, "hbdev_connect of device 150");
	f = fopen(D.keys, "a");
	assert_non_null(f);
	fprintf(f, "150 revoked\n");
	fclose(f);
	HT_EQ(tc_req(CTL, "reload\n", line, sizeof(line)), 0, "reply to 'reload'");
	HT_EQ(tc_num(line, "revoked_sessions"), 1, "'revoked_sessions' in the reload reply: %s",
	      line);
	wait_event(d, HBDEV_EV_DISCONNECTED, HT_IO_MS, &ev);
	HT_EQ(ev.code, HB_BYE_REVOKED, "BYE reason for revoked device 150");
	wait_event(d, HBDEV_EV_AUTH_FAILED, 5000, &ev);
	hbdev_close(d);
}

/* examples/device.c, the program itself: connects, reports, prints a downlink. */
static void example_device(void **state)
{
	char bin[PATH_MAX], cmd[PATH_MAX + 256], out[128], line[512], hex[33];
	uint8_t s[HB_SECRET_MAX];
	int ctl, st;
	pid_t pid;

	(void)state;
	tc_bin("examples/device", bin, sizeof(bin));
	snprintf(out, sizeof(out), "%s/device.out", D.dir);
	ht_secret(7, s);
	for (int i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", s[i]);
	snprintf(cmd, sizeof(cmd),
		 "exec %s --port %u --id 7 --secret %s --every 0.3 --duration 3 > %s 2>&1", bin,
		 D.port, hex, out);
	pid = fork();
	HT_GE(pid, 0, "fork for the example device");
	if (pid == 0) {
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 300 && !ht_file_contains(out, "connected", NULL, 0); i++)
		ht_sleep_ms(10);
	ctl = downlink(7, "hello device");
	HT_EQ(tc_line(ctl, line, sizeof(line), HT_IO_MS), 0,
	      "reply line to the downlink's send within %d ms", HT_IO_MS);
	assert_non_null(strstr(line, "\"status\":\"delivered\""));
	close(ctl);
	HT_EQ(waitpid(pid, &st, 0), pid, "wait for the example device");
	HT_TRUE(WIFEXITED(st), "the example device exited (status %#x)", st);
	HT_EQ(WEXITSTATUS(st), 0, "exit code of the example device (its output: %s)", out);
	HT_TRUE(ht_file_contains(out, "connected", NULL, 0),
		"'connected' in the example device's output %s", out);
	HT_TRUE(ht_file_contains(out, "downlink hello device", NULL, 0),
		"the downlink in the example device's output %s", out);
	HT_TRUE(ht_file_contains(out, "data 1 acked", NULL, 0),
		"'data 1 acked' in the example device's output %s", out);
	HT_TRUE(ht_file_contains(D.sink, "\"device\":7,", line, sizeof(line)),
		"device 7's DATA in the sink %s", D.sink);
	assert_non_null(strstr(line, "\"payload\":\"cmVhZGluZz0x")); /* "reading=1" */
}

int main(void)
{
	const struct CMUnitTest shared[] = {
		cmocka_unit_test(tcp_session),
		cmocka_unit_test(udp_session),
		cmocka_unit_test(refused_hello_backs_off),
		cmocka_unit_test(revoked_device_is_told),
		cmocka_unit_test(example_device),
	};
	const struct CMUnitTest own[] = {
		cmocka_unit_test_teardown(reconnects_after_restart, ht_reap),
		cmocka_unit_test_teardown(beat_session, ht_reap),
	};
	int rc;

	signal(SIGPIPE, SIG_IGN);
	rc = cmocka_run_group_tests_name("hbdev", shared, group_setup, group_teardown);
	rc |= cmocka_run_group_tests_name("hbdev_own_daemon", own, NULL, NULL);
	return rc;
}
