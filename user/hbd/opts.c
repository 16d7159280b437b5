// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbd's command line: its option table (defaults, ranges, --help) and the checks across options. */
#include <errno.h>
#include <grp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbd.h"
#include "log.h"
#include "metrics.h"
#include "mqtt.h"
#include "opt.h"
#include "placement.h"

/* hbd's own defaults; the port, pin directory and largest payload are the ABI header's. */
#define DEF_MAX_CLIENTS 10000
#define DEF_CLOCK_WINDOW_S 30
#define DEF_INTERVAL_S 30
#define DEF_EXPIRY_MULT 1.5
#define DEF_KEEPALIVE_PROBES 2
#define DEF_GRACE_S 5
#define DEF_DRAIN_S 10
/* The sink's file name in the state directory: systemd's $STATE_DIRECTORY (StateDirectory=hbeat
 * in hbd.service), else DEF_STATE_DIR. Never the working directory: a root daemon must not write
 * (and, at start, repair) whatever file a relative name finds there.
 */
#define DEF_SINK_NAME "data.jsonl"
#define DEF_STATE_DIR "/var/lib/hbeat"
#define DEF_RX_BUFFERS 128 /* per ring: ~28 rings at 500k clients; see worker.h */
#define DEF_RX_BUF_SIZE 512
#define DEF_MAX_PER_SOURCE 1024
#define DEF_ACCEPT_RATE 50000
#define DEF_HELLO_TIMEOUT_S 10
#define DEF_AUTH_FAIL_RATE 1
#define DEF_AUTH_FAIL_BURST 10
#define DEF_DATA_RATE 100
#define DEF_DATA_BURST 200
#define DEF_MAX_OUTPUT 65536
#define DEF_MAX_PENDING_MIN 1024 /* or --max-clients / DEF_MAX_PENDING_DIV, if that is more */
#define DEF_MAX_PENDING_DIV 16
#define DEF_NATS_NODE_TTL_S 6
#define DEF_NATS_TIMEOUT_S 2
#define DEF_NATS_DOWN_TIMEOUT_S 5
#define DEF_NATS_PRIORITY 0
#define DEF_NATS_PRESENCE_WINDOW 32768

static bool power_of_2(uint64_t v)
{
	return v && !(v & (v - 1));
}

/* --metrics is checked now, so a typo is a usage error, not a failure after startup. */
static int parse_metrics(const char *arg, void *cfg)
{
	struct sockaddr_storage ss;
	socklen_t len;

	if (hbd_metrics_parse_addr(arg, &ss, &len))
		return -EINVAL;
	((struct hbd_config *)cfg)->metrics = arg;
	return 0;
}

/* --control-group: the group must exist now, so a typo is a usage error. */
static int parse_control_group(const char *arg, void *cfg)
{
	struct hbd_config *c = cfg;
	struct group *g = getgrnam(arg);

	if (!g)
		return -EINVAL;
	c->control_group = arg;
	c->control_gid = (uint32_t)g->gr_gid;
	return 0;
}

static int parse_cpus(const char *arg, void *cfg)
{
	return hb_cpus_parse(arg, &((struct hbd_config *)cfg)->cpus) ? -EINVAL : 0;
}

/* clang-format off */
static const struct hb_opt_choice log_levels[] = {
	{ "error", HB_LOG_ERROR }, { "warn", HB_LOG_WARN }, { "info", HB_LOG_INFO },
	{ "debug", HB_LOG_DEBUG }, { NULL, 0 },
};

static const struct hb_opt_choice map_full[] = {
	{ "userspace", false }, { "refuse", true }, { NULL, 0 },
};
/* clang-format on */

#define AT(f) HB_OPT_AT(struct hbd_config, f)

