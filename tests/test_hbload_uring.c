// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbload's receive path on a real io_uring with real TCP connections (loopback), in the
 * conditions that end a multishot receive: the provided-buffer ring run dry (-ENOBUFS), a full
 * CQ (completions overflow), a cancel that was not a close of ours (-ECANCELED). Whatever
 * ended it, a live client's receive is armed again: every client gets its WELCOME and, after
 * it, a DOWN frame, with a handful of connections.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

/* by path, as the other hbload tests do */
#include "lib/ht_assert.h"
#include "../user/hbload/hbload.h"
#include "clock.h"
#include "proto.h"

#define NCLIENTS 16

static unsigned overflows; /* pump() passes that found completions in the overflow list */

struct rig {
	struct hbl_cfg cfg;
	struct hbl_shared sh;
	struct hbl_ring r;
	struct hbl_client cl[NCLIENTS];
	int lfd;
	int srv[NCLIENTS]; /* the server's end of each connection */
};

static void load_keys(struct hbl_cfg *cfg)
{
	char path[] = "/tmp/hbl-uring-keys-XXXXXX", err[256] = "";
	const char *text =
		"1-64 derive 00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n";
	int fd = mkstemp(path);

	HT_TRUE(fd >= 0, "mkstemp");
	HT_EQ(write(fd, text, strlen(text)), (ssize_t)strlen(text), "write keys");
	close(fd);
	HT_EQ(hb_keystore_load(path, &cfg->ks, err, sizeof(err)), 0, "hb_keystore_load");
	unlink(path);
}

/* The provided-buffer ring, group 0, with only nbufs of its buffers given to the kernel. */
static void rbufs_partial(struct hbl_ring *r, unsigned nbufs)
{
	struct io_uring_buf_reg reg = { 0 };

	r->br_bytes = HBL_RBUF_COUNT * sizeof(struct io_uring_buf);
	r->br = mmap(NULL, r->br_bytes, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
	HT_TRUE(r->br != MAP_FAILED, "mmap of the buffer ring");
	r->rbufs = malloc((size_t)HBL_RBUF_COUNT * HBL_RBUF_SIZE);
	HT_TRUE(r->rbufs != NULL, "receive buffers");
	reg.ring_addr = (unsigned long)r->br;
	reg.ring_entries = HBL_RBUF_COUNT;
	reg.bgid = 0;
	HT_EQ(io_uring_register_buf_ring(&r->ring, &reg, 0), 0, "register the buffer ring");
	io_uring_buf_ring_init(r->br);
	for (unsigned i = 0; i < nbufs; i++)
		hbl_rbuf_return(r, i);
	io_uring_buf_ring_advance(r->br, (int)r->rbuf_returns);
	r->rbuf_returns = 0;
}

/* A ring as ring.c sets it up (cq_entries: its CQ size), nbufs receive buffers lent to the
 * kernel, and NCLIENTS connections to a listener of the test, each in its client's slot.
 */
static void rig_up(struct rig *g, unsigned cq_entries, unsigned nbufs)
{
	struct io_uring_params p = { 0 };
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);

	memset(g, 0, sizeof(*g));
	overflows = 0;
	g->cfg.o.proto = HB_TCP;
	g->cfg.rings = 1;
	g->cfg.hello_timeout_ns = 10ULL * 1000000000ULL;
	load_keys(&g->cfg);
	g->sh.run_end_ns = UINT64_MAX;
	g->sh.storm_at_ns = UINT64_MAX;
	g->sh.interval_ns = 30ULL * 1000000000ULL;
	g->r.cfg = &g->cfg;
	g->r.sh = &g->sh;
	g->r.n = NCLIENTS;
	g->r.cl = g->cl;
	g->r.rng = 12345;
	p.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN |
		  IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
	p.cq_entries = cq_entries;
	HT_EQ(io_uring_queue_init_params(cq_entries, &g->r.ring, &p), 0, "io_uring_queue_init");
	HT_EQ(io_uring_register_files_sparse(&g->r.ring, NCLIENTS), 0, "fixed-file table");
	rbufs_partial(&g->r, nbufs);
	HT_EQ(hbl_sbufs_init(&g->r.sb), 0, "send buffers");
	HT_EQ(hbl_wheel_init(&g->r.wheel, NCLIENTS, hb_mono_ns()), 0, "wheel");

	g->lfd = socket(AF_INET, SOCK_STREAM, 0);
	HT_TRUE(g->lfd >= 0, "listener");
	HT_EQ(bind(g->lfd, (struct sockaddr *)&a, sizeof(a)), 0, "bind");
	HT_EQ(listen(g->lfd, NCLIENTS), 0, "listen");
	HT_EQ(getsockname(g->lfd, (struct sockaddr *)&a, &alen), 0, "getsockname");
	for (uint32_t l = 0; l < NCLIENTS; l++) {
		struct hbl_client *c = &g->cl[l];
		int fd = socket(AF_INET, SOCK_STREAM, 0);

		HT_TRUE(fd >= 0, "client socket");
		HT_EQ(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0, "connect");
		g->srv[l] = accept(g->lfd, NULL, NULL);
		HT_TRUE(g->srv[l] >= 0, "accept");
		HT_EQ(io_uring_register_files_update(&g->r.ring, l, &fd, 1), 1, "into slot l");
		close(fd); /* the table holds it */
		hbc_init(&c->c, 1 + l, HB_TCP);
		c->gen = 1;
		c->flags = HBL_F_OPEN;
		hbl_set_ls(&g->r, l, HBL_LS_CONNECTING);
	}
}

