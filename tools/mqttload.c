// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* mqttload: N MQTT 3.1.1 clients heartbeating a broker with PINGREQ on a fixed schedule, from
 * one epoll thread; the peer bench's client for a broker when hbload speaks no MQTT.
 *
 * Every client CONNECTs (clean session, no credentials) and, once all have their CONNACK,
 * sends a PINGREQ every --interval at its own phase (client i at i/N of the interval), whether
 * or not the last one was answered. RTT runs from the scheduled send time to the PINGRESP, so a
 * late client cannot hide a slow broker. The summary (--json) and the events (--events) have
 * the shape of hbload's that scripts/peer-bench.sh reads: connected, connected_end, expired,
 * steady {pings, pongs, lost, rtt_us}, lag_us; "setup_done", "window_start steady RATE",
 * "window_end steady", "run_end".
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "hist.h"
#include "json_out.h"
#include "log.h"
#include "opt.h"

#define MAX_SOURCES 256
#define MAX_OUT 4 /* PINGREQs awaiting their PINGRESP, per client */
#define BATCH 512 /* epoll events per wait */

enum { C_FREE, C_CONNECTING, C_CONNACK, C_UP, C_DEAD };

struct client {
	int fd;
	uint8_t state;
	uint8_t nout, head; /* FIFO of the scheduled times of unanswered PINGREQs */
	uint8_t rlen; /* bytes of a packet not complete yet */
	uint8_t rbuf[4];
	uint64_t out[MAX_OUT];
};

struct opts {
	const char *server, *source, *events, *hist;
	uint16_t port;
	uint32_t clients, inflight, keepalive;
	double connect_rate;
	double interval_s, duration_s, warmup_s, steady_s, setup_timeout_s, drain_s;
	bool json, progress;
	int proto;
};

struct counts {
	uint64_t connected, pings, pongs, server_closed, errors, stray, dropped_out;
};

static struct opts o;
static struct client *cl;
static struct in_addr srcs[MAX_SOURCES];
static uint32_t nsrc;
static int ep = -1;
static FILE *evf;
static uint64_t t0;
static struct counts ct;
static struct hb_hist rtt, lag;

/* clang-format off */
static const struct hb_opt_choice protos[] = { { "mqtt", 0 }, { NULL, 0 } };
#define AT(f) HB_OPT_AT(struct opts, f)
static const struct hb_opt options[] = {
	{ "server", 0, "ADDR", "broker address, IPv4", HB_OPT_STRING, AT(server), .required = true },
	{ "port", 0, "N", "broker port", HB_OPT_UINT, AT(port), .def.u = 1883, .umin = 1, .umax = 65535 },
	{ "clients", 0, "N", "MQTT clients, one TCP connection each", HB_OPT_UINT, AT(clients),
	  .def.u = 1000, .umin = 1, .umax = 1000000 },
	{ "proto", 0, NULL, "the protocol (hbload's option, for the same command line)",
	  HB_OPT_CHOICE, AT(proto), .choices = protos, .def.i = 0 },
	{ "interval", 0, "S", "PINGREQ interval", HB_OPT_DOUBLE, AT(interval_s), .def.d = 1,
	  .dmin = 0.001, .dmax = 3600 },
	{ "duration", 0, "S", "heartbeating time after setup", HB_OPT_DOUBLE, AT(duration_s),
	  .def.d = 10, .dmin = 0, .dmax = 86400 },
	{ "warmup", 0, "S", "the steady window starts this long after setup", HB_OPT_DOUBLE,
	  AT(warmup_s), .def.d = 0, .dmin = 0, .dmax = 86400 },
	{ "steady", 0, "S", "length of the steady window (default: to the end)", HB_OPT_DOUBLE,
	  AT(steady_s), .def.d = -1, .dmin = -1, .dmax = 86400 },
	{ "source", 0, "LIST", "IPv4 source addresses, comma-separated, ranges A-B allowed",
	  HB_OPT_STRING, AT(source) },
	{ "inflight", 0, "N", "connects in flight at once", HB_OPT_UINT, AT(inflight),
	  .def.u = 256, .umin = 1, .umax = 100000 },
	{ "connect-rate", 0, "N", "new connections per second, 0 = unlimited", HB_OPT_DOUBLE,
	  AT(connect_rate), .def.d = 0, .dmin = 0, .dmax = 1e7 },
	{ "keepalive", 0, "S", "MQTT keep alive of the CONNECT", HB_OPT_UINT, AT(keepalive),
	  .def.u = 60, .umin = 0, .umax = 65535 },
	{ "setup-timeout", 0, "S", "stop waiting for CONNACKs", HB_OPT_DOUBLE, AT(setup_timeout_s),
	  .def.d = 60, .dmin = 0.1, .dmax = 3600 },
	{ "drain", 0, "S", "wait this long for outstanding PINGRESPs at the end", HB_OPT_DOUBLE,
	  AT(drain_s), .def.d = 1, .dmin = 0, .dmax = 60 },
	{ "events", 0, "FILE", "append events 'SECONDS EVENT [ARGS]' as they happen", HB_OPT_STRING,
	  AT(events) },
	{ "hist", 0, "FILE", "the steady window's RTT histogram ('US COUNT' lines) at the end",
	  HB_OPT_STRING, AT(hist) },
	{ "json", 0, NULL, "one-line JSON summary on stdout", HB_OPT_FLAG, AT(json) },
	{ "no-progress", 0, NULL, "accepted for hbload's command line (there is none)",
	  HB_OPT_FLAG_OFF, AT(progress) },
	{ "help", 'h', NULL, "this text", .type = HB_OPT_HELP },
	{ 0 },
};
/* clang-format on */

