// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbctl: command dispatch, the commands' option tables, and the load/unload commands. */
#include "hbctl.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <limits.h>
#include <net/if.h>
#include <openssl/crypto.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "hb_bpf.h"
#include "hb_env.h"
#include "json_out.h"
#include "log.h"
#include "mqtt.h"
#include "opt.h"

/* ------------------------------------------------------------------------------------------ */
/* Options                                                                                    */

#define MAP_MAX_ENTRIES (HB_MAX_CONNS * 16) /* maps are preallocated: kernel memory up front */
#define SEND_TIMEOUT_MS 5000

/* clang-format off */
#define OPT_PIN(T)                                                                               \
	{ "pin-path", 0, "DIR", "pin directory of maps and links", HB_OPT_STRING,                \
	  HB_OPT_AT(T, pin_path), .def.s = HB_PIN_DEFAULT }
#define OPT_JSON(T)                                                                              \
	{ "json", 'j', NULL, "print one line of JSON instead of a table", HB_OPT_FLAG,          \
	  HB_OPT_AT(T, json) }
#define OPT_CONTROL(T)                                                                           \
	{ "control", 'c', "PATH", "hbd's control socket (hbd --control)", HB_OPT_STRING,         \
	  HB_OPT_AT(T, control), .def.s = HBCTL_DEFAULT_CONTROL }
#define OPT_HELP { "help", 'h', NULL, "show this help", .type = HB_OPT_HELP }

static const struct hb_opt_choice xdp_modes[] = {
	{ "native", HB_XDP_NATIVE }, { "skb", HB_XDP_SKB }, { NULL, 0 },
};

static const struct hb_opt_choice tcp_paths[] = {
	{ "kernel", HB_TCP_KERNEL }, { "user", HB_TCP_USER }, { "keepalive", HB_TCP_KEEPALIVE },
	{ NULL, 0 },
};
/* clang-format on */

#define LOAD(f) HB_OPT_AT(struct hbctl_load_opts, f)

/* clang-format off */
static const struct hb_opt load_opts[] = {
	{ "dev", 'd', "IFACE", "NIC to attach the XDP program to", HB_OPT_STRING, LOAD(dev),
	  .required = true },
	{ "mode", 'm', NULL, "XDP mode; skb for drivers without native XDP", HB_OPT_CHOICE,
	  LOAD(mode), .choices = xdp_modes, .def.i = HB_XDP_NATIVE },
	{ "port", 'p', "N", "service port (TCP and UDP)", HB_OPT_UINT, LOAD(port),
	  .def.u = HB_DEFAULT_PORT, .umin = 1, .umax = 65535 },
	{ "mqtt-port", 0, "N", "also answer MQTT PINGREQs in the kernel on this TCP port (hbd "
	  "--mqtt-port; --tcp kernel or keepalive); 0: none",
	  HB_OPT_UINT, LOAD(mqtt_port), .umin = 0, .umax = 65535 },
	OPT_PIN(struct hbctl_load_opts),
	{ "cgroup", 'c', "PATH", "cgroup v2 directory for the sock_ops program", HB_OPT_STRING,
	  LOAD(cgroup), .def.s = HBK_DEFAULT_CGROUP },
	{ "then", 't', "FILE[:PROG]", "run this XDP program after hb_xdp on what hbeat passes "
	  "(shares the NIC where libxdp's dispatcher is unavailable)", HB_OPT_STRING, LOAD(then) },
	{ "tcp", 0, NULL, "who answers TCP heartbeats: hbd (user: no sk_skb or sock_ops program "
	  "is attached) or the sockmap verdict (kernel; docs/BENCHMARKS.md compares the two); or "
	  "none are sent (keepalive: sock_ops turns TCP keepalive on, the kernels track liveness; "
	  "docs/OPERATIONS.md)",
	  HB_OPT_CHOICE, LOAD(tcp), .choices = tcp_paths, .def.i = HBK_DEFAULT_TCP_PATH },
	{ "max-conns", 0, "N", "TCP connections the kernel path holds (conns, sockhash); more are "
	  "served by hbd in userspace", HB_OPT_UINT, LOAD(max_conns), .def.u = HB_MAX_CONNS,
	  .umin = 1, .umax = MAP_MAX_ENTRIES },
	{ "max-sessions", 0, "N", "UDP sessions XDP holds; hbd's --on-map-full says what happens "
	  "to more", HB_OPT_UINT, LOAD(max_sessions), .def.u = HB_MAX_SESSIONS, .umin = 1,
	  .umax = MAP_MAX_ENTRIES },
	OPT_JSON(struct hbctl_load_opts),
	OPT_HELP,
	{ 0 },
};