/* clang-format off */
static const struct hb_opt options[] = {
	{ "keys", 0, "FILE", "device key store, in the format user/common/auth.h describes",
	  HB_OPT_STRING, AT(keys), .required = true },
	{ "bind", 0, "ADDR", "listen address, an IPv4 or IPv6 literal", HB_OPT_STRING, AT(bind),
	  .def_text = "::, dual-stack" },
	{ "port", 0, "N", "TCP and UDP port; 0 takes any free port", HB_OPT_UINT, AT(port),
	  .def.u = HB_DEFAULT_PORT, .umin = 0, .umax = 65535 },
	{ "mqtt-port", 0, "N", "also serve MQTT 3.1.1 devices on this TCP port (docs/MQTT.md); 0: "
	  "off", HB_OPT_UINT, AT(mqtt_port), .umin = 0, .umax = 65535 },
	{ "mqtt-realm", 0, "NAME", "this server's name in MQTT passwords: give each server its own, "
	  "so a password one of them saw works on no other", HB_OPT_STRING, AT(mqtt_realm),
	  .def.s = HB_MQTT_DEFAULT_REALM },
	{ "mqtt-max-days", 0, "N", "the longest validity, in days, an MQTT password may claim",
	  HB_OPT_UINT, AT(mqtt_max_days), .def.u = HB_MQTT_DEFAULT_DAYS, .umin = 0, .umax = 3650 },
	{ "workers", 0, "N", "workers, one io_uring ring each (and a thread each, unless "
	  "--ring-threads)", HB_OPT_UINT, AT(workers),
	  .umin = 1, .umax = HBD_MAX_RINGS,
	  .def_text = "one per CPU (of --cpus if given), more if --max-clients needs more "
	  "direct-descriptor tables" },
	{ "ring-threads", 0, "N", "run the workers' rings on N threads: a thread sleeps once for "
	  "all of its rings and, when busy, gathers their completions of a --batch-wait in one "
	  "wakeup (500k clients need 32 rings at RLIMIT_NOFILE 20000, each too quiet to batch "
	  "alone); costs latency and login bursts (docs/OPERATIONS.md)",
	  HB_OPT_UINT, AT(ring_threads), .umin = 0, .umax = HBD_MAX_RINGS,
	  .def_text = "0: one thread per ring" },
	{ "cpus", 0, "LIST", "pin worker i to the (i mod n)-th of these n CPUs and steer each new "
	  "connection and datagram to a worker on the CPU that received it (SO_INCOMING_CPU on "
	  "every service socket; Linux 6.1): its wakeups and answers stay on that CPU",
	  HB_OPT_CUSTOM, .parse = parse_cpus, .expect = "a CPU list such as 0-3,6",
	  .def_text = "off: workers float, the kernel spreads connections by hash" },
	{ "max-clients", 0, "N", "authenticated TCP connections, and UDP sessions, at most",
	  HB_OPT_UINT, AT(max_clients), .def.u = DEF_MAX_CLIENTS, .umin = 1, .umax = 1 << 24 },
	{ "interval", 0, "SEC", "heartbeat interval told to devices", HB_OPT_DOUBLE, AT(interval_s),
	  .def.d = DEF_INTERVAL_S, .dmin = 0.01, .dmax = 86400 },
	{ "expiry-mult", 0, "X", "expire a device after X intervals of silence", HB_OPT_DOUBLE,
	  AT(expiry_mult), .def.d = DEF_EXPIRY_MULT, .dmin = 1, .dmax = 100 },
	{ "keepalive-probes", 0, "N", "with hbctl load --tcp keepalive: the kernel probes a silent "
	  "connection every 8/9 of --interval and closes it once N probes went unanswered, "
	  "within (N + 1) intervals of the device's last packet", HB_OPT_UINT, AT(keepalive_probes),
	  .def.u = DEF_KEEPALIVE_PROBES, .umin = 1, .umax = 100 },
	{ "clock-window", 0, "SEC", "accepted HELLO clock skew", HB_OPT_DOUBLE, AT(clock_window_s),
	  .def.d = DEF_CLOCK_WINDOW_S, .dmin = 0.001, .dmax = 86400 },
	{ "server-id", 0, "ID", "this server's id: a HELLO bound to another server (one of a fleet "
	  "sharing the key store) is refused; 0 for none", HB_OPT_UINT, AT(server_id),
	  .def.u = 0, .umin = 0, .umax = UINT64_MAX },
	{ "require-udp-mac", 0, NULL, "UDP in protocol version 2 only (every frame under a "
	  "session key MAC): a version 1 UDP HELLO is refused with ERROR(VERSION)",
	  HB_OPT_FLAG, AT(require_udp_mac) },
	{ "grace", 0, "SEC", "the fast paths keep answering this long after hbd stops refreshing "
	  "its liveness stamp", HB_OPT_DOUBLE, AT(grace_s), .def.d = DEF_GRACE_S, .dmin = 0,
	  .dmax = 86400 },
	{ "sink", 0, "FILE", "JSON-lines file for DATA frames (a symbolic link is refused)",
	  HB_OPT_STRING, AT(sink), .def_text = "$STATE_DIRECTORY/" DEF_SINK_NAME " under systemd, "
	  "else " DEF_STATE_DIR "/" DEF_SINK_NAME },
	{ "sink-fsync", 0, NULL, "fdatasync each batch before ACKing it (survives power loss)",
	  HB_OPT_FLAG, AT(sink_fsync) },
	{ "pin-path", 0, "DIR", "pinned BPF maps", HB_OPT_STRING, AT(pin_path),
	  .def.s = HB_PIN_DEFAULT },
	{ "no-offload", 0, NULL, "answer every heartbeat in userspace; never mark sessions AUTHED "
	  "in the kernel maps", HB_OPT_FLAG, AT(no_offload) },
	{ "no-defer-taskrun", 0, NULL, "workers' rings without IORING_SETUP_DEFER_TASKRUN and "
	  "SINGLE_ISSUER (COOP_TASKRUN instead): to measure what they are worth",
	  HB_OPT_FLAG, AT(no_defer_taskrun) },
	{ "batch-wait", 0, "USEC", "a busy worker waits up to USEC microseconds for "
	  "completions to gather before it wakes (fewer wakeups, up to USEC more latency), while "
	  "its rate brings several a wait; a slower or idle one wakes at the first; 0: off",
	  HB_OPT_UINT, AT(batch_wait_us), .def.u = 1000, .umin = 0, .umax = 100000 },
	{ "drain-timeout", 0, "SEC", "longest a SIGTERM drain may take", HB_OPT_DOUBLE, AT(drain_s),
	  .def.d = DEF_DRAIN_S, .dmin = 0.1, .dmax = 3600 },
	{ "rx-buffers", 0, "N", "TCP receive buffers per worker, a power of 2", HB_OPT_UINT,
	  AT(rx_buffers), .def.u = DEF_RX_BUFFERS, .umin = 16, .umax = 32768,
	  .uint_ok = power_of_2, .expect = "a power of 2 in 16..32768" },
	{ "rx-buf-size", 0, "B", "the size of each TCP receive buffer", HB_OPT_UINT,
	  AT(rx_buf_size), .def.u = DEF_RX_BUF_SIZE, .umin = 64, .umax = 65536 },
	{ "control", 0, "PATH", "control socket for applications: downlink messages, presence "
	  "events, key reload (docs/CONTROL.md)", HB_OPT_STRING, AT(control),
	  .def_text = "none; the systemd unit uses /run/hbeat/hbd.sock" },
	{ "control-group", 0, "NAME", "a group whose members may use the control socket too (it "
	  "becomes the socket's group); others than root and hbd's user are refused",
	  HB_OPT_CUSTOM, .parse = parse_control_group, .expect = "the name of an existing group",
	  .def_text = "none: root and hbd's user only" },
	{ "metrics", 0, "ADDR:PORT", "serve Prometheus metrics at http://ADDR:PORT/metrics; ADDR "
	  "defaults to 127.0.0.1 (\"9107\" or \":9107\"), \"[::]:9107\" or \"0.0.0.0:9107\" expose "
	  "them", HB_OPT_CUSTOM, .parse = parse_metrics,
	  .expect = "PORT, :PORT, ADDR:PORT or [V6ADDR]:PORT", .def_text = "off" },
	{ "log-level", 0, NULL, "how much to log", HB_OPT_CHOICE, AT(log_level),
	  .choices = log_levels, .def.i = HB_LOG_INFO },
	{ .type = HB_OPT_HEADING,
	  .help = "Limits (each refusal is counted; 0 turns a limit off where said):" },
	{ "max-per-source", 0, "N", "TCP connections from one address, IPv6 per /64; more are "
	  "refused with ERROR(FULL); 0: no limit", HB_OPT_UINT, AT(max_per_source),
	  .def.u = DEF_MAX_PER_SOURCE, .umin = 0, .umax = 1 << 24 },
	{ "accept-rate", 0, "N", "new TCP connections a second; beyond it accepting pauses and the "
	  "kernel queues them; 0: no limit", HB_OPT_DOUBLE, AT(accept_rate),
	  .def.d = DEF_ACCEPT_RATE, .dmin = 0, .dmax = 1e7 },
	{ "hello-timeout", 0, "SEC", "close connections without a HELLO by then", HB_OPT_DOUBLE,
	  AT(hello_timeout_s), .def.d = DEF_HELLO_TIMEOUT_S, .dmin = 0.01, .dmax = 3600 },
	{ "max-pending", 0, "N", "TCP connections without a HELLO yet, beside --max-clients; when "
	  "they are this many the oldest is closed (ERROR(FULL)) for a new one, and from half as "
	  "many on new ones get at most 2 s for their HELLO", HB_OPT_UINT, AT(max_pending),
	  .umin = 1, .umax = 1 << 24,
	  .def_text = "--max-clients / 16, at least 1024" },
	{ "auth-fail-rate", 0, "R", "failed HELLOs a second one source may make after "
	  "--auth-fail-burst at once; beyond it HELLOs from there are refused unchecked "
	  "(ERROR(RATE); none on UDP)", HB_OPT_DOUBLE, AT(auth_fail_rate),
	  .def.d = DEF_AUTH_FAIL_RATE, .dmin = 0, .dmax = 1e6 },
	{ "auth-fail-burst", 0, "N", "failed HELLOs one source may make at once", HB_OPT_UINT,
	  AT(auth_fail_burst), .def.u = DEF_AUTH_FAIL_BURST, .umin = 1, .umax = 1000000 },
	{ "data-rate", 0, "R", "DATA frames a second one device may send after --data-burst at "
	  "once; beyond it TCP gets ERROR(RATE) and is closed, UDP DATA is not ACKed; 0: no limit",
	  HB_OPT_DOUBLE, AT(data_rate), .def.d = DEF_DATA_RATE, .dmin = 0, .dmax = 1e7 },
	{ "data-burst", 0, "N", "DATA frames one device may send at once", HB_OPT_UINT,
	  AT(data_burst), .def.u = DEF_DATA_BURST, .umin = 1, .umax = 10000000 },
	{ "max-payload", 0, "B", "largest DATA/ECHO payload; the default is the most the "
	  "protocol allows", HB_OPT_UINT, AT(max_payload), .def.u = HB_MAX_PAYLOAD, .umin = 1,
	  .umax = HB_MAX_PAYLOAD },
	{ "max-output", 0, "B", "unsent reply bytes one TCP connection may queue before it is "
	  "closed as a slow reader", HB_OPT_UINT, AT(max_output), .def.u = DEF_MAX_OUTPUT,
	  .umin = 1024, .umax = 1 << 30 },
	{ "on-map-full", 0, NULL, "a client the kernel map has no room for is served in userspace, "
	  "or refused with ERROR(FULL)", HB_OPT_CHOICE, AT(map_full_refuse), .choices = map_full,
	  .def.i = false },
	{ .type = HB_OPT_HEADING,
	  .help = "Fleet mode (docs/FLEET.md): presence, downlink and DATA through NATS JetStream:" },
	{ "nats", 0, "URL[,URL...]", "NATS servers (nats://HOST:PORT): turns fleet mode on; DATA "
	  "goes to the HBEAT_DATA stream instead of --sink", HB_OPT_STRING, AT(nats.urls),
	  .def_text = "off: single node, DATA to --sink" },
	{ "nats-creds", 0, "FILE", "NATS user credentials file (JWT and NKey seed)", HB_OPT_STRING,
	  AT(nats.auth.creds), .excludes = "nats-user" },
	{ "nats-user", 0, "USER", "NATS user name; the password is read from --nats-password-file",
	  HB_OPT_STRING, AT(nats.auth.user) },
	{ "nats-password-file", 0, "FILE", "the NATS password, on the file's first line",
	  HB_OPT_STRING, AT(nats.auth.password_file) },
	{ "nats-ca", 0, "FILE", "TLS to NATS: the CA certificates (PEM) the servers' must chain "
	  "to", HB_OPT_STRING, AT(nats.auth.ca), .def_text = "plain TCP, unless a URL is tls://" },
	{ "nats-cert", 0, "FILE", "TLS to NATS: this node's certificate (PEM), for servers that "
	  "verify clients; with --nats-key", HB_OPT_STRING, AT(nats.auth.cert) },
	{ "nats-key", 0, "FILE", "the private key of --nats-cert (PEM)", HB_OPT_STRING,
	  AT(nats.auth.key) },
	{ "nats-node", 0, "NAME", "this node's name in hbeat_nodes and in presence entries",
	  HB_OPT_STRING, AT(nats.node), .def_text = "HOSTNAME-PORT" },
	{ "nats-replicas", 0, "N", "replicas of the stream and buckets hbd creates if missing",
	  HB_OPT_UINT, AT(nats.replicas), .def.u = 1, .umin = 1, .umax = 5 },
	{ "nats-node-ttl", 0, "SEC", "a node not refreshed in hbeat_nodes for this long is dead and "
	  "its devices are marked offline", HB_OPT_DOUBLE, AT(nats.node_ttl_s),
	  .def.d = DEF_NATS_NODE_TTL_S, .dmin = 1, .dmax = 3600 },
	{ "nats-timeout", 0, "SEC", "a DATA publish JetStream has not acknowledged by then failed "
	  "(the frame is not ACKed)", HB_OPT_DOUBLE, AT(nats.timeout_s),
	  .def.d = DEF_NATS_TIMEOUT_S, .dmin = 0.1, .dmax = 600 },
	{ "nats-down-timeout", 0, "SEC", "how long a downlink from NATS waits for its device's ACK",
	  HB_OPT_DOUBLE, AT(nats.down_timeout_s), .def.d = DEF_NATS_DOWN_TIMEOUT_S, .dmin = 0.01,
	  .dmax = 600 },
	{ "nats-priority", 0, "N", "nice steps above the daemon's for the fleet's threads and "
	  "libnats' (needs CAP_SYS_NICE or RLIMIT_NICE; 0: the daemon's; raised, they starve "
	  "the kworker that sends the kernel path's PONGs after a mass login)", HB_OPT_UINT, AT(nats.priority), .def.u = DEF_NATS_PRIORITY,
	  .umin = 0, .umax = 39 },
	{ "nats-presence-window", 0, "N", "a session's end is written at once while fewer presence "
	  "writes are in flight, else by the catch-up, and not at all if the device is back by "
	  "then (in a reconnect storm, most devices get one write, not two)", HB_OPT_UINT,
	  AT(nats.presence_window), .def.u = DEF_NATS_PRESENCE_WINDOW, .umin = 1,
	  .umax = 1 << 20 },
	{ "help", 'h', NULL, "this text", .type = HB_OPT_HELP },
	{ 0 },
};
/* clang-format on */