static const struct hb_opt_prog prog = {
	.name = "mqttload",
	.synopsis = "--server ADDR [--port N] [--clients N] [--interval S] [options]",
	.about =
		"N MQTT clients sending PINGREQ on a fixed schedule; RTT from the scheduled time.\n",
	.opts = options,
};

static void event(const char *what)
{
	if (!evf)
		return;
	fprintf(evf, "%.3f %s\n", (double)(hb_mono_ns() - t0) / 1e9, what);
	fflush(evf);
}

static int add_range(const char *a, const char *b)
{
	struct in_addr x, y;

	if (inet_pton(AF_INET, a, &x) != 1 || inet_pton(AF_INET, b, &y) != 1)
		return -EINVAL;
	for (uint32_t v = ntohl(x.s_addr); v <= ntohl(y.s_addr); v++) {
		if (nsrc == MAX_SOURCES)
			return -E2BIG;
		srcs[nsrc++].s_addr = htonl(v);
	}
	return 0;
}

static int parse_sources(const char *list)
{
	char buf[4096], *save = NULL;

	if (strlen(list) >= sizeof(buf))
		return -E2BIG;
	strcpy(buf, list);
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		char *dash = strchr(t, '-');
		int rc;

		if (dash)
			*dash = '\0';
		rc = add_range(t, dash ? dash + 1 : t);
		if (rc)
			return rc;
	}
	return nsrc ? 0 : -EINVAL;
}

static void kill_client(struct client *c, bool by_server)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	if (c->fd < 0)
		return;
	if (by_server)
		ct.server_closed++;
	/* an RST: no TIME_WAIT to collide with the next run's source ports */
	setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(c->fd);
	c->fd = -1;
	c->state = C_DEAD;
}

static int start_connect(uint32_t i, const struct sockaddr_in *dst)
{
	struct client *c = &cl[i];
	struct epoll_event ev = { .events = EPOLLOUT, .data.u32 = i };
	int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (nsrc) {
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr = srcs[i % nsrc] };

		/* the port is picked at connect, by 4-tuple, not here by local address alone */
		setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa))) {
			int e = -errno;

			close(fd);
			return e;
		}
	}
	if (connect(fd, (const struct sockaddr *)dst, sizeof(*dst)) && errno != EINPROGRESS) {
		int e = -errno;

		close(fd);
		return e;
	}
	c->fd = fd;
	c->state = C_CONNECTING;
	if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev)) {
		int e = -errno;

		kill_client(c, false);
		return e;
	}
	return 0;
}