static const struct hb_opt unload_opts[] = {
	{ "dev", 'd', "IFACE", "NIC the XDP program was attached to", HB_OPT_STRING,
	  HB_OPT_AT(struct hbctl_unload_opts, dev), .required = true },
	OPT_PIN(struct hbctl_unload_opts),
	OPT_JSON(struct hbctl_unload_opts),
	OPT_HELP,
	{ 0 },
};

static const struct hb_opt show_opts[] = {
	OPT_JSON(struct hbctl_show_opts),
	OPT_PIN(struct hbctl_show_opts),
	OPT_HELP,
	{ 0 },
};

static const struct hb_opt_choice conn_states[] = {
	{ "new", HB_STATE_NEW }, { "authed", HB_STATE_AUTHED }, { "closing", HB_STATE_CLOSING },
	{ NULL, 0 },
};

static const struct hb_opt_choice transports[] = {
	{ "tcp", 0 }, { "udp", 1 }, { NULL, 0 },
};

static const struct hb_opt_choice sort_keys[] = {
	{ "device", HBCTL_SORT_DEVICE }, { "peer", HBCTL_SORT_PEER },
	{ "silent", HBCTL_SORT_SILENT }, { "pings", HBCTL_SORT_PINGS }, { NULL, 0 },
};
/* clang-format on */

#define CONNS(f) HB_OPT_AT(struct hbctl_conns_opts, f)

/* clang-format off */
static const struct hb_opt conns_opts[] = {
	OPT_JSON(struct hbctl_conns_opts),
	OPT_PIN(struct hbctl_conns_opts),
	{ "limit", 'n', "N", "print at most N rows of each kind (0: all)", HB_OPT_UINT,
	  CONNS(limit), .def.u = 0, .umin = 0, .umax = UINT32_MAX },
	{ "device", 'D', "ID", "only this device", HB_OPT_UINT, CONNS(device), .umin = 0,
	  .umax = UINT64_MAX, .expect = "a decimal device id", .def_text = "",
	  HB_OPT_GIVEN(struct hbctl_conns_opts, by_device) },
	{ "state", 's', NULL, "only connections/sessions in this state", HB_OPT_CHOICE,
	  CONNS(state), .choices = conn_states, .def.i = -1 },
	{ "transport", 't', NULL, "only this transport", HB_OPT_CHOICE, CONNS(transport),
	  .choices = transports, .def.i = -1 },
	{ "silent", 'S', "SECONDS", "only those with no heartbeat for more than SECONDS",
	  HB_OPT_DOUBLE, CONNS(silent_s), .def.d = -1, .dmin = 0, .dmax = 1e9, .def_text = "" },
	{ "sort", 'o', "KEY", "order by device, peer, silent (longest first), pings (most first)",
	  HB_OPT_CHOICE, CONNS(sort), .choices = sort_keys, .def.i = HBCTL_SORT_NONE },
	OPT_HELP,
	{ 0 },
};
/* clang-format on */

#define DEVICES(f) HB_OPT_AT(struct hbctl_devices_opts, f)

/* --secret is checked here, so a bad one is a usage error before the key store is touched. */
static int parse_secret(const char *arg, void *cfg)
{
	uint8_t secret[HB_SECRET_MAX];
	int len = hb_hex_decode(arg, secret, sizeof(secret));

	OPENSSL_cleanse(secret, sizeof(secret));
	if (len < HB_SECRET_MIN)
		return -EINVAL;
	((struct hbctl_devices_opts *)cfg)->secret = arg;
	return 0;
}

