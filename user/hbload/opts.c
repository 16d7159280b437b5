// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbload option parsing, server resolution and --source address lists. */
#include "opts.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

void hbl_usage(FILE *f)
{
	fprintf(f,
		"usage: hbload --server ADDR --port N --clients N --proto tcp|udp --interval S\n"
		"              --duration S [--json] [options]\n"
		"\n"
		"Simulates N heartbeating devices against an hbeat server and measures round-trip\n"
		"time from each heartbeat's scheduled send time (so neither a slow server nor a slow\n"
		"hbload can hide latency). Progress goes to stderr every second; the summary to stdout.\n"
		"\n"
		"  --server ADDR         server address (IPv4/IPv6 literal or name)\n"
		"  --port N              server port (default %d)\n"
		"  --clients N           simulated devices\n"
		"  --proto tcp|udp       TCP: one connection per device; UDP: devices share a pool of\n"
		"                        sockets per thread and are told apart by session token\n"
		"  --interval S          heartbeat interval in seconds (fractions allowed)\n"
		"  --duration S          heartbeating time, counted from the end of setup\n"
		"  --json                one-line JSON summary on stdout instead of text\n"
		"  --keys FILE           device key store, hbd's format ('<id> <hex>' or\n"
		"                        'FIRST-LAST derive <hex>'); default $HBEAT_KEYS, else a\n"
		"                        built-in demo key (a warning says so)\n"
		"  --first-device ID     device id of the first client (default 1)\n"
		"  --source LIST         source addresses, comma-separated, ranges A-B allowed; clients\n"
		"                        take them round-robin (default: the kernel chooses)\n"
		"  --threads N           rings, one thread each (default: CPUs); raised for TCP so no\n"
		"                        ring holds more sockets than RLIMIT_NOFILE allows\n"
		"  --jitter FRAC         heartbeat jitter as a fraction of the interval (default 0.1)\n"
		"  --connect-rate N      new connections per second, 0 = unlimited (default 0)\n"
		"  --inflight N          connects + HELLOs in flight at once, all threads (default 1024)\n"
		"  --data-every N        send a DATA frame every N heartbeats (default 0: never)\n"
		"  --echo-every N        send an ECHO frame every N heartbeats (default 0: never)\n"
		"  --payload BYTES       DATA/ECHO payload size, 8..%d (default 16)\n"
		"  --silent N            the first N clients authenticate and never heartbeat\n"
		"  --drain S             wait this long for outstanding replies at the end (default 2)\n"
		"  --warmup S            leave heartbeats scheduled before setup end + S out of rtt_us\n"
		"                        (they still count as pings/pongs/lost; default: keep all)\n"
		"  --storm-at S          TCP: all clients drop S seconds after setup and reconnect\n"
		"  --storm-window S      ... with their reconnects spread over S seconds (default 30)\n"
		"  --setup-timeout S     stop waiting for every client to authenticate (default 60)\n"
		"  --connect-timeout S   TCP connect timeout (default 5)\n"
		"  --hello-timeout S     HELLO to WELCOME timeout (default 5)\n"
		"  --udp-sockets N       UDP sockets per thread (default 1024, at most one per client)\n"
		"Measurement windows (reported apart under \"steady\" and \"steps\"):\n"
		"  --steady S            the steady window: S seconds from the end of the warmup\n"
		"                        (default: until --duration ends)\n"
		"  --steps R1,R2,...     a rate ramp after the steady phase: heartbeats per second of\n"
		"                        each step (all clients, interval = clients / rate)\n"
		"  --steps-at S          the ramp starts S seconds after setup (default --duration);\n"
		"                        the run lasts until the ramp ends\n"
		"  --step-s S            length of a step (default 15)\n"
		"  --step-settle S       first seconds of a step left out of its window (default 3)\n"
		"  --step-stop-p99 MS    end the ramp after the first step whose p99 RTT exceeds MS\n"
		"                        (unanswered PINGs count as slow; default 10, 0 = never)\n"
		"  --events FILE         append phase events as they happen: 'SECONDS EVENT [ARGS]'\n"
		"                        (setup_done, window_start NAME RATE, window_end NAME, storm,\n"
		"                        storm_done, run_end), e.g. a FIFO a CPU sampler reads\n"
		"  --hist FILE           write each window's RTT histogram at the end (for plots)\n"
		"  --no-progress         no progress lines\n"
		"  -v, --verbose         debug logging\n"
		"  -h, --help            this text\n"
		"\n"
		"Exit status: 0 the run completed (even if it measured losses or failures);\n"
		"1 bad arguments or local setup failure (rings, key store); 2 the server was\n"
		"unreachable or refused every client (no client ever authenticated).\n",
		HB_DEFAULT_PORT, HBL_MAX_PAYLOAD);
}