static const struct hb_opt_prog prog = {
	.name = "hbd",
	.synopsis = "--keys FILE [options]",
	.about = "The hbeat daemon: authenticates devices over TCP and UDP, answers what the\n"
		 "kernel fast paths do not, stores DATA frames, expires silent devices.\n",
	.epilog =
		"Signals: SIGTERM/SIGINT drain (BYE to every device, then exit 0); SIGHUP reloads\n"
		"the key store and cuts the live sessions of devices it no longer admits; SIGUSR2\n"
		"upgrades: starts the binary now at this one's path with the same arguments and\n"
		"hands it every socket, session and TCP connection, then exits 0 (RELIABILITY.md).\n"
		"Under systemd (Type=notify) hbd reports READY, RELOADING, STOPPING, a STATUS line,\n"
		"and pets the watchdog if WatchdogSec= is set.\n"
		"\n"
		"Exit codes: 0 clean shutdown, 1 runtime failure, 2 usage, 3 could not start.\n"
		"At exit, one JSON line with every counter goes to stdout.\n",
	.opts = options,
};

void hbd_config_defaults(struct hbd_config *c)
{
	memset(c, 0, sizeof(*c));
	hb_opt_defaults(options, c);
}

/* The default sink: in the first directory of $STATE_DIRECTORY (systemd may list several,
 * separated by colons) when it is an absolute path, else in DEF_STATE_DIR. */