/* clang-format off */
static const struct hb_opt devices_opts[] = {
	{ "keys", 'k', "FILE", "the key store hbd --keys reads", HB_OPT_STRING, DEVICES(keys),
	  .def.s = HBCTL_DEFAULT_KEYS },
	{ "secret", 0, "HEX", "add: use this secret (16..64 bytes of hex) instead of a random one",
	  HB_OPT_CUSTOM, .parse = parse_secret, .expect = "16..64 bytes of hex" },
	{ "realm", 0, "NAME", "mqtt-password: the realm of the server (hbd --mqtt-realm)",
	  HB_OPT_STRING, DEVICES(mqtt_realm), .def.s = HB_MQTT_DEFAULT_REALM },
	{ "days", 0, "N", "mqtt-password: days it stays valid (at most hbd --mqtt-max-days)",
	  HB_OPT_UINT, DEVICES(mqtt_days), .def.u = HB_MQTT_DEFAULT_DAYS, .umin = 0, .umax = 3650 },
	OPT_CONTROL(struct hbctl_devices_opts),
	{ "no-reload", 0, NULL, "add/remove: do not ask hbd to reload the key store", HB_OPT_FLAG,
	  DEVICES(no_reload) },
	OPT_JSON(struct hbctl_devices_opts),
	OPT_HELP,
	{ 0 },
};

static const struct hb_opt send_opts[] = {
	OPT_CONTROL(struct hbctl_send_opts),
	{ "hex", 'x', NULL, "PAYLOAD is hex", HB_OPT_FLAG, HB_OPT_AT(struct hbctl_send_opts, hex),
	  .excludes = "base64" },
	{ "base64", 'b', NULL, "PAYLOAD is base64", HB_OPT_FLAG,
	  HB_OPT_AT(struct hbctl_send_opts, base64) },
	{ "timeout", 'T', "MS", "how long to wait for the device's ACK", HB_OPT_UINT,
	  HB_OPT_AT(struct hbctl_send_opts, timeout_ms), .def.u = SEND_TIMEOUT_MS, .umin = 1,
	  .umax = 600000 },
	OPT_JSON(struct hbctl_send_opts),
	OPT_HELP,
	{ 0 },
};

static const struct hb_opt events_opts[] = {
	OPT_CONTROL(struct hbctl_events_opts),
	{ "count", 'n', "N", "exit after N events (0: run until hbd goes away)", HB_OPT_UINT,
	  HB_OPT_AT(struct hbctl_events_opts, count), .def.u = 0, .umin = 0, .umax = UINT32_MAX },
	OPT_JSON(struct hbctl_events_opts),
	OPT_HELP,
	{ 0 },
};

#define FLEET(f) HB_OPT_AT(struct hbctl_fleet_opts, f)
static const struct hb_opt fleet_opts[] = {
	{ "nats", 'N', "URL[,URL...]", "NATS servers, as hbd --nats", HB_OPT_STRING, FLEET(nats),
	  .def.s = "nats://127.0.0.1:4222" },
	{ "nats-creds", 0, "FILE", "NATS user credentials file", HB_OPT_STRING, FLEET(auth.creds),
	  .excludes = "nats-user" },
	{ "nats-user", 0, "USER", "NATS user name (with --nats-password-file)", HB_OPT_STRING,
	  FLEET(auth.user) },
	{ "nats-password-file", 0, "FILE", "the NATS password, on the file's first line",
	  HB_OPT_STRING, FLEET(auth.password_file) },
	{ "nats-ca", 0, "FILE", "TLS to NATS: the CA certificates (PEM) the servers' must chain "
	  "to", HB_OPT_STRING, FLEET(auth.ca) },
	{ "nats-cert", 0, "FILE", "TLS to NATS: a client certificate (PEM), with --nats-key",
	  HB_OPT_STRING, FLEET(auth.cert) },
	{ "nats-key", 0, "FILE", "the private key of --nats-cert (PEM)", HB_OPT_STRING,
	  FLEET(auth.key) },
	{ "timeout", 'T', "MS", "send: how long to wait for each answer", HB_OPT_UINT,
	  FLEET(timeout_ms), .def.u = SEND_TIMEOUT_MS + 1000, .umin = 1, .umax = 600000 },
	OPT_JSON(struct hbctl_fleet_opts),
	OPT_HELP,
	{ 0 },
};
/* clang-format on */

/* Room for any command's options. */
union hbctl_opts {
	struct hbctl_load_opts load;
	struct hbctl_unload_opts unload;
	struct hbctl_show_opts show;
	struct hbctl_conns_opts conns;
	struct hbctl_devices_opts devices;
	struct hbctl_send_opts send;
	struct hbctl_events_opts events;
	struct hbctl_fleet_opts fleet;
};

enum hbctl_env {
	ENV_NONE = 0, /* talks to hbd or edits files: no BPF environment needed */
	ENV_PINS, /* reads pinned objects: root and bpffs */
	ENV_FULL, /* load/unload: also BTF and the kernel features */
};

