// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbload option parsing, server resolution and --source address lists. */
#include "opts.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "mqtt.h"
#include "opt.h"

#define STR_(x) #x
#define STR(x) STR_(x)

/* hbload's own defaults; the port is the ABI header's. */
#define DEF_FIRST_DEVICE 1
#define DEF_THREADS_NOCPU 2 /* when the CPU count is unknown or implausible */
#define DEF_JITTER 0.1
#define DEF_INFLIGHT 1024
#define DEF_PAYLOAD 16
#define DEF_DRAIN_S 2
#define DEF_STORM_WINDOW_S 30
#define DEF_SETUP_TIMEOUT_S 60
#define DEF_CONNECT_TIMEOUT_S 5
#define DEF_HELLO_TIMEOUT_S 5
#define DEF_UDP_SOCKETS 1024
#define DEF_UDP_REHELLO_AFTER 3
#define DEF_STEP_S 15
#define DEF_STEP_SETTLE_S 3
#define DEF_STEP_STOP_MS 10
#define OFF (-1.0) /* the double options whose "not given" is a negative number */
#define MAX_RUN_S (30 * 86400)

/* "R1,R2,...": rates in heartbeats per second, each > 0. */
static int parse_steps(const char *arg, void *cfg)
{
	struct hbl_opts *o = cfg;
	const char *p = arg;

	o->nsteps = 0;
	while (*p) {
		char *end;
		double v;

		errno = 0;
		v = strtod(p, &end);
		if (end == p || errno || !isfinite(v) || v <= 0 || (*end && *end != ','))
			return -EINVAL;
		if (o->nsteps == HBL_MAX_STEPS_OPT)
			return -EINVAL;
		o->steps[o->nsteps++] = v;
		p = *end ? end + 1 : end;
	}
	return o->nsteps ? 0 : -EINVAL;
}

/* clang-format off */
static const struct hb_opt_choice protos[] = {
	{ "tcp", HB_TCP }, { "udp", HB_UDP }, { "mqtt", HBL_PROTO_MQTT }, { NULL, 0 },
};
/* clang-format on */

#define AT(f) HB_OPT_AT(struct hbl_opts, f)
#define SECONDS(lo, hi) .dmin = (lo), .dmax = (hi)