static int default_sink(struct hbd_config *c)
{
	const char *dir = getenv("STATE_DIRECTORY");
	size_t len = dir ? strcspn(dir, ":") : 0;

	if (!dir || dir[0] != '/' || !len) {
		dir = DEF_STATE_DIR;
		len = strlen(dir);
	}
	if ((size_t)snprintf(c->sink_default, sizeof(c->sink_default), "%.*s/%s", (int)len, dir,
			     DEF_SINK_NAME) >= sizeof(c->sink_default))
		return hb_opt_error(&prog, "$STATE_DIRECTORY is too long: give --sink");
	c->sink = c->sink_default;
	return 0;
}

int hbd_parse_args(int argc, char **argv, struct hbd_config *c)
{
	int rc = hb_opt_parse(&prog, argc, argv, c, NULL);
	const char *why;

	if (rc)
		return rc;
	if (!c->sink && (rc = default_sink(c)))
		return rc;
	if (!c->max_pending) {
		c->max_pending = c->max_clients / DEF_MAX_PENDING_DIV;
		if (c->max_pending < DEF_MAX_PENDING_MIN)
			c->max_pending = DEF_MAX_PENDING_MIN;
	}
	if (CPU_COUNT(&c->cpus)) {
		char why[512];

		if (hbd_placement_check(&c->cpus, why, sizeof(why)))
			return hb_opt_error(&prog, "--cpus: %s", why);
	}
	if (c->mqtt_port && c->mqtt_port == c->port)
		return hb_opt_error(&prog, "--mqtt-port %u is --port too", c->mqtt_port);
	if (strlen(c->mqtt_realm) > HB_MQTT_REALM_MAX)
		return hb_opt_error(&prog, "--mqtt-realm is longer than %d bytes",
				    HB_MQTT_REALM_MAX);
	if (c->interval_s * c->expiry_mult * 1000 > UINT32_MAX / 2)
		return hb_opt_error(&prog, "--interval x --expiry-mult is too long");
	if (!c->nats.urls &&
	    (c->nats.auth.creds || c->nats.auth.user || c->nats.auth.password_file ||
	     c->nats.auth.ca || c->nats.auth.cert || c->nats.auth.key || c->nats.node))
		return hb_opt_error(&prog, "the --nats-* options need --nats URL");
	if ((why = hb_nats_auth_check(&c->nats.auth)))
		return hb_opt_error(&prog, "%s", why);
	/* a key of the hbeat_nodes bucket, and a value in JSON without escapes */
	if (c->nats.node && (!*c->nats.node || strlen(c->nats.node) > 63 ||
			     c->nats.node[strspn(c->nats.node, "abcdefghijklmnopqrstuvwxyz"
							       "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
							       "0123456789-_=")]))
		return hb_opt_error(&prog, "--nats-node must be 1..63 of A-Z a-z 0-9 - _ =");
	return 0;
}