struct hbctl_cmd {
	const char *name;
	const char *summary;
	const struct hb_opt *opts;
	int (*run)(const void *opts, int argc, char **argv);
	enum hbctl_env env;
	size_t pin_off; /* ENV_PINS, ENV_FULL: offsetof the pin directory in the options */
	const char *args; /* positional arguments, for the usage line */
	int min_args, max_args;
	const char *more; /* extra --help text, or NULL */
};

#define PIN_OFF(T) offsetof(T, pin_path)

static const struct hbctl_cmd cmds[] = {
	{ "load", "attach hbeat's BPF programs and pin its maps", load_opts, hbctl_do_load,
	  ENV_FULL, PIN_OFF(struct hbctl_load_opts), NULL, 0, 0, NULL },
	{ "unload", "remove everything load made", unload_opts, hbctl_do_unload, ENV_FULL,
	  PIN_OFF(struct hbctl_unload_opts), NULL, 0, 0, NULL },
	{ "status", "what is loaded where, map fill levels, daemon liveness", show_opts,
	  hbctl_do_status, ENV_PINS, PIN_OFF(struct hbctl_show_opts), NULL, 0, 0, NULL },
	{ "conns", "TCP connections and UDP sessions in the kernel's maps", conns_opts,
	  hbctl_do_conns, ENV_PINS, PIN_OFF(struct hbctl_conns_opts), NULL, 0, 0,
	  "Filters combine (all must hold); --limit applies after filtering and sorting.\n" },
	{ "stats", "kernel and daemon counters", show_opts, hbctl_do_stats, ENV_PINS,
	  PIN_OFF(struct hbctl_show_opts), NULL, 0, 0, NULL },
	{ "devices", "provision and revoke devices in hbd's key store", devices_opts,
	  hbctl_do_devices, ENV_NONE, 0, "list | add ID | remove ID | mqtt-password ID", 1, 2,
	  "  list         the devices, ranges and revocations in the key store (never secrets)\n"
	  "  add ID       give device ID a fresh random secret, printed once for the device\n"
	  "  remove ID    revoke device ID: its line goes (or, inside a derive range, an\n"
	  "               'ID revoked' line is added); hbd reloads and cuts its live session\n"
	  "  mqtt-password ID   the password device ID gives in an MQTT CONNECT (user name: ID)\n"
	  "               for hbd --mqtt-realm REALM, valid --days days from today (docs/MQTT.md)\n"
	  "The file is rewritten atomically (temp file, fsync, rename) with mode 0600 under a\n"
	  "lock (FILE.lock), and hbd is asked to reload it through its control socket.\n" },
	{ "send", "send a downlink message to a connected device and wait for its ACK", send_opts,
	  hbctl_do_send, ENV_NONE, 0, "DEVICE PAYLOAD", 2, 2,
	  "PAYLOAD is text unless --hex or --base64 says otherwise (1..1024 bytes).\n"
	  "Exit status 0 once the device acknowledged it, 3 if it was offline, did not answer\n"
	  "in time or its session ended.\n" },
	{ "events", "follow presence changes: online, offline, expired, revoked, ...", events_opts,
	  hbctl_do_events, ENV_NONE, 0, NULL, 0, 0,
	  "One line per event as hbd reports it (--json: the control socket's JSON lines).\n" },
	{ "fleet", "fleet mode (hbd --nats): nodes, presence, downlink and DATA in NATS",
	  fleet_opts, hbctl_do_fleet, ENV_NONE, 0,
	  "status | presence [ID] | send PAYLOAD ID... | data", 1, HB_OPT_ARGS_ANY,
	  "  status              the live nodes, their versions and devices; the stream's size\n"
	  "  presence [ID]       device ID's entry in hbeat_presence; without ID all of them,\n"
	  "                      one JSON line each\n"
	  "  send PAYLOAD ID...  a downlink request to each device in turn (hbeat.down.ID); one\n"
	  "                      JSON line each with the status and the round trip from here\n"
	  "  data                read HBEAT_DATA once: messages, distinct records, devices\n"
	  "Exit status 3 if NATS cannot be reached, an entry is missing or a downlink failed.\n" },
};

#define NCMDS (sizeof(cmds) / sizeof(cmds[0]))

/* hbctl's own options, before the command. */
struct hbctl_global {
	bool verbose;
};