/* clang-format off */
static const struct hb_opt options[] = {
	{ "server", 0, "ADDR", "server address (IPv4/IPv6 literal or name)", HB_OPT_STRING,
	  AT(server), .required = true },
	{ "port", 0, "N", "server port", HB_OPT_UINT, AT(port), .def.u = HB_DEFAULT_PORT,
	  .umin = 1, .umax = 65535 },
	{ "clients", 0, "N", "simulated devices", HB_OPT_UINT, AT(clients), .umin = 1,
	  .umax = 10000000, .required = true },
	{ "proto", 0, NULL, "TCP: one connection per device; UDP: devices share a pool of sockets "
	  "per thread and are told apart by session token; MQTT: MQTT 3.1.1 over TCP, user name "
	  "the device id, PINGREQ each --interval (the CONNECT's keepalive), DATA as PUBLISH QoS 1",
	  HB_OPT_CHOICE, AT(proto), .choices = protos, .def.i = HB_TCP },
	{ "mqtt-realm", 0, "NAME", "MQTT: the server's realm the derived password is bound to",
	  HB_OPT_STRING, AT(mqtt_realm), .def.s = HB_MQTT_DEFAULT_REALM },
	{ "mqtt-days", 0, "N", "MQTT: days the derived password stays valid from today",
	  HB_OPT_UINT, AT(mqtt_days), .def.u = HB_MQTT_DEFAULT_DAYS, .umin = 0, .umax = 3650 },
	{ "interval", 0, "S", "heartbeat interval in seconds (fractions allowed)", HB_OPT_DOUBLE,
	  AT(interval_s), SECONDS(0.001, 86400), .required = true },
	{ "duration", 0, "S", "heartbeating time, counted from the end of setup", HB_OPT_DOUBLE,
	  AT(duration_s), SECONDS(0, MAX_RUN_S), .required = true },
	{ "json", 0, NULL, "one-line JSON summary on stdout instead of text", HB_OPT_FLAG,
	  AT(json) },
	{ "keys", 0, "FILE", "device key store, hbd's format ('<id> <hex>' or 'FIRST-LAST derive "
	  "<hex>')", HB_OPT_STRING, AT(keys),
	  .def_text = "$HBEAT_KEYS, else a built-in demo key, with a warning" },
	{ "first-device", 0, "ID", "device id of the first client", HB_OPT_UINT, AT(first_device),
	  .def.u = DEF_FIRST_DEVICE, .umin = 1, .umax = UINT64_MAX - 10000000 },
	{ "source", 0, "LIST", "source addresses, comma-separated, ranges A-B allowed; clients "
	  "take them round-robin", HB_OPT_STRING, AT(source),
	  .def_text = "none: the kernel chooses" },
	{ "threads", 0, "N", "rings, one thread each; raised for TCP so no ring holds more sockets "
	  "than RLIMIT_NOFILE allows", HB_OPT_UINT, AT(threads), .umin = 1, .umax = 256,
	  .def_text = "one per CPU" },
	{ "jitter", 0, "FRAC", "heartbeat jitter as a fraction of the interval", HB_OPT_DOUBLE,
	  AT(jitter), .def.d = DEF_JITTER, .dmin = 0, .dmax = 1 },
	{ "connect-rate", 0, "N", "new connections per second, 0 = unlimited", HB_OPT_DOUBLE,
	  AT(connect_rate), .dmin = 0, .dmax = 1e9, .unit = "/s" },
	{ "inflight", 0, "N", "connects + HELLOs in flight at once, all threads", HB_OPT_UINT,
	  AT(inflight), .def.u = DEF_INFLIGHT, .umin = 1, .umax = 1000000 },
	{ "data-every", 0, "N", "send a DATA frame every N heartbeats; 0 = never", HB_OPT_UINT,
	  AT(data_every), .umin = 0, .umax = 1000000 },
	{ "echo-every", 0, "N", "send an ECHO frame every N heartbeats; 0 = never", HB_OPT_UINT,
	  AT(echo_every), .umin = 0, .umax = 1000000 },
	{ "payload", 0, "BYTES", "DATA/ECHO payload size, 8.." STR(HBL_MAX_PAYLOAD), HB_OPT_UINT,
	  AT(payload), .def.u = DEF_PAYLOAD, .umin = 8, .umax = HBL_MAX_PAYLOAD },
	{ "silent", 0, "N", "the first N clients authenticate and never heartbeat", HB_OPT_UINT,
	  AT(silent), .umin = 0, .umax = 10000000 },
	{ "force-pings", 0, NULL, "TCP: send PINGs even in sessions whose WELCOME asks for "
	  "keepalive mode (the server's kernel probes instead; by default such a device sends "
	  "no PINGs)", HB_OPT_FLAG, AT(force_pings) },
	{ "beat", 0, NULL, "TCP: heartbeat with BEAT frames, which the server answers with TCP's "
	  "ACK only (no PONG, so no rtt_us samples: the kernel's RTT is in ss -ti)", HB_OPT_FLAG,
	  AT(beat) },
	{ "drain", 0, "S", "wait this long for outstanding replies at the end", HB_OPT_DOUBLE,
	  AT(drain_s), .def.d = DEF_DRAIN_S, SECONDS(0, 3600) },
	{ "warmup", 0, "S", "leave heartbeats scheduled before setup end + S out of rtt_us (they "
	  "still count as pings/pongs/lost)", HB_OPT_DOUBLE, AT(warmup_s), .def.d = OFF,
	  SECONDS(0, 86400), .def_text = "keep all" },
	{ "storm-at", 0, "S", "TCP: all clients drop S seconds after setup and reconnect",
	  HB_OPT_DOUBLE, AT(storm_at_s), .def.d = OFF, SECONDS(0, MAX_RUN_S),
	  .def_text = "never" },
	{ "storm-window", 0, "S", "... with their reconnects spread over S seconds", HB_OPT_DOUBLE,
	  AT(storm_window_s), .def.d = DEF_STORM_WINDOW_S, SECONDS(0, 3600) },
	{ "setup-timeout", 0, "S", "stop waiting for every client to authenticate", HB_OPT_DOUBLE,
	  AT(setup_timeout_s), .def.d = DEF_SETUP_TIMEOUT_S, SECONDS(0.1, 86400) },
	{ "connect-timeout", 0, "S", "TCP connect timeout", HB_OPT_DOUBLE, AT(connect_timeout_s),
	  .def.d = DEF_CONNECT_TIMEOUT_S, SECONDS(0.01, 3600) },
	{ "hello-timeout", 0, "S", "HELLO to WELCOME timeout", HB_OPT_DOUBLE, AT(hello_timeout_s),
	  .def.d = DEF_HELLO_TIMEOUT_S, SECONDS(0.01, 3600) },
	{ "udp-sockets", 0, "N", "UDP sockets per thread, at most one per client", HB_OPT_UINT,
	  AT(udp_sockets), .def.u = DEF_UDP_SOCKETS, .umin = 1, .umax = 16384 },
	{ "udp-version", 0, "N", "UDP protocol version: 2 tags every frame under a session key "
	  "(docs/PROTOCOL.md), 1 is for servers before it", HB_OPT_UINT, AT(udp_version),
	  .def.u = 2, .umin = 1, .umax = 2 },
	{ "udp-rehello-after", 0, "N", "UDP: a device whose last N PINGs all went unanswered (the "
	  "server restarted, or a balancer moved it to a node that does not know its token) drops "
	  "its session and sends a new HELLO after a backoff, as real devices do; counted in "
	  "rehellos. 0 = never", HB_OPT_UINT, AT(udp_rehello_after),
	  .def.u = DEF_UDP_REHELLO_AFTER, .umin = 0, .umax = 32 },
	{ .type = HB_OPT_HEADING,
	  .help = "Measurement windows (reported apart under \"steady\" and \"steps\"):" },
	{ "steady", 0, "S", "the steady window: S seconds from the end of the warmup",
	  HB_OPT_DOUBLE, AT(steady_s), .def.d = OFF, SECONDS(0, MAX_RUN_S),
	  .def_text = "until --duration ends" },
	{ "steps", 0, "R1,R2,...", "a rate ramp after the steady phase: heartbeats per second of "
	  "each step (all clients, interval = clients / rate)", HB_OPT_CUSTOM,
	  .parse = parse_steps, .expect = "a comma-separated list of at most "
	  STR(HBL_MAX_STEPS_OPT) " rates per second above 0 (e.g. 20000,30000)" },
	{ "steps-at", 0, "S", "the ramp starts S seconds after setup; the run lasts until the ramp "
	  "ends", HB_OPT_DOUBLE, AT(steps_at_s), .def.d = OFF, SECONDS(0, MAX_RUN_S),
	  .def_text = "--duration" },
	{ "step-s", 0, "S", "length of a step", HB_OPT_DOUBLE, AT(step_s), .def.d = DEF_STEP_S,
	  SECONDS(0.1, 86400) },
	{ "step-settle", 0, "S", "first seconds of a step left out of its window", HB_OPT_DOUBLE,
	  AT(step_settle_s), .def.d = DEF_STEP_SETTLE_S, SECONDS(0, 86400) },
	{ "step-stop-p99", 0, "MS", "end the ramp after the first step whose p99 RTT exceeds MS "
	  "(unanswered PINGs count as slow; 0 = never)", HB_OPT_DOUBLE, AT(step_stop_ms),
	  .def.d = DEF_STEP_STOP_MS, .dmin = 0, .dmax = 1e6 },
	{ "events", 0, "FILE", "append phase events as they happen: 'SECONDS EVENT [ARGS]' "
	  "(setup_done, window_start NAME RATE, window_end NAME, storm, storm_done, run_end), e.g. "
	  "a FIFO a CPU sampler reads", HB_OPT_STRING, AT(events) },
	{ "hist", 0, "FILE", "write each window's RTT histogram at the end (for plots)",
	  HB_OPT_STRING, AT(hist) },
	{ "no-progress", 0, NULL, "no progress lines", HB_OPT_FLAG_OFF, AT(progress) },
	{ "verbose", 'v', NULL, "debug logging", HB_OPT_FLAG, AT(verbose) },
	{ "help", 'h', NULL, "this text", .type = HB_OPT_HELP },
	{ 0 },
};
/* clang-format on */