enum {
	O_SERVER = 256, O_PORT, O_CLIENTS, O_PROTO, O_INTERVAL, O_DURATION, O_JSON, O_KEYS,
	O_FIRST, O_SOURCE, O_THREADS, O_JITTER, O_RATE, O_INFLIGHT, O_DATA, O_ECHO, O_PAYLOAD,
	O_SILENT, O_DRAIN, O_STORM, O_STORM_WIN, O_SETUP_TO, O_CONN_TO, O_HELLO_TO, O_UDPSOCK,
	O_NOPROG, O_WARMUP, O_STEADY, O_STEPS, O_STEPS_AT, O_STEP_S, O_STEP_SETTLE, O_STEP_STOP,
	O_EVENTS, O_HIST,
};

static const struct option longopts[] = {
	{ "server", required_argument, NULL, O_SERVER },
	{ "port", required_argument, NULL, O_PORT },
	{ "clients", required_argument, NULL, O_CLIENTS },
	{ "proto", required_argument, NULL, O_PROTO },
	{ "interval", required_argument, NULL, O_INTERVAL },
	{ "duration", required_argument, NULL, O_DURATION },
	{ "json", no_argument, NULL, O_JSON },
	{ "keys", required_argument, NULL, O_KEYS },
	{ "first-device", required_argument, NULL, O_FIRST },
	{ "source", required_argument, NULL, O_SOURCE },
	{ "threads", required_argument, NULL, O_THREADS },
	{ "jitter", required_argument, NULL, O_JITTER },
	{ "connect-rate", required_argument, NULL, O_RATE },
	{ "inflight", required_argument, NULL, O_INFLIGHT },
	{ "data-every", required_argument, NULL, O_DATA },
	{ "echo-every", required_argument, NULL, O_ECHO },
	{ "payload", required_argument, NULL, O_PAYLOAD },
	{ "silent", required_argument, NULL, O_SILENT },
	{ "drain", required_argument, NULL, O_DRAIN },
	{ "storm-at", required_argument, NULL, O_STORM },
	{ "storm-window", required_argument, NULL, O_STORM_WIN },
	{ "setup-timeout", required_argument, NULL, O_SETUP_TO },
	{ "connect-timeout", required_argument, NULL, O_CONN_TO },
	{ "hello-timeout", required_argument, NULL, O_HELLO_TO },
	{ "udp-sockets", required_argument, NULL, O_UDPSOCK },
	{ "no-progress", no_argument, NULL, O_NOPROG },
	{ "warmup", required_argument, NULL, O_WARMUP },
	{ "steady", required_argument, NULL, O_STEADY },
	{ "steps", required_argument, NULL, O_STEPS },
	{ "steps-at", required_argument, NULL, O_STEPS_AT },
	{ "step-s", required_argument, NULL, O_STEP_S },
	{ "step-settle", required_argument, NULL, O_STEP_SETTLE },
	{ "step-stop-p99", required_argument, NULL, O_STEP_STOP },
	{ "events", required_argument, NULL, O_EVENTS },
	{ "hist", required_argument, NULL, O_HIST },
	{ "verbose", no_argument, NULL, 'v' },
	{ "help", no_argument, NULL, 'h' },
	{ 0 },
};

static int num_u64(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *v)
{
	char *end;

	errno = 0;
	*v = strtoull(s, &end, 10);
	if (!*s || *s == '-' || errno || *end || *v < lo || *v > hi) {
		hb_err("--%s: '%s' is not a whole number in %llu..%llu", opt, s,
		       (unsigned long long)lo, (unsigned long long)hi);
		return -EINVAL;
	}
	return 0;
}