/* clang-format off */
static const struct hb_opt global_opts[] = {
	{ "verbose", 'v', NULL, "debug messages, libbpf's included", HB_OPT_FLAG,
	  HB_OPT_AT(struct hbctl_global, verbose) },
	OPT_HELP,
	{ 0 },
};
/* clang-format on */

static const char global_epilog[] =
	"load, unload, status, conns and stats work on the pinned BPF objects (root,\n"
	"bpffs); devices, send and events on hbd's key store and control socket.\n"
	"\n"
	"Exit status:\n"
	"  0  success\n"
	"  1  usage error (unknown command or option, missing or bad value)\n"
	"  2  environment or kernel feature missing (not root, no bpffs, no kernel BTF,\n"
	"     no cgroup v2, no such NIC, kernel lacks a program/map type, helper or kfunc)\n"
	"  3  the operation failed (load/attach/pin error, already loaded, not loaded, load\n"
	"     while an hbd serves the pin directory)\n";

static const char global_intro[] =
	"Loads, inspects and removes the BPF side of hbeat: XDP on a NIC for UDP heartbeats,\n"
	"sockhash + stream parser/verdict and sock_ops for TCP heartbeats, maps pinned under\n" HB_PIN_DEFAULT
	".\n\nCommands:\n";

/* The top-level help's text before its option list: what hbctl is, and the commands. */
static void global_about(char *buf, size_t cap)
{
	size_t n = (size_t)snprintf(buf, cap, "%s", global_intro);

	for (size_t i = 0; i < NCMDS && n < cap; i++)
		n += (size_t)snprintf(buf + n, cap - n, "  %-8s %s\n", cmds[i].name,
				      cmds[i].summary);
}

/* Parses a command's options into o; the positional arguments start at argv[*first]. */
static int parse_cmd(const struct hbctl_cmd *c, int argc, char **argv, union hbctl_opts *o,
		     int *first)
{
	char name[32], synopsis[64], about[2048];
	const struct hb_opt_prog p = {
		.name = name,
		.synopsis = synopsis,
		.about = about,
		.opts = c->opts,
		.min_args = c->min_args,
		.max_args = c->max_args,
		.args = c->args,
	};

	snprintf(name, sizeof(name), "hbctl %s", c->name);
	snprintf(synopsis, sizeof(synopsis), "[options]%s%s", c->args ? " " : "",
		 c->args ? c->args : "");
	snprintf(about, sizeof(about), "%s.\n%s%s", c->summary, c->more ? "\n" : "",
		 c->more ? c->more : "");
	memset(o, 0, sizeof(*o));
	hb_opt_defaults(c->opts, o);
	return hb_opt_parse(&p, argc, argv, o, first);
}

int hbctl_main(int argc, char **argv)
{
	char about[2048];
	const struct hb_opt_prog top = {
		.name = "hbctl",
		.synopsis = "[-v|--verbose] COMMAND [options]\n       hbctl COMMAND --help",
		.about = about,
		.epilog = global_epilog,
		.opts = global_opts,
		.max_args = HB_OPT_ARGS_ANY,
		.stop_at_arg = true, /* the command's own options follow it */
	};
	const struct hbctl_cmd *c = NULL;
	struct hbctl_global g = { false };
	union hbctl_opts o;
	int rc, i, first;

	hb_log_init("hbctl", HB_LOG_INFO);
	global_about(about, sizeof(about));
	rc = hb_opt_parse(&top, argc, argv, &g, &i);
	if (rc)
		return rc > 0 ? HBCTL_OK : HBCTL_USAGE;
	if (g.verbose)
		hb_log_set_level(HB_LOG_DEBUG);
	if (i >= argc) {
		hb_opt_help(&top, stderr);
		return HBCTL_USAGE;
	}
	for (size_t k = 0; k < NCMDS; k++)
		if (!strcmp(argv[i], cmds[k].name))
			c = &cmds[k];
	if (!c) {
		hb_opt_error(&top, "unknown command '%s'", argv[i]);
		return HBCTL_USAGE;
	}
	argc -= i;
	argv += i;
	rc = parse_cmd(c, argc, argv, &o, &first);
	if (rc)
		return rc > 0 ? HBCTL_OK : HBCTL_USAGE;
	argc -= first;
	argv += first;
	hbk_route_logs();
	if (c->env == ENV_NONE)
		return c->run(&o, argc, argv);

	/* Environment first, for every command on pinned BPF objects. */
	if (hbe_check_root())
		return HBCTL_ENV;
	{
		const char *pin = *(const char **)((char *)&o + c->pin_off);
		bool mounted;

		if (hbe_ensure_bpffs(pin, &mounted))
			return HBCTL_ENV;
		if (mounted)
			hb_info("bpffs was not mounted; mounted it at /sys/fs/bpf");
	}
	if (c->env == ENV_FULL && (hbe_check_btf() || hbe_probe_features()))
		return HBCTL_ENV;
	return c->run(&o, argc, argv);
}