static const struct hb_opt_prog prog = {
	.name = "hbload",
	.synopsis = "--server ADDR --port N --clients N --proto tcp|udp|mqtt --interval S\n"
		    "              --duration S [--json] [options]",
	.about = "Simulates N heartbeating devices against an hbeat server and measures\n"
		 "round-trip time from each heartbeat's scheduled send time (so neither a slow\n"
		 "server nor a slow hbload can hide latency). Progress goes to stderr every\n"
		 "second; the summary to stdout.\n",
	.epilog = "Exit status: 0 the run completed (even if it measured losses or failures);\n"
		  "1 bad arguments or local setup failure (rings, key store); 2 the server was\n"
		  "unreachable or refused every client (no client ever authenticated).\n",
	.opts = options,
};

void hbl_usage(FILE *f)
{
	hb_opt_help(&prog, f);
}

static void defaults(struct hbl_opts *o)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	memset(o, 0, sizeof(*o));
	hb_opt_defaults(options, o);
	o->threads = cpus > 0 && cpus < 64 ? (uint32_t)cpus : DEF_THREADS_NOCPU;
}

int hbl_parse_args(int argc, char **argv, struct hbl_opts *o)
{
	int rc;

	defaults(o);
	rc = hb_opt_parse(&prog, argc, argv, o, NULL);
	if (rc)
		return rc;
	if (o->silent > o->clients)
		return hb_opt_error(&prog, "--silent %u exceeds --clients %u", o->silent,
				    o->clients);
	if (o->nsteps && o->step_settle_s >= o->step_s)
		return hb_opt_error(&prog,
				    "--step-settle %g leaves nothing of a %g s step to "
				    "measure",
				    o->step_settle_s, o->step_s);
	if ((int)o->proto == HBL_PROTO_MQTT) {
		o->proto = HB_TCP;
		o->mqtt = true;
		if (o->echo_every)
			return hb_opt_error(&prog, "--echo-every: MQTT has no echo");
	}
	if (o->beat && (o->proto != HB_TCP || o->mqtt))
		return hb_opt_error(&prog, "--beat applies to hbeat's TCP clients (a BEAT is "
					   "answered by TCP's ACK)");
	if (o->storm_at_s >= 0 && o->proto != HB_TCP)
		return hb_opt_error(&prog, "--storm-at applies to TCP clients (a UDP session has "
					   "no connection to drop)");
	return 0;
}