static int num_u32(const char *opt, const char *s, uint32_t lo, uint32_t hi, uint32_t *v)
{
	uint64_t x;
	int rc = num_u64(opt, s, lo, hi, &x);

	*v = (uint32_t)x;
	return rc;
}

/* A number of seconds (or a fraction); suffix allowed only where named (e.g. "/s"). */
static int num_dbl(const char *opt, const char *s, double lo, double hi, const char *suffix,
		   double *v)
{
	char *end;

	errno = 0;
	*v = strtod(s, &end);
	if (suffix && *end && !strcmp(end, suffix))
		end += strlen(end);
	if (!*s || errno || *end || !isfinite(*v) || *v < lo || *v > hi) {
		hb_err("--%s: '%s' is not a number in %g..%g", opt, s, lo, hi);
		return -EINVAL;
	}
	return 0;
}

static void defaults(struct hbl_opts *o)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	memset(o, 0, sizeof(*o));
	o->port = HB_DEFAULT_PORT;
	o->proto = HB_TCP;
	o->interval_s = -1;
	o->duration_s = -1;
	o->first_device = 1;
	o->threads = cpus > 0 && cpus < 64 ? (uint32_t)cpus : 2;
	o->jitter = 0.1;
	o->inflight = 1024;
	o->payload = 16;
	o->drain_s = 2;
	o->warmup_s = -1;
	o->storm_at_s = -1;
	o->storm_window_s = 30;
	o->setup_timeout_s = 60;
	o->connect_timeout_s = 5;
	o->hello_timeout_s = 5;
	o->udp_sockets = 1024;
	o->steady_s = -1;
	o->steps_at_s = -1;
	o->step_s = 15;
	o->step_settle_s = 3;
	o->step_stop_ms = 10;
	o->progress = 1;
}

/* "R1,R2,...": rates in heartbeats per second, each > 0. */
static int parse_steps(struct hbl_opts *o, const char *arg)
{
	const char *p = arg;

	o->nsteps = 0;
	while (*p) {
		char *end;
		double v;

		errno = 0;
		v = strtod(p, &end);
		if (end == p || errno || !isfinite(v) || v <= 0 || (*end && *end != ',')) {
			hb_err("--steps: '%s' is not a list of rates per second (e.g. 20000,30000)",
			       arg);
			return -EINVAL;
		}
		if (o->nsteps == HBL_MAX_STEPS_OPT) {
			hb_err("--steps: at most %d steps", HBL_MAX_STEPS_OPT);
			return -EINVAL;
		}
		o->steps[o->nsteps++] = v;
		p = *end ? end + 1 : end;
	}
	if (!o->nsteps) {
		hb_err("--steps: empty list");
		return -EINVAL;
	}
	return 0;
}

