// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbd's command line: defaults, parsing, --help. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbd.h"
#include "log.h"
#include "metrics.h"

void hbd_config_defaults(struct hbd_config *c)
{
	memset(c, 0, sizeof(*c));
	c->port = HB_DEFAULT_PORT;
	c->max_clients = 10000;
	c->clock_window_s = 30;
	c->interval_s = 30;
	c->expiry_mult = 1.5;
	c->grace_s = 5;
	c->drain_s = 10;
	c->sink = "hbeat-data.jsonl";
	c->pin_path = HB_PIN_DEFAULT;
	c->log_level = HB_LOG_INFO;
	c->rx_buffers = 128; /* per ring: ~28 rings at 500k clients; see worker.h */
	c->rx_buf_size = 512;
	c->max_per_source = 1024;
	c->accept_rate = 50000;
	c->hello_timeout_s = 10;
	c->auth_fail_rate = 1;
	c->auth_fail_burst = 10;
	c->data_rate = 100;
	c->data_burst = 200;
	c->max_payload = HB_MAX_PAYLOAD;
	c->max_output = 65536;
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: hbd --keys FILE [options]\n"
		"The hbeat daemon: authenticates devices over TCP and UDP, answers what the kernel\n"
		"fast paths do not, stores DATA frames, expires silent devices.\n"
		"\n"
		"  --keys FILE           device key store (required; see user/common/auth.h)\n"
		"  --bind ADDR           listen address (default :: dual-stack; IPv4 or IPv6 literal)\n"
		"  --port N              TCP and UDP port (default %d; 0 = any free port)\n"
		"  --workers N           worker threads/rings (default: one per CPU, more if\n"
		"                        --max-clients needs more direct-descriptor tables)\n"
		"  --max-clients N       TCP connections, and UDP sessions, at most (default 10000)\n"
		"  --interval SEC        heartbeat interval told to devices (default 30)\n"
		"  --expiry-mult X       expire after X intervals of silence (default 1.5)\n"
		"  --clock-window SEC    accepted HELLO clock skew (default 30)\n"
		"  --grace SEC           fast paths keep answering this long after hbd stops\n"
		"                        refreshing its liveness stamp (default 5)\n"
		"  --sink FILE           JSON-lines file for DATA frames (default hbeat-data.jsonl)\n"
		"  --sink-fsync          fdatasync each batch before ACKing it (survives power loss)\n"
		"  --pin-path DIR        pinned BPF maps (default %s)\n"
		"  --no-offload          answer every heartbeat in userspace; never mark sessions\n"
		"                        AUTHED in the kernel maps\n"
		"  --drain-timeout SEC   longest a SIGTERM drain may take (default 10)\n"
		"  --rx-buffers N        TCP receive buffers per worker, power of 2 (default 128)\n"
		"  --rx-buf-size B       their size (default 512)\n"
		"  --control PATH        control socket for applications: downlink messages,\n"
		"                        presence events, key reload (docs/CONTROL.md);\n"
		"                        default none (the systemd unit uses /run/hbeat/hbd.sock)\n"
		"  --metrics ADDR:PORT   serve Prometheus metrics at http://ADDR:PORT/metrics;\n"
		"                        ADDR defaults to 127.0.0.1 (\"9107\" or \":9107\"),\n"
		"                        \"[::]:9107\" or \"0.0.0.0:9107\" to expose it; default off\n"
		"  --log-level L         error|warn|info|debug (default info)\n"
		"\n"
		"Limits (each refusal is counted; 0 turns a limit off where said):\n"
		"  --max-per-source N    TCP connections from one address, IPv6 per /64; more are\n"
		"                        refused with ERROR(FULL) (default 1024, 0 = none)\n"
		"  --accept-rate N       new TCP connections a second; beyond it accepting pauses\n"
		"                        and the kernel queues them (default 50000, 0 = none)\n"
		"  --hello-timeout SEC   close connections without a HELLO by then (default 10)\n"
		"  --auth-fail-rate R    failed HELLOs a second one source may make after\n"
		"  --auth-fail-burst N   N at once; beyond it HELLOs from there are refused\n"
		"                        unchecked (ERROR(RATE); none on UDP) (default 1/s, 10)\n"
		"  --data-rate R         DATA frames a second one device may send after\n"
		"  --data-burst N        N at once; beyond it TCP gets ERROR(RATE) and is\n"
		"                        closed, UDP DATA is not ACKed (default 100/s, 200; 0 = none)\n"
		"  --max-payload B       largest DATA/ECHO payload (default and most 1024)\n"
		"  --max-output B        unsent reply bytes one TCP connection may queue before\n"
		"                        it is closed as a slow reader (default 65536)\n"
		"  --on-map-full WHAT    a client the kernel map has no room for is served in\n"
		"                        userspace (default) or refused with ERROR(FULL)\n"
		"  -h, --help            this text\n"
		"\n"
		"Signals: SIGTERM/SIGINT drain (BYE to every device, then exit 0); SIGHUP reloads\n"
		"the key store and cuts the live sessions of devices it no longer admits; SIGUSR2\n"
		"upgrades: starts the binary now at this one's path with the same arguments and\n"
		"hands it every socket, session and TCP connection, then exits 0 (RELIABILITY.md).\n"
		"Under systemd (Type=notify) hbd reports READY, RELOADING, STOPPING, a STATUS line,\n"
		"and pets the watchdog if WatchdogSec= is set.\n"
		"\n"
		"Exit codes: 0 clean shutdown, 1 runtime failure, 2 usage, 3 could not start.\n"
		"At exit, one JSON line with every counter goes to stdout.\n",
		HB_DEFAULT_PORT, HB_PIN_DEFAULT);
}