/* CONNECT, MQTT 3.1.1: "MQTT" level 4, clean session, keep alive, client id "hbpr-I". */
static int send_connect(uint32_t i)
{
	struct client *c = &cl[i];
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = i };
	uint8_t p[64];
	char id[24];
	int err = 0, n = snprintf(id, sizeof(id), "hbpr-%u", i);
	socklen_t len = sizeof(err);
	size_t k = 0;

	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) || err)
		return -(err ? err : errno);
	p[k++] = 0x10;
	p[k++] = (uint8_t)(10 + 2 + n);
	memcpy(p + k, "\0\4MQTT\4\2", 8);
	k += 8;
	p[k++] = (uint8_t)(o.keepalive >> 8);
	p[k++] = (uint8_t)o.keepalive;
	p[k++] = 0;
	p[k++] = (uint8_t)n;
	memcpy(p + k, id, (size_t)n);
	k += (size_t)n;
	if (send(c->fd, p, k, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)k)
		return -EIO;
	c->state = C_CONNACK;
	return epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev) ? -errno : 0;
}

struct window {
	uint64_t from, to; /* the steady window, by scheduled send time */
};

static bool in_window(const struct window *w, uint64_t t)
{
	return t >= w->from && t < w->to;
}

/* One whole packet: CONNACK (0x20 0x02 0x00 rc) or PINGRESP (0xd0 0x00). */
static void on_packet(struct client *c, const struct window *w, uint64_t now)
{
	if (c->rbuf[0] == 0x20 && c->state == C_CONNACK) {
		if (c->rbuf[3] != 0) {
			ct.errors++;
			kill_client(c, true);
			return;
		}
		c->state = C_UP;
		ct.connected++;
		return;
	}
	if (c->rbuf[0] != 0xd0 || !c->nout) {
		ct.stray++;
		return;
	}
	uint64_t sched = c->out[c->head];

	c->head = (uint8_t)((c->head + 1) % MAX_OUT);
	c->nout--;
	if (in_window(w, sched)) {
		ct.pongs++;
		hb_hist_add(&rtt, (now - sched) / 1000);
	}
}

static void on_readable(struct client *c, const struct window *w, uint64_t now)
{
	uint8_t buf[256];
	ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);

	if (n <= 0) {
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		kill_client(c, true);
		return;
	}
	for (ssize_t i = 0; i < n; i++) {
		c->rbuf[c->rlen++] = buf[i];
		if (c->rlen == 2 && c->rbuf[1] > 2) {
			ct.errors++; /* no packet this client expects is longer */
			kill_client(c, true);
			return;
		}
		if (c->rlen >= 2 && c->rlen == 2 + c->rbuf[1]) {
			on_packet(c, w, now);
			c->rlen = 0;
			if (c->fd < 0)
				return;
		}
	}
}

static void send_ping(struct client *c, const struct window *w, uint64_t sched, uint64_t now)
{
	static const uint8_t ping[2] = { 0xc0, 0x00 };

	if (c->state != C_UP)
		return;
	if (c->nout == MAX_OUT) {
		ct.dropped_out++; /* the oldest stays unanswered: lost */
		c->head = (uint8_t)((c->head + 1) % MAX_OUT);
		c->nout--;
	}
	if (send(c->fd, ping, 2, MSG_NOSIGNAL | MSG_DONTWAIT) != 2) {
		ct.errors++;
		kill_client(c, true);
		return;
	}
	c->out[(c->head + c->nout) % MAX_OUT] = sched;
	c->nout++;
	if (in_window(w, sched)) {
		ct.pings++;
		hb_hist_add(&lag, (now - sched) / 1000);
	}
}