int hbl_resolve(const char *host, uint16_t port, struct sockaddr_storage *ss, socklen_t *len)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_ADDRCONFIG };
	struct addrinfo *res;
	char svc[8];
	int rc;

	snprintf(svc, sizeof(svc), "%u", port);
	rc = getaddrinfo(host, svc, &hints, &res);
	if (rc) {
		/* AI_ADDRCONFIG hides loopback-only families on some hosts: retry without */
		hints.ai_flags = 0;
		rc = getaddrinfo(host, svc, &hints, &res);
	}
	if (rc) {
		hb_err("--server %s: %s", host, gai_strerror(rc));
		return -EINVAL;
	}
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*len = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

/* Parses one address of the wanted family into 16 bytes (IPv4 in the last 4). */
static int parse_addr(const char *s, int family, uint8_t a[16])
{
	memset(a, 0, 16);
	if (family == AF_INET)
		return inet_pton(AF_INET, s, a + 12) == 1 ? 0 : -EINVAL;
	return inet_pton(AF_INET6, s, a) == 1 ? 0 : -EINVAL;
}

static int cmp128(const uint8_t *a, const uint8_t *b)
{
	return memcmp(a, b, 16);
}

static void inc128(uint8_t *a)
{
	for (int i = 15; i >= 0 && ++a[i] == 0; i--)
		;
}

static void to_sockaddr(const uint8_t a[16], int family, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (family == AF_INET) {
		struct sockaddr_in *sin = (struct sockaddr_in *)ss;

		sin->sin_family = AF_INET;
		memcpy(&sin->sin_addr, a + 12, 4);
	} else {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

		sin6->sin6_family = AF_INET6;
		memcpy(&sin6->sin6_addr, a, 16);
	}
}

int hbl_parse_sources(const char *list, int family, struct sockaddr_storage **out, char *err,
		      size_t errlen)
{
	char *copy = strdup(list), *save = NULL, *item;
	struct sockaddr_storage *v = NULL;
	size_t n = 0, cap = 0;
	int rc = -EINVAL;

	if (!copy)
		return -ENOMEM;
	for (item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
		uint8_t lo[16], hi[16];
		/* a '-' separates a range; IPv6 addresses never contain one */
		char *dash = strchr(item, '-');

		if (dash)
			*dash = 0;
		if (parse_addr(item, family, lo) ||
		    parse_addr(dash ? dash + 1 : item, family, hi)) {
			snprintf(err, errlen, "'%s%s%s' is not an %s address or range", item,
				 dash ? "-" : "", dash ? dash + 1 : "",
				 family == AF_INET ? "IPv4" : "IPv6 (the server is IPv6)");
			goto out;
		}
		if (cmp128(lo, hi) > 0) {
			snprintf(err, errlen, "range %s-%s runs backwards", item, dash + 1);
			goto out;
		}
		for (;;) {
			struct sockaddr_storage *nv;

			if (n >= HBL_MAX_SOURCES) {
				snprintf(err, errlen, "more than %d source addresses",
					 HBL_MAX_SOURCES);
				goto out;
			}
			if (n == cap) {
				cap = cap ? 2 * cap : 16;
				nv = realloc(v, cap * sizeof(*v));
				if (!nv) {
					rc = -ENOMEM;
					goto out;
				}
				v = nv;
			}
			to_sockaddr(lo, family, &v[n++]);
			if (!cmp128(lo, hi))
				break;
			inc128(lo);
		}
	}
	if (!n) {
		snprintf(err, errlen, "empty source list");
		goto out;
	}
	*out = v;
	v = NULL;
	rc = (int)n;
out:
	free(v);
	free(copy);
	return rc;
}