static int num(const char *opt, const char *s, double lo, double hi, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
		fprintf(stderr, "hbd: %s %s: expected a number in [%g, %g]\n", opt, s, lo, hi);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

int hbd_parse_args(int argc, char **argv, struct hbd_config *c)
{
	enum {
		O_BIND = 256, O_PORT, O_WORKERS, O_MAX, O_KEYS, O_WINDOW, O_INTERVAL, O_MULT,
		O_GRACE, O_SINK, O_SINKSYNC, O_PIN, O_NOOFF, O_LOG, O_DRAIN, O_RXN, O_RXS,
		O_PERSRC, O_ACCRATE, O_HELLOTO, O_AFRATE, O_AFBURST, O_DRATE, O_DBURST, O_MAXPL,
		O_MAXOUT, O_MAPFULL, O_CONTROL, O_METRICS,
	};
	static const struct option opts[] = {
		{ "bind", required_argument, NULL, O_BIND },
		{ "port", required_argument, NULL, O_PORT },
		{ "workers", required_argument, NULL, O_WORKERS },
		{ "max-clients", required_argument, NULL, O_MAX },
		{ "keys", required_argument, NULL, O_KEYS },
		{ "clock-window", required_argument, NULL, O_WINDOW },
		{ "interval", required_argument, NULL, O_INTERVAL },
		{ "expiry-mult", required_argument, NULL, O_MULT },
		{ "grace", required_argument, NULL, O_GRACE },
		{ "sink", required_argument, NULL, O_SINK },
		{ "sink-fsync", no_argument, NULL, O_SINKSYNC },
		{ "pin-path", required_argument, NULL, O_PIN },
		{ "no-offload", no_argument, NULL, O_NOOFF },
		{ "log-level", required_argument, NULL, O_LOG },
		{ "drain-timeout", required_argument, NULL, O_DRAIN },
		{ "rx-buffers", required_argument, NULL, O_RXN },
		{ "rx-buf-size", required_argument, NULL, O_RXS },
		{ "max-per-source", required_argument, NULL, O_PERSRC },
		{ "accept-rate", required_argument, NULL, O_ACCRATE },
		{ "hello-timeout", required_argument, NULL, O_HELLOTO },
		{ "auth-fail-rate", required_argument, NULL, O_AFRATE },
		{ "auth-fail-burst", required_argument, NULL, O_AFBURST },
		{ "data-rate", required_argument, NULL, O_DRATE },
		{ "data-burst", required_argument, NULL, O_DBURST },
		{ "max-payload", required_argument, NULL, O_MAXPL },
		{ "max-output", required_argument, NULL, O_MAXOUT },
		{ "on-map-full", required_argument, NULL, O_MAPFULL },
		{ "control", required_argument, NULL, O_CONTROL },
		{ "metrics", required_argument, NULL, O_METRICS },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	double v;
	int o;

	optind = 1;
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case O_BIND:
			c->bind = optarg;
			break;
		case O_PORT:
			if (num("--port", optarg, 0, 65535, &v))
				return -EINVAL;
			c->port = (uint16_t)v;
			break;
		case O_WORKERS:
			if (num("--workers", optarg, 1, HBD_MAX_RINGS, &v))
				return -EINVAL;
			c->workers = (unsigned)v;
			break;
		case O_MAX:
			if (num("--max-clients", optarg, 1, 1 << 24, &v))
				return -EINVAL;
			c->max_clients = (unsigned)v;
			break;
		case O_KEYS:
			c->keys = optarg;
			break;
		case O_WINDOW:
			if (num("--clock-window", optarg, 0.001, 86400, &c->clock_window_s))
				return -EINVAL;
			break;
		case O_INTERVAL:
			if (num("--interval", optarg, 0.01, 86400, &c->interval_s))
				return -EINVAL;
			break;
		case O_MULT:
			if (num("--expiry-mult", optarg, 1, 100, &c->expiry_mult))
				return -EINVAL;
			break;
		case O_GRACE:
			if (num("--grace", optarg, 0, 86400, &c->grace_s))
				return -EINVAL;
			break;
		case O_SINK:
			c->sink = optarg;
			break;
		case O_SINKSYNC:
			c->sink_fsync = true;
			break;
		case O_PIN:
			c->pin_path = optarg;
			break;
		case O_NOOFF:
			c->no_offload = true;
			break;
		case O_LOG:
			c->log_level = hb_log_parse_level(optarg);
			if (c->log_level < 0) {
				fprintf(stderr, "hbd: --log-level %s: expected error|warn|info|debug\n",
					optarg);
				return -EINVAL;
			}
			break;
		case O_DRAIN:
			if (num("--drain-timeout", optarg, 0.1, 3600, &c->drain_s))
				return -EINVAL;
			break;
		case O_RXN:
			if (num("--rx-buffers", optarg, 16, 32768, &v))
				return -EINVAL;
			c->rx_buffers = (unsigned)v;
			if (c->rx_buffers & (c->rx_buffers - 1)) {
				fprintf(stderr, "hbd: --rx-buffers must be a power of 2\n");
				return -EINVAL;
			}
			break;
		case O_RXS:
			if (num("--rx-buf-size", optarg, 64, 65536, &v))
				return -EINVAL;
			c->rx_buf_size = (unsigned)v;
			break;
		case O_PERSRC:
			if (num("--max-per-source", optarg, 0, 1 << 24, &v))
				return -EINVAL;
			c->max_per_source = (unsigned)v;
			break;
		case O_ACCRATE:
			if (num("--accept-rate", optarg, 0, 1e7, &c->accept_rate))
				return -EINVAL;
			break;
		case O_HELLOTO:
			if (num("--hello-timeout", optarg, 0.01, 3600, &c->hello_timeout_s))
				return -EINVAL;
			break;
		case O_AFRATE:
			if (num("--auth-fail-rate", optarg, 0, 1e6, &c->auth_fail_rate))
				return -EINVAL;
			break;
		case O_AFBURST:
			if (num("--auth-fail-burst", optarg, 1, 1e6, &v))
				return -EINVAL;
			c->auth_fail_burst = (unsigned)v;
			break;
		case O_DRATE:
			if (num("--data-rate", optarg, 0, 1e7, &c->data_rate))
				return -EINVAL;
			break;
		case O_DBURST:
			if (num("--data-burst", optarg, 1, 1e7, &v))
				return -EINVAL;
			c->data_burst = (unsigned)v;
			break;
		case O_MAXPL:
			if (num("--max-payload", optarg, 1, HB_MAX_PAYLOAD, &v))
				return -EINVAL;
			c->max_payload = (unsigned)v;
			break;
		case O_MAXOUT:
			if (num("--max-output", optarg, 1024, 1 << 30, &v))
				return -EINVAL;
			c->max_output = (unsigned)v;
			break;
		case O_MAPFULL:
			if (strcmp(optarg, "userspace") && strcmp(optarg, "refuse")) {
				fprintf(stderr, "hbd: --on-map-full %s: expected userspace|refuse\n",
					optarg);
				return -EINVAL;
			}
			c->map_full_refuse = !strcmp(optarg, "refuse");
			break;
		case O_CONTROL:
			c->control = optarg;
			break;
		case O_METRICS: {
			struct sockaddr_storage ss;
			socklen_t len;

			if (hbd_metrics_parse_addr(optarg, &ss, &len)) {
				fprintf(stderr, "hbd: --metrics %s: expected PORT, :PORT, ADDR:PORT or "
						"[V6ADDR]:PORT\n", optarg);
				return -EINVAL;
			}
			c->metrics = optarg;
			break;
		}
		case 'h':
			usage(stdout);
			return 1;
		default:
			usage(stderr);
			return -EINVAL;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "hbd: unexpected argument '%s' (try --help)\n", argv[optind]);
		return -EINVAL;
	}
	if (!c->keys) {
		fprintf(stderr, "hbd: --keys FILE is required (try --help)\n");
		return -EINVAL;
	}
	if (c->interval_s * c->expiry_mult * 1000 > UINT32_MAX / 2) {
		fprintf(stderr, "hbd: --interval x --expiry-mult is too long\n");
		return -EINVAL;
	}
	return 0;
}