static int wait_events(const struct window *w, uint64_t until)
{
	struct epoll_event evs[BATCH];
	uint64_t now = hb_mono_ns();
	struct timespec ts = { 0, 0 };
	int n;

	if (until > now) {
		ts.tv_sec = (time_t)((until - now) / 1000000000u);
		ts.tv_nsec = (long)((until - now) % 1000000000u);
	}
	n = epoll_pwait2(ep, evs, BATCH, &ts, NULL);
	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	now = hb_mono_ns();
	for (int i = 0; i < n; i++) {
		struct client *c = &cl[evs[i].data.u32];

		if (c->state == C_CONNECTING) {
			if (send_connect(evs[i].data.u32)) {
				ct.errors++;
				kill_client(c, false);
			}
		} else if (c->fd >= 0) {
			on_readable(c, w, now);
		}
	}
	return n;
}

static uint32_t setup(const struct sockaddr_in *dst, const struct window *w)
{
	uint64_t t_start = hb_mono_ns(), deadline = t_start + (uint64_t)(o.setup_timeout_s * 1e9);
	uint32_t next = 0, inflight = 0;

	while (ct.connected < o.clients && hb_mono_ns() < deadline) {
		/* connects allowed so far: the rate times the time since setup began */
		double allowed =
			o.connect_rate > 0
				? o.connect_rate * (double)(hb_mono_ns() - t_start) / 1e9 + 1
				: (double)o.clients;

		while (next < o.clients && inflight < o.inflight && next < allowed) {
			if (start_connect(next, dst))
				ct.errors++;
			next++;
			inflight++;
		}
		if (wait_events(w, hb_mono_ns() + 10000000) < 0)
			break;
		inflight = 0;
		for (uint32_t i = 0; i < next; i++)
			inflight += cl[i].state == C_CONNECTING || cl[i].state == C_CONNACK;
		if (next == o.clients && !inflight)
			break;
	}
	return (uint32_t)ct.connected;
}

static int heartbeat(const struct window *w, uint64_t start, uint64_t end)
{
	uint64_t period = (uint64_t)(o.interval_s * 1e9), k = 0;
	uint32_t j = 0, n = o.clients ? o.clients : 1; /* --clients is at least 1 */
	bool started = false, ended = false;
	char start_ev[64];

	snprintf(start_ev, sizeof(start_ev), "window_start steady %.0f", o.clients / o.interval_s);
	for (;;) {
		uint64_t now = hb_mono_ns(), due;

		for (;;) {
			due = start + k * period + (uint64_t)j * period / n;
			if (due > now || due >= end)
				break;
			send_ping(&cl[j], w, due, now);
			if (++j == n) {
				j = 0;
				k++;
			}
		}
		if (!started && now >= w->from) {
			started = true;
			event(start_ev);
		}
		if (started && !ended && now >= w->to) {
			ended = true;
			event("window_end steady");
		}
		if (now >= end + (uint64_t)(o.drain_s * 1e9))
			return 0;
		if (wait_events(w, due < end ? due : end + (uint64_t)(o.drain_s * 1e9)) < 0)
			return -1;
	}
}