static int one(struct hbl_opts *o, int c, const char *arg)
{
	const char *name = NULL;
	uint64_t v64;
	uint32_t v;

	for (const struct option *l = longopts; l->name; l++)
		if (l->val == c)
			name = l->name;
	switch (c) {
	case O_SERVER: o->server = arg; return 0;
	case O_PORT:
		if (num_u32(name, arg, 1, 65535, &v))
			return -EINVAL;
		o->port = (uint16_t)v;
		return 0;
	case O_CLIENTS: return num_u32(name, arg, 1, 10000000, &o->clients);
	case O_PROTO:
		if (!strcmp(arg, "tcp"))
			o->proto = HB_TCP;
		else if (!strcmp(arg, "udp"))
			o->proto = HB_UDP;
		else {
			hb_err("--proto: '%s' is neither tcp nor udp", arg);
			return -EINVAL;
		}
		return 0;
	case O_INTERVAL: return num_dbl(name, arg, 0.001, 86400, NULL, &o->interval_s);
	case O_DURATION: return num_dbl(name, arg, 0, 30 * 86400, NULL, &o->duration_s);
	case O_JSON: o->json = 1; return 0;
	case O_KEYS: o->keys = arg; return 0;
	case O_FIRST:
		if (num_u64(name, arg, 1, UINT64_MAX - 10000000, &v64))
			return -EINVAL;
		o->first_device = v64;
		return 0;
	case O_SOURCE: o->source = arg; return 0;
	case O_THREADS: return num_u32(name, arg, 1, 256, &o->threads);
	case O_JITTER: return num_dbl(name, arg, 0, 1, NULL, &o->jitter);
	case O_RATE: return num_dbl(name, arg, 0, 1e9, "/s", &o->connect_rate);
	case O_INFLIGHT: return num_u32(name, arg, 1, 1000000, &o->inflight);
	case O_DATA: return num_u32(name, arg, 0, 1000000, &o->data_every);
	case O_ECHO: return num_u32(name, arg, 0, 1000000, &o->echo_every);
	case O_PAYLOAD: return num_u32(name, arg, 8, HBL_MAX_PAYLOAD, &o->payload);
	case O_SILENT: return num_u32(name, arg, 0, 10000000, &o->silent);
	case O_DRAIN: return num_dbl(name, arg, 0, 3600, NULL, &o->drain_s);
	case O_STORM: return num_dbl(name, arg, 0, 30 * 86400, NULL, &o->storm_at_s);
	case O_STORM_WIN: return num_dbl(name, arg, 0, 3600, NULL, &o->storm_window_s);
	case O_SETUP_TO: return num_dbl(name, arg, 0.1, 86400, NULL, &o->setup_timeout_s);
	case O_CONN_TO: return num_dbl(name, arg, 0.01, 3600, NULL, &o->connect_timeout_s);
	case O_HELLO_TO: return num_dbl(name, arg, 0.01, 3600, NULL, &o->hello_timeout_s);
	case O_UDPSOCK: return num_u32(name, arg, 1, 16384, &o->udp_sockets);
	case O_NOPROG: o->progress = 0; return 0;
	case O_WARMUP: return num_dbl(name, arg, 0, 86400, NULL, &o->warmup_s);
	case O_STEADY: return num_dbl(name, arg, 0, 30 * 86400, NULL, &o->steady_s);
	case O_STEPS: return parse_steps(o, arg);
	case O_STEPS_AT: return num_dbl(name, arg, 0, 30 * 86400, NULL, &o->steps_at_s);
	case O_STEP_S: return num_dbl(name, arg, 0.1, 86400, NULL, &o->step_s);
	case O_STEP_SETTLE: return num_dbl(name, arg, 0, 86400, NULL, &o->step_settle_s);
	case O_STEP_STOP: return num_dbl(name, arg, 0, 1e6, NULL, &o->step_stop_ms);
	case O_EVENTS: o->events = arg; return 0;
	case O_HIST: o->hist = arg; return 0;
	case 'v': o->verbose = 1; return 0;
	default: return -EINVAL;
	}
}

int hbl_parse_args(int argc, char **argv, struct hbl_opts *o)
{
	int c;

	defaults(o);
	optind = 1;
	while ((c = getopt_long(argc, argv, "vh", longopts, NULL)) != -1) {
		if (c == 'h') {
			hbl_usage(stdout);
			return 1;
		}
		if (c == '?' || one(o, c, optarg)) {
			fprintf(stderr, "try 'hbload --help'\n");
			return -EINVAL;
		}
	}
	if (optind < argc) {
		hb_err("unexpected argument '%s'", argv[optind]);
		return -EINVAL;
	}
	if (!o->server || !o->clients || o->interval_s < 0 || o->duration_s < 0) {
		hb_err("--server, --clients, --interval and --duration are required "
		       "(try 'hbload --help')");
		return -EINVAL;
	}
	if (o->silent > o->clients) {
		hb_err("--silent %u exceeds --clients %u", o->silent, o->clients);
		return -EINVAL;
	}
	if (o->nsteps && o->step_settle_s >= o->step_s) {
		hb_err("--step-settle %g leaves nothing of a %g s step to measure", o->step_settle_s,
		       o->step_s);
		return -EINVAL;
	}
	if (o->storm_at_s >= 0 && o->proto != HB_TCP) {
		hb_err("--storm-at applies to TCP clients (a UDP session has no connection to drop)");
		return -EINVAL;
	}
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
		if (parse_addr(item, family, lo) || parse_addr(dash ? dash + 1 : item, family, hi)) {
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
				snprintf(err, errlen, "more than %d source addresses", HBL_MAX_SOURCES);
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