/* ------------------------------------------------------------------------------------------ */
/* load                                                                                       */

static __u32 prog_id(int fd)
{
	struct bpf_prog_info info = { 0 };
	__u32 len = sizeof(info);

	return fd >= 0 && !bpf_obj_get_info_by_fd(fd, &info, &len) ? info.id : 0;
}

static __u32 link_id(struct bpf_link *l)
{
	struct bpf_link_info info = { 0 };
	__u32 len = sizeof(info);

	return l && !bpf_obj_get_info_by_fd(bpf_link__fd(l), &info, &len) ? info.id : 0;
}

static const char *how_str(enum hbk_xdp_how how)
{
	switch (how) {
	case HBK_XDP_DISPATCHER:
		return "libxdp dispatcher";
	case HBK_XDP_LIBXDP_LEGACY:
		return "libxdp, single program (no dispatcher)";
	case HBK_XDP_LINK:
		return "plain XDP bpf_link";
	default:
		return "none";
	}
}

/* The same, as hbctl status --json names it. */
static const char *how_id(enum hbk_xdp_how how)
{
	switch (how) {
	case HBK_XDP_DISPATCHER:
		return "libxdp-dispatcher";
	case HBK_XDP_LIBXDP_LEGACY:
		return "libxdp-single";
	case HBK_XDP_LINK:
		return "bpf_link";
	default:
		return "none";
	}
}

/* hbk_lock, with a message if it fails. */
static int take_lock(const char *pin)
{
	char path[PATH_MAX];
	int fd = hbk_lock(pin);

	if (fd < 0) {
		if (hbk_lock_path(pin, path, sizeof(path)))
			snprintf(path, sizeof(path), "no lock file for it");
		hb_err("taking the lock of %s (%s): %s; is /run/lock writable?", pin, path,
		       strerror(-fd));
	}
	return fd;
}