static void rig_down(struct rig *g)
{
	for (uint32_t l = 0; l < NCLIENTS; l++) {
		free(g->cl[l].carry);
		close(g->srv[l]);
	}
	close(g->lfd);
	io_uring_queue_exit(&g->r.ring);
	hbl_rbufs_free(&g->r);
	hbl_sbufs_free(&g->r.sb);
	hbl_downs_free(&g->r);
	hbl_wheel_free(&g->r.wheel);
	hb_keystore_free(g->cfg.ks);
}

/* One pass of ring.c's loop, less the wakeups: receive buffers back, submit, wait a little,
 * dispatch what completed. Returns the number of CQEs.
 */
static unsigned pump(struct hbl_ring *r)
{
	struct __kernel_timespec ts = { .tv_nsec = 20000000 };
	struct io_uring_cqe *cqe;
	unsigned head, seen = 0;
	uint64_t now;

	if (r->rbuf_returns) {
		io_uring_buf_ring_advance(r->br, (int)r->rbuf_returns);
		r->rbuf_returns = 0;
	}
	io_uring_submit_and_wait_timeout(&r->ring, &cqe, 1, &ts, NULL);
	overflows += io_uring_cq_has_overflow(&r->ring);
	now = hb_mono_ns();
	io_uring_for_each_cqe(&r->ring, head, cqe) {
		hbl_dispatch(r, cqe, now);
		seen++;
	}
	io_uring_cq_advance(&r->ring, seen);
	if (r->ack_len)
		hbl_downs_run(r);
	return seen;
}

/* Reads one whole frame (as hbload sends it) from a server-side socket. */
static void read_frame(int fd, uint8_t type)
{
	uint8_t buf[HB_MAX_FRAME];
	size_t got = 0;
	struct hb_frame f;
	int rc = HB_DECODE_MORE;

	while (rc == HB_DECODE_MORE) {
		ssize_t n = recv(fd, buf + got, sizeof(buf) - got, 0);

		HT_TRUE(n > 0, "the server reads the client's frame");
		got += (size_t)n;
		rc = hb_decode_stream(buf, got, &f);
	}
	HT_EQ(rc, HB_DECODE_OK, "the client's frame decodes");
	HT_EQ(f.type, type, "the client's frame type");
}

static void send_frame(int fd, uint8_t type, uint16_t seq, const void *payload, uint16_t len)
{
	uint8_t buf[HB_MAX_FRAME];
	size_t n = hb_encode(buf, sizeof(buf), HB_TCP, type, seq, 0, payload, len);

	HT_TRUE(n > 0, "hb_encode");
	HT_EQ(send(fd, buf, n, 0), (ssize_t)n, "the server sends a frame");
}

static unsigned count_ls(const struct rig *g, enum hbl_lstate ls)
{
	unsigned k = 0;

	for (uint32_t l = 0; l < NCLIENTS; l++)
		k += g->cl[l].ls == ls;
	return k;
}

/* Connected: HELLO out, recv armed (hbl_tcp_connect_done, as after a real connect chain); the
 * server reads the HELLOs. cancel_recvs: then every client's receive is cancelled, as only
 * the kernel would, the connection staying up.
 */