static int summary(double setup_s, uint64_t connected_end)
{
	json_t *doc = json_pack(
		"{s:s,s:I,s:f,s:I,s:I,s:I,s:I,s:I,s:I,s:{s:I,s:I,s:I,s:{s:I,s:I,s:I,s:I}},"
		"s:{s:I,s:I,s:I}}",
		"proto", "mqtt", "clients", (json_int_t)o.clients, "setup_s", setup_s, "connected",
		(json_int_t)ct.connected, "connected_end", (json_int_t)connected_end, "expired",
		(json_int_t)0, "server_closed", (json_int_t)ct.server_closed, "errors",
		(json_int_t)ct.errors, "stray", (json_int_t)ct.stray, "steady", "pings",
		(json_int_t)ct.pings, "pongs", (json_int_t)ct.pongs, "lost",
		(json_int_t)(ct.pings > ct.pongs ? ct.pings - ct.pongs : 0), "rtt_us", "p50",
		(json_int_t)hb_hist_percentile(&rtt, 50), "p99",
		(json_int_t)hb_hist_percentile(&rtt, 99), "p999",
		(json_int_t)hb_hist_percentile(&rtt, 99.9), "max", (json_int_t)rtt.max, "lag_us",
		"p50", (json_int_t)hb_hist_percentile(&lag, 50), "p99",
		(json_int_t)hb_hist_percentile(&lag, 99), "max", (json_int_t)lag.max);

	if (!doc)
		return -ENOMEM;
	if (o.json)
		return hb_json_print(stdout, doc); /* it releases doc */
	printf("mqttload: %llu of %u connected in %.3f s; %llu pings, %llu pongs, p99 %llu us\n",
	       (unsigned long long)ct.connected, o.clients, setup_s, (unsigned long long)ct.pings,
	       (unsigned long long)ct.pongs, (unsigned long long)hb_hist_percentile(&rtt, 99));
	json_decref(doc);
	return 0;
}

static void write_hist(void)
{
	FILE *f = fopen(o.hist, "w");

	if (!f) {
		hb_err("--hist %s: %s", o.hist, strerror(errno));
		return;
	}
	for (unsigned i = 0; i < HB_HIST_BUCKETS; i++)
		if (rtt.b[i])
			fprintf(f, "%llu %llu\n", (unsigned long long)hb_hist_bucket_low(i),
				(unsigned long long)rtt.b[i]);
	fclose(f);
}

int main(int argc, char **argv)
{
	struct sockaddr_in dst = { .sin_family = AF_INET };
	struct window w;
	uint64_t start, end, connected_end = 0;
	double setup_s;
	int rc;

	hb_log_init("mqttload", HB_LOG_INFO);
	hb_opt_defaults(options, &o);
	rc = hb_opt_parse(&prog, argc, argv, &o, NULL);
	if (rc)
		return rc > 0 ? 0 : 1;
	dst.sin_port = htons(o.port);
	if (inet_pton(AF_INET, o.server, &dst.sin_addr) != 1) {
		hb_opt_error(&prog, "--server %s is not an IPv4 address", o.server);
		return 1;
	}
	if (o.source && parse_sources(o.source)) {
		hb_opt_error(&prog, "--source %s: IPv4 addresses or ranges A-B, at most %d",
			     o.source, MAX_SOURCES);
		return 1;
	}
	cl = calloc(o.clients, sizeof(*cl));
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (!cl || ep < 0) {
		hb_err("out of memory or epoll: %s", strerror(errno));
		return 1;
	}
	for (uint32_t i = 0; i < o.clients; i++)
		cl[i].fd = -1;
	if (o.events && !(evf = fopen(o.events, "a"))) {
		hb_err("--events %s: %s", o.events, strerror(errno));
		return 1;
	}
	hb_hist_init(&rtt);
	hb_hist_init(&lag);
	t0 = hb_mono_ns();
	w.from = w.to = UINT64_MAX; /* nothing is counted during setup */
	if (!setup(&dst, &w)) {
		hb_err("no client got a CONNACK from %s:%u", o.server, o.port);
		return 2;
	}
	start = hb_mono_ns();
	setup_s = (double)(start - t0) / 1e9;
	event("setup_done");
	end = start + (uint64_t)(o.duration_s * 1e9);
	w.from = start + (uint64_t)(o.warmup_s * 1e9);
	w.to = o.steady_s >= 0 ? w.from + (uint64_t)(o.steady_s * 1e9) : end;
	if (w.to > end)
		w.to = end;
	rc = heartbeat(&w, start, end);
	for (uint32_t i = 0; i < o.clients; i++) {
		connected_end += cl[i].state == C_UP;
		kill_client(&cl[i], false);
	}
	event("run_end");
	if (o.hist)
		write_hist();
	if (summary(setup_s, connected_end))
		rc = -1;
	if (evf)
		fclose(evf);
	free(cl);
	close(ep);
	return rc ? 1 : 0;
}