int hbctl_do_load(const void *opts, int argc, char **argv)
{
	const struct hbctl_load_opts *lo = opts;
	const char *dev = lo->dev, *mode_s = hb_opt_choice_word(xdp_modes, lo->mode);
	const char *pin = lo->pin_path, *cg = lo->cgroup;
	const char *then = lo->then, *tcp_s = hb_opt_choice_word(tcp_paths, lo->tcp);
	struct hbk_opts o = { .xdp_defer_load = true,
			      .port = lo->port,
			      .mqtt_port = lo->mqtt_port,
			      .tcp_path = lo->tcp,
			      .max_conns = lo->max_conns,
			      .max_sessions = lo->max_sessions };
	__u32 then_id = 0;
	enum hb_xdp_mode mode = lo->mode;
	struct hbk *h = NULL;
	int ifindex, lock, err, holder, rc = HBCTL_FAIL;

	if (lo->mqtt_port && lo->tcp == HB_TCP_USER) {
		hb_err("--mqtt-port has the kernel answer MQTT PINGREQs, which takes --tcp kernel; "
		       "with --tcp user (the default) hbd answers them: give only hbd --mqtt-port");
		return HBCTL_USAGE;
	}
	if (hbe_check_cgroup2(cg))
		return HBCTL_ENV;
	ifindex = if_nametoindex(dev);
	if (!ifindex) {
		hb_err("no such NIC '%s' in this network namespace (ip -br link lists them)", dev);
		return HBCTL_ENV;
	}
	err = hbk_netns_cookie(&o.netns_cookie);
	if (err) {
		hb_err("reading this network namespace's cookie (SO_NETNS_COOKIE, Linux >= 5.14): %s",
		       strerror(-err));
		return HBCTL_ENV;
	}

	lock = take_lock(pin);
	if (lock < 0)
		return HBCTL_FAIL;
	/* hbd opens the maps and reads the TCP mode (and, in keepalive mode, writes its timing)
	 * once, at start: a load under a running hbd would serve maps it never sees, and a new
	 * mode would leave its connections tracked by neither */
	err = hbk_daemon_running(pin, &holder);
	if (err > 0) {
		char pid[24] = "";

		if (holder > 0)
			snprintf(pid, sizeof(pid), " (pid %d)", holder);
		hb_err("hbd%s serves %s and reads the loaded programs and their TCP mode only when it "
		       "starts: stop hbd first (systemctl stop hbd), then load, then start hbd",
		       pid, pin);
		goto out;
	}
	if (err < 0)
		hb_warn("cannot tell whether an hbd serves %s (/proc/locks: %s); make sure none does",
			pin, strerror(-err));
	if (!access(pin, F_OK)) {
		char p[PATH_MAX];

		if (!hb_pin_path(p, sizeof(p), pin, HB_MAP_CONFIG) && !access(p, F_OK)) {
			hb_err("hbeat is already loaded (pins in %s); run: hbctl unload --dev %s%s%s",
			       pin, dev, strcmp(pin, HB_PIN_DEFAULT) ? " --pin-path " : "",
			       strcmp(pin, HB_PIN_DEFAULT) ? pin : "");
			goto out;
		}
	}

	if ((err = hbk_open(&h, &o)))
		goto out;
	/* parser+verdict before sock_ops: a socket takes the map's programs when inserted */
	if (o.tcp_path == HB_TCP_KERNEL && (err = hbk_attach_sockmap(h)))
		goto out;
	if (o.tcp_path != HB_TCP_USER && (err = hbk_attach_sockops(h, cg)))
		goto out;
	err = hbk_attach_xdp(h, ifindex, mode);
	if (err) {
		if (err == -EOPNOTSUPP && mode == HB_XDP_NATIVE)
			hb_err("the driver of %s lacks native XDP; try: hbctl load --dev %s --mode skb",
			       dev, dev);
		else if (err == -EEXIST)
			hb_err("%s already runs hb_xdp (another hbeat instance?); run: hbctl unload "
			       "--dev %s",
			       dev, dev);
		else if (err == -EBUSY)
			hb_err("%s already has an XDP program that is not multi-program aware (not "
			       "under a libxdp dispatcher), so hbeat cannot join it; detach it (ip link "
			       "set dev %s xdp off, or xdp-loader unload %s --all) and either load it "
			       "again through libxdp after hbeat, or hand its object file to hbeat: "
			       "hbctl load --dev %s --then FILE[:PROG]",
			       dev, dev, dev, dev);
		else
			hb_err("attaching XDP to %s failed: %s", dev, strerror(-err));
		goto out;
	}
	if (then) {
		char file[PATH_MAX], *colon;
		const char *prog = NULL;

		snprintf(file, sizeof(file), "%s", then);
		colon = strrchr(file, ':');
		if (colon && !strchr(colon, '/')) {
			*colon = 0;
			prog = colon + 1;
		}
		if ((err = hbk_chain_xdp(h, file, prog, &then_id)))
			goto out;
	}
	if ((err = hbk_write_config(h, ifindex, dev, mode)))
		goto out;
	if ((err = hbk_pin(h, pin)))
		goto out;

	if (lo->json) {
		bool kernel = o.tcp_path == HB_TCP_KERNEL;
		json_int_t parser = kernel ? prog_id(hbk_prog_fd(h, "hb_parser")) : 0;
		json_int_t verdict = kernel ? prog_id(hbk_prog_fd(h, "hb_verdict")) : 0;
		json_int_t sockops =
			o.tcp_path != HB_TCP_USER ? prog_id(hbk_prog_fd(h, "hb_sockops")) : 0;

		hb_json_print(stdout,
			      json_pack("{s:b,s:o,s:I,s:I,s:o,s:{s:I,s:s,s:s,s:I},s:s,s:I,s:I,s:I}",
					"loaded", 1, "dev", hb_json_str(dev), "ifindex",
					(json_int_t)ifindex, "port", (json_int_t)o.port, "pin_path",
					hb_json_str(pin), "xdp", "prog_id",
					(json_int_t)prog_id(hbk_prog_fd(h, HBK_PROG_XDP)), "mode",
					mode_s, "attach", how_id(h->xdp_how), "then_prog_id",
					(json_int_t)then_id, "tcp", tcp_s, "parser_id", parser,
					"verdict_id", verdict, "sockops_id", sockops));
		rc = HBCTL_OK;
		goto out;
	}
	printf("hbeat loaded on %s (ifindex %d), port %u, pins in %s\n", dev, ifindex, o.port, pin);
	printf("  xdp      hb_xdp id %u, %s mode, attached via %s\n",
	       prog_id(hbk_prog_fd(h, HBK_PROG_XDP)), mode_s, how_str(h->xdp_how));
	if (o.tcp_path == HB_TCP_USER) {
		printf("  tcp      heartbeats answered by hbd in userspace (--tcp user): no sockmap, no sock_ops\n");
	} else {
		if (o.tcp_path == HB_TCP_KERNEL)
			printf("  sockhash hb_parser id %u, hb_verdict id %u\n",
			       prog_id(hbk_prog_fd(h, "hb_parser")),
			       prog_id(hbk_prog_fd(h, "hb_verdict")));
		else
			printf("  tcp      liveness by TCP keepalive (--tcp keepalive): no sockmap; "
			       "sock_ops sets the options with hbd's timing\n");
		printf("  sockops  hb_sockops id %u on %s (link id %u, pinned)\n",
		       prog_id(hbk_prog_fd(h, "hb_sockops")), cg, link_id(h->sockops_link));
	}
	if (then)
		printf("  then     %s (id %u) runs after hb_xdp on what hbeat passes\n", then,
		       then_id);
	rc = HBCTL_OK;
out:
	if (rc != HBCTL_OK && h)
		hb_err("load failed; everything it attached has been removed again");
	hbk_close(h); /* unpinned on failure: detaches all it attached */
	hbk_unlock(lock);
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* unload                                                                                     */

int hbctl_do_unload(const void *opts, int argc, char **argv)
{
	const struct hbctl_unload_opts *uo = opts;
	const char *dev = uo->dev, *pin = uo->pin_path;
	struct hbk_unload_report rep;
	int lock, err, ifindex;

	ifindex = if_nametoindex(dev);
	if (!ifindex)
		hb_warn("no NIC named '%s' here; removing the rest", dev);

	lock = take_lock(pin);
	if (lock < 0)
		return HBCTL_FAIL;
	err = hbk_unload(pin, ifindex ? dev : NULL, &rep);
	if (err == -ENOENT) {
		/* Nothing pinned. A crashed load may still have left hb_xdp on the NIC. */
		bool stray = ifindex && hbk_detach_xdp_ifindex(ifindex) == 0;

		if (uo->json) {
			hb_json_print(stdout, json_pack("{s:b,s:b}", "loaded", 0,
							"stray_xdp_removed", stray));
		} else {
			printf("hbeat is not loaded (no pins in %s)\n", pin);
			if (stray)
				printf("removed a stray hb_xdp from %s\n", dev);
		}
		hbk_unlock(lock);
		return HBCTL_OK;
	}
	if (uo->json) {
		/* tcp "user": there was nothing to detach */
		hb_json_print(stdout, json_pack("{s:b,s:b,s:o*,s:b,s:b,s:s,s:i,s:b}", "loaded", 1,
						"xdp_detached", rep.xdp_detached, "xdp_note",
						rep.xdp_detached ? NULL : hb_json_str(rep.xdp_note),
						"sockops_detached", rep.sockops_detached,
						"sockmap_detached", rep.sockmap_detached, "tcp",
						hbk_tcp_path_str(rep.tcp_path), "pins_removed",
						rep.pins_removed, "pin_dir_removed",
						access(pin, F_OK) != 0));
	} else if (rep.xdp_detached)
		printf("detached hb_xdp from %s\n", dev);
	if (!uo->json) {
		if (!rep.xdp_detached)
			printf("hb_xdp not detached: %s\n",
			       rep.xdp_note[0] ? rep.xdp_note : "unknown reason");
		if (rep.tcp_user) {
			printf("no TCP programs to detach (loaded with --tcp user)\n");
		} else {
			printf("%s hb_sockops\n",
			       rep.sockops_detached ? "detached" : "could not detach");
			if (rep.tcp_path == HB_TCP_KERNEL)
				printf("%s hb_parser/hb_verdict\n",
				       rep.sockmap_detached ? "detached" : "could not detach");
		}
		printf("removed %d pins%s\n", rep.pins_removed,
		       access(pin, F_OK) ? " and the pin directory" : "");
	}
	hbk_unlock(lock);
	if (err) {
		hb_err("unload incomplete: %s", strerror(-err));
		return HBCTL_FAIL;
	}
	return HBCTL_OK;
}