static void hellos(struct rig *g, int cancel_recvs)
{
	for (uint32_t l = 0; l < NCLIENTS; l++)
		hbl_tcp_connect_done(&g->r, l, 0, hb_mono_ns());
	HT_EQ(count_ls(g, HBL_LS_HELLO), NCLIENTS, "clients waiting for their WELCOME");
	for (int i = 0; i < 50 && g->r.sb.nfree < HBL_SBUF_COUNT; i++)
		pump(&g->r); /* the HELLO sends complete */
	for (uint32_t l = 0; l < NCLIENTS; l++)
		read_frame(g->srv[l], HB_HELLO);
	if (!cancel_recvs)
		return;
	for (uint32_t l = 0; l < NCLIENTS; l++) {
		struct io_uring_sqe *sqe = hbl_sqe(&g->r);

		io_uring_prep_cancel64(sqe, hbl_ud(HBL_OP_TCP_RECV, 0, g->cl[l].gen, l), 0);
		sqe->user_data = hbl_ud(HBL_OP_IGNORE, 0, 0, 0);
	}
	for (int i = 0; i < 20; i++)
		pump(&g->r);
}

/* The server WELCOMEs every client, then sends each a DOWN: both must arrive, though the
 * receive they come through ended (and was armed again) in between.
 */
static void welcomes_and_downs(struct rig *g)
{
	struct hb_welcome w = { .interval_ms = htonl(30000), .timeout_ms = htonl(45000) };
	uint8_t down = 0x5a;

	for (uint32_t l = 0; l < NCLIENTS; l++) {
		w.token = htobe64(1000 + l);
		send_frame(g->srv[l], HB_WELCOME, 1, &w, sizeof(w));
	}
	for (int i = 0; i < 200 && count_ls(g, HBL_LS_AUTHED) < NCLIENTS; i++)
		pump(&g->r);
	HT_EQ(count_ls(g, HBL_LS_AUTHED), NCLIENTS, "clients authenticated");
	HT_EQ(g->r.st.connected, NCLIENTS, "connected");
	for (uint32_t l = 0; l < NCLIENTS; l++)
		send_frame(g->srv[l], HB_DOWN, (uint16_t)(7 + l), &down, 1);
	for (int i = 0; i < 200 && g->r.st.downs_acked < NCLIENTS; i++)
		pump(&g->r);
	HT_EQ(g->r.st.downs_received, NCLIENTS, "DOWNs received after the WELCOMEs");
	HT_EQ(g->r.st.downs_acked, NCLIENTS, "DOWNs acked");
	for (int i = 0; i < 50 && g->r.sb.nfree < HBL_SBUF_COUNT; i++)
		pump(&g->r); /* the ACK sends complete */
	for (uint32_t l = 0; l < NCLIENTS; l++)
		read_frame(g->srv[l], HB_ACK);
	HT_EQ(g->r.st.errors + g->r.st.server_closed + g->r.st.timeouts, 0, "failures");
}

/* Two receive buffers for sixteen connections: the ring runs dry at once. */
static void test_buffers_run_dry(void **state)
{
	struct rig *g = calloc(1, sizeof(*g));

	(void)state;
	HT_TRUE(g != NULL, "rig");
	rig_up(g, 64, 2);
	hellos(g, 0);
	welcomes_and_downs(g);
	HT_TRUE(g->r.st.recv_nobufs > 0, "receives ended for want of a buffer");
	HT_TRUE(g->r.st.recv_rearmed >= g->r.st.recv_nobufs, "and were armed again");
	rig_down(g);
	free(g);
}

/* A CQ of 4 for sixteen connections' completions: multishot receives end on the overflow. */
static void test_cq_overflow(void **state)
{
	struct rig *g = calloc(1, sizeof(*g));

	(void)state;
	HT_TRUE(g != NULL, "rig");
	rig_up(g, 4, HBL_RBUF_COUNT);
	hellos(g, 0);
	welcomes_and_downs(g);
	HT_TRUE(overflows > 0, "completions overflowed the CQ");
	HT_TRUE(g->r.st.recv_rearmed > 0, "receives ended on the overflow, armed again");
	HT_EQ(g->r.st.cq_dropped, 0, "completions dropped");
	rig_down(g);
	free(g);
}

/* A live connection's receive cancelled, not by a close of ours: armed again, the WELCOME and
 * the DOWN still arrive.
 */
static void test_recv_cancelled(void **state)
{
	struct rig *g = calloc(1, sizeof(*g));

	(void)state;
	HT_TRUE(g != NULL, "rig");
	rig_up(g, 64, HBL_RBUF_COUNT);
	hellos(g, 1);
	welcomes_and_downs(g);
	HT_EQ(g->r.st.recv_cancelled, NCLIENTS, "receives cancelled on live connections");
	HT_TRUE(g->r.st.recv_rearmed >= NCLIENTS, "and armed again");
	rig_down(g);
	free(g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_buffers_run_dry),
		cmocka_unit_test(test_cq_overflow),
		cmocka_unit_test(test_recv_cancelled),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
