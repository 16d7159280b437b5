// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbctl: command dispatch, option tables, and the load/unload commands. */
#include "hbctl.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hb_bpf.h"
#include "hb_env.h"
#include "json_out.h"
#include "log.h"

/* ------------------------------------------------------------------------------------------ */
/* Options                                                                                    */

#define OPT_PIN { "pin-path", 0, "DIR", "pin directory of maps and links", HB_PIN_DEFAULT }
#define OPT_JSON { "json", 'j', NULL, "print one line of JSON instead of a table", NULL }
#define OPT_HELP { "help", 'h', NULL, "show this help", NULL }

static const struct hbctl_opt load_opts[] = {
	{ "dev", 'd', "IFACE", "NIC to attach the XDP program to (required)", NULL },
	{ "mode", 'm', "native|skb", "XDP mode; skb for drivers without native XDP", "native" },
	{ "port", 'p', "N", "service port (TCP and UDP)", "7600" },
	OPT_PIN,
	{ "cgroup", 'c', "PATH", "cgroup v2 directory for the sock_ops program", HBK_DEFAULT_CGROUP },
	{ "then", 't', "FILE[:PROG]",
	  "run this XDP program after hb_xdp on what hbeat passes (shares the NIC where libxdp's "
	  "dispatcher is unavailable)", NULL },
	{ "tcp", 0, "kernel|user", "who answers TCP heartbeats: the sockmap verdict (kernel) or hbd "
	  "(user: no sk_skb or sock_ops program is attached; docs/BENCHMARKS.md compares the two)",
	  HBK_DEFAULT_TCP_PATH },
	{ "max-conns", 0, "N", "TCP connections the kernel path holds (conns, sockhash); more are "
	  "served by hbd in userspace", "1048576" },
	{ "max-sessions", 0, "N", "UDP sessions XDP holds; hbd's --on-map-full says what happens "
	  "to more", "1048576" },
	OPT_JSON,
	OPT_HELP,
	{ 0 },
};

static const struct hbctl_opt unload_opts[] = {
	{ "dev", 'd', "IFACE", "NIC the XDP program was attached to (required)", NULL },
	OPT_PIN,
	OPT_JSON,
	OPT_HELP,
	{ 0 },
};

static const struct hbctl_opt show_opts[] = {
	OPT_JSON,
	OPT_PIN,
	OPT_HELP,
	{ 0 },
};

static const struct hbctl_opt conns_opts[] = {
	OPT_JSON,
	OPT_PIN,
	{ "limit", 'n', "N", "print at most N rows of each kind (0: all)", "0" },
	{ "device", 'D', "ID", "only this device", NULL },
	{ "state", 's', "new|authed|closing", "only connections/sessions in this state", NULL },
	{ "transport", 't', "tcp|udp", "only this transport", NULL },
	{ "silent", 'S', "SECONDS", "only those with no heartbeat for more than SECONDS", NULL },
	{ "sort", 'o', "KEY", "order by device, peer, silent (longest first), pings (most first)",
	  NULL },
	OPT_HELP,
	{ 0 },
};

#define OPT_CONTROL { "control", 'c', "PATH", "hbd's control socket (hbd --control)", HBCTL_DEFAULT_CONTROL }

static const struct hbctl_opt devices_opts[] = {
	{ "keys", 'k', "FILE", "the key store hbd --keys reads", HBCTL_DEFAULT_KEYS },
	{ "secret", 0, "HEX", "add: use this secret (16..64 bytes of hex) instead of a random one",
	  NULL },
	OPT_CONTROL,
	{ "no-reload", 0, NULL, "add/remove: do not ask hbd to reload the key store", NULL },
	OPT_JSON,
	OPT_HELP,
	{ 0 },
};

static const struct hbctl_opt send_opts[] = {
	OPT_CONTROL,
	{ "hex", 'x', NULL, "PAYLOAD is hex", NULL },
	{ "base64", 'b', NULL, "PAYLOAD is base64", NULL },
	{ "timeout", 'T', "MS", "how long to wait for the device's ACK", "5000" },
	OPT_JSON,
	OPT_HELP,
	{ 0 },
};

static const struct hbctl_opt events_opts[] = {
	OPT_CONTROL,
	{ "count", 'n', "N", "exit after N events (0: run until hbd goes away)", "0" },
	OPT_JSON,
	OPT_HELP,
	{ 0 },
};

enum hbctl_env {
	ENV_NONE = 0, /* talks to hbd or edits files: no BPF environment needed */
	ENV_PINS, /* reads pinned objects: root and bpffs */
	ENV_FULL, /* load/unload: also BTF and the kernel features */
};

struct hbctl_cmd {
	const char *name;
	const char *summary;
	const struct hbctl_opt *opts;
	int (*run)(const struct hbctl_args *a);
	enum hbctl_env env;
	const char *args; /* positional arguments, for the usage line */
	int min_args, max_args;
	const char *more; /* extra --help text, or NULL */
};

static const struct hbctl_cmd cmds[] = {
	{ "load", "attach hbeat's BPF programs and pin its maps", load_opts, hbctl_do_load, ENV_FULL,
	  NULL, 0, 0, NULL },
	{ "unload", "remove everything load made", unload_opts, hbctl_do_unload, ENV_FULL, NULL, 0,
	  0, NULL },
	{ "status", "what is loaded where, map fill levels, daemon liveness", show_opts,
	  hbctl_do_status, ENV_PINS, NULL, 0, 0, NULL },
	{ "conns", "TCP connections and UDP sessions the kernel knows", conns_opts, hbctl_do_conns,
	  ENV_PINS, NULL, 0, 0,
	  "Filters combine (all must hold); --limit applies after filtering and sorting.\n" },
	{ "stats", "kernel and daemon counters", show_opts, hbctl_do_stats, ENV_PINS, NULL, 0, 0,
	  NULL },
	{ "devices", "provision and revoke devices in hbd's key store", devices_opts,
	  hbctl_do_devices, ENV_NONE, "list | add ID | remove ID", 1, 2,
	  "  list         the devices, ranges and revocations in the key store (never secrets)\n"
	  "  add ID       give device ID a fresh random secret, printed once for the device\n"
	  "  remove ID    revoke device ID: its line goes (or, inside a derive range, an\n"
	  "               'ID revoked' line is added); hbd reloads and cuts its live session\n"
	  "The file is rewritten atomically (temp file, fsync, rename) with mode 0600 under a\n"
	  "lock (FILE.lock), and hbd is asked to reload it through its control socket.\n" },
	{ "send", "send a downlink message to a connected device and wait for its ACK", send_opts,
	  hbctl_do_send, ENV_NONE, "DEVICE PAYLOAD", 2, 2,
	  "PAYLOAD is text unless --hex or --base64 says otherwise (1..1024 bytes).\n"
	  "Exit status 0 once the device acknowledged it, 3 if it was offline, did not answer\n"
	  "in time or its session ended.\n" },
	{ "events", "follow presence changes: online, offline, expired, revoked, ...", events_opts,
	  hbctl_do_events, ENV_NONE, NULL, 0, 0,
	  "One line per event as hbd reports it (--json: the control socket's JSON lines).\n" },
};

const char *hbctl_arg(const struct hbctl_args *a, const char *name)
{
	for (int i = 0; a->opts[i].name; i++)
		if (!strcmp(a->opts[i].name, name))
			return a->val[i] ? a->val[i] : a->opts[i].def;
	return NULL;
}

bool hbctl_flag(const struct hbctl_args *a, const char *name)
{
	for (int i = 0; a->opts[i].name; i++)
		if (!strcmp(a->opts[i].name, name))
			return a->val[i] != NULL;
	return false;
}

static void cmd_usage(const struct hbctl_cmd *c, FILE *f)
{
	fprintf(f, "Usage: hbctl %s [options]%s%s\n\n%s.\n", c->name, c->args ? " " : "",
		c->args ? c->args : "", c->summary);
	if (c->more)
		fprintf(f, "\n%s", c->more);
	fprintf(f, "\nOptions:\n");
	for (int i = 0; c->opts[i].name; i++) {
		const struct hbctl_opt *o = &c->opts[i];
		char left[48];

		if (o->short_name)
			snprintf(left, sizeof(left), "-%c, --%s%s%s", o->short_name, o->name,
				 o->metavar ? " " : "", o->metavar ? o->metavar : "");
		else
			snprintf(left, sizeof(left), "    --%s%s%s", o->name, o->metavar ? " " : "",
				 o->metavar ? o->metavar : "");
		fprintf(f, "  %-28s %s", left, o->help);
		if (o->def)
			fprintf(f, " (default %s)", o->def);
		fputc('\n', f);
	}
}

static void usage(FILE *f)
{
	fprintf(f, "Usage: hbctl [-v|--verbose] COMMAND [options]\n"
		   "       hbctl COMMAND --help\n\n"
		   "Loads, inspects and removes the BPF side of hbeat: XDP on a NIC for UDP heartbeats,\n"
		   "sockhash + stream parser/verdict and sock_ops for TCP heartbeats, maps pinned under\n"
		   "%s.\n\nCommands:\n", HB_PIN_DEFAULT);
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		fprintf(f, "  %-8s %s\n", cmds[i].name, cmds[i].summary);
	fprintf(f, "\nload, unload, status, conns and stats work on the pinned BPF objects (root,\n"
		   "bpffs); devices, send and events on hbd's key store and control socket.\n");
	fprintf(f, "\nExit status:\n"
		   "  0  success\n"
		   "  1  usage error (unknown command or option, missing or bad value)\n"
		   "  2  environment or kernel feature missing (not root, no bpffs, no kernel BTF,\n"
		   "     no cgroup v2, no such NIC, kernel lacks a program/map type, helper or kfunc)\n"
		   "  3  the operation failed (load/attach/pin error, already loaded, not loaded)\n");
}

/* getopt_long over a command's table; values land in a->val by table index. */
static int parse(const struct hbctl_cmd *c, int argc, char **argv, struct hbctl_args *a)
{
	struct option lo[HBCTL_MAX_OPTS + 1];
	char so[2 * HBCTL_MAX_OPTS + 2];
	int n = 0, s = 0, opt, idx;

	memset(a, 0, sizeof(*a));
	a->opts = c->opts;
	so[s++] = ':'; /* report a missing argument as ':' */
	for (; c->opts[n].name; n++) {
		lo[n] = (struct option){ c->opts[n].name, c->opts[n].metavar ? required_argument
									    : no_argument, NULL, 0 };
		if (c->opts[n].short_name) {
			so[s++] = c->opts[n].short_name;
			if (c->opts[n].metavar)
				so[s++] = ':';
		}
	}
	lo[n] = (struct option){ 0 };
	so[s] = 0;
	optind = 1;
	opterr = 0;
	/* '+' would stop at the first positional; GNU permutation lets options follow them */
	while ((opt = getopt_long(argc, argv, so, lo, &idx)) != -1) {
		if (opt == '?' || opt == ':') {
			fprintf(stderr, "hbctl %s: %s option '%s'\n", c->name,
				opt == '?' ? "unknown" : "missing the argument of", argv[optind - 1]);
			cmd_usage(c, stderr);
			return -EINVAL;
		}
		if (opt != 0) /* a short option: find its table entry */
			for (idx = 0; idx < n && c->opts[idx].short_name != opt; idx++)
				;
		a->val[idx] = optarg ? optarg : "1";
	}
	for (; optind < argc; optind++) {
		if (a->argc == c->max_args) {
			fprintf(stderr, "hbctl %s: unexpected argument '%s'\n", c->name, argv[optind]);
			cmd_usage(c, stderr);
			return -EINVAL;
		}
		a->argv[a->argc++] = argv[optind];
	}
	if (a->argc < c->min_args && !hbctl_flag(a, "help")) {
		fprintf(stderr, "hbctl %s: expected %s\n", c->name, c->args);
		cmd_usage(c, stderr);
		return -EINVAL;
	}
	return 0;
}

int hbctl_main(int argc, char **argv)
{
	const struct hbctl_cmd *c = NULL;
	struct hbctl_args a;
	int i = 1;

	hb_log_init("hbctl", HB_LOG_INFO);
	for (; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--verbose")) {
			hb_log_set_level(HB_LOG_DEBUG);
		} else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout);
			return HBCTL_OK;
		} else {
			fprintf(stderr, "hbctl: unknown option '%s'\n", argv[i]);
			usage(stderr);
			return HBCTL_USAGE;
		}
	}
	if (i >= argc) {
		usage(stderr);
		return HBCTL_USAGE;
	}
	for (size_t k = 0; k < sizeof(cmds) / sizeof(cmds[0]); k++)
		if (!strcmp(argv[i], cmds[k].name))
			c = &cmds[k];
	if (!c) {
		fprintf(stderr, "hbctl: unknown command '%s'\n", argv[i]);
		usage(stderr);
		return HBCTL_USAGE;
	}
	if (parse(c, argc - i, argv + i, &a))
		return HBCTL_USAGE;
	if (hbctl_flag(&a, "help")) {
		cmd_usage(c, stdout);
		return HBCTL_OK;
	}
	hbk_route_logs();
	if (c->env == ENV_NONE)
		return c->run(&a);

	/* Environment first, for every command on pinned BPF objects. */
	if (hbe_check_root())
		return HBCTL_ENV;
	{
		bool mounted;

		if (hbe_ensure_bpffs(hbctl_arg(&a, "pin-path"), &mounted))
			return HBCTL_ENV;
		if (mounted)
			hb_info("bpffs was not mounted; mounted it at /sys/fs/bpf");
	}
	if (c->env == ENV_FULL && (hbe_check_btf() || hbe_probe_features()))
		return HBCTL_ENV;
	return c->run(&a);
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
	case HBK_XDP_DISPATCHER: return "libxdp dispatcher";
	case HBK_XDP_LIBXDP_LEGACY: return "libxdp, single program (no dispatcher)";
	case HBK_XDP_LINK: return "plain XDP bpf_link";
	default: return "none";
	}
}

/* The same, as hbctl status --json names it. */
static const char *how_id(enum hbk_xdp_how how)
{
	switch (how) {
	case HBK_XDP_DISPATCHER: return "libxdp-dispatcher";
	case HBK_XDP_LIBXDP_LEGACY: return "libxdp-single";
	case HBK_XDP_LINK: return "bpf_link";
	default: return "none";
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

static int parse_port(const char *s, __u16 *port)
{
	char *end;
	long v = strtol(s, &end, 10);

	if (*s == 0 || *end || v < 1 || v > 65535)
		return -EINVAL;
	*port = (__u16)v;
	return 0;
}

/* A map capacity: 1..16M entries (the maps are preallocated: kernel memory up front). */
static int parse_count(const char *s, __u32 *out)
{
	char *end;
	long v = strtol(s, &end, 10);

	if (*s == 0 || *end || v < 1 || v > (long)HB_MAX_CONNS * 16)
		return -EINVAL;
	*out = (__u32)v;
	return 0;
}

int hbctl_do_load(const struct hbctl_args *a)
{
	const char *dev = hbctl_arg(a, "dev"), *mode_s = hbctl_arg(a, "mode");
	const char *pin = hbctl_arg(a, "pin-path"), *cg = hbctl_arg(a, "cgroup");
	const char *then = hbctl_arg(a, "then"), *tcp_s = hbctl_arg(a, "tcp");
	struct hbk_opts o = { .xdp_defer_load = true };
	__u32 then_id = 0;
	enum hb_xdp_mode mode;
	struct hbk *h = NULL;
	int ifindex, lock, err, rc = HBCTL_FAIL;

	if (!dev) {
		fprintf(stderr, "hbctl load: --dev IFACE is required\n");
		return HBCTL_USAGE;
	}
	if (!strcmp(mode_s, "native")) {
		mode = HB_XDP_NATIVE;
	} else if (!strcmp(mode_s, "skb")) {
		mode = HB_XDP_SKB;
	} else {
		fprintf(stderr, "hbctl load: --mode must be native or skb, not '%s'\n", mode_s);
		return HBCTL_USAGE;
	}
	if (!strcmp(tcp_s, "kernel")) {
		o.tcp_path = HB_TCP_KERNEL;
	} else if (!strcmp(tcp_s, "user")) {
		o.tcp_path = HB_TCP_USER;
	} else {
		fprintf(stderr, "hbctl load: --tcp must be kernel or user, not '%s'\n", tcp_s);
		return HBCTL_USAGE;
	}
	if (parse_port(hbctl_arg(a, "port"), &o.port)) {
		fprintf(stderr, "hbctl load: --port must be 1..65535\n");
		return HBCTL_USAGE;
	}
	if (parse_count(hbctl_arg(a, "max-conns"), &o.max_conns) ||
	    parse_count(hbctl_arg(a, "max-sessions"), &o.max_sessions)) {
		fprintf(stderr, "hbctl load: --max-conns and --max-sessions must be 1..%u\n",
			HB_MAX_CONNS * 16);
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
	if (o.tcp_path == HB_TCP_KERNEL &&
	    ((err = hbk_attach_sockmap(h)) || (err = hbk_attach_sockops(h, cg))))
		goto out;
	err = hbk_attach_xdp(h, ifindex, mode);
	if (err) {
		if (err == -EOPNOTSUPP && mode == HB_XDP_NATIVE)
			hb_err("the driver of %s lacks native XDP; try: hbctl load --dev %s --mode skb",
			       dev, dev);
		else if (err == -EEXIST)
			hb_err("%s already runs hb_xdp (another hbeat instance?); run: hbctl unload "
			       "--dev %s", dev, dev);
		else if (err == -EBUSY)
			hb_err("%s already has an XDP program that is not multi-program aware (not "
			       "under a libxdp dispatcher), so hbeat cannot join it; detach it (ip link "
			       "set dev %s xdp off, or xdp-loader unload %s --all) and either load it "
			       "again through libxdp after hbeat, or hand its object file to hbeat: "
			       "hbctl load --dev %s --then FILE[:PROG]", dev, dev, dev, dev);
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

	if (hbctl_flag(a, "json")) {
		bool kernel = o.tcp_path == HB_TCP_KERNEL;
		json_int_t parser = kernel ? prog_id(hbk_prog_fd(h, "hb_parser")) : 0;
		json_int_t verdict = kernel ? prog_id(hbk_prog_fd(h, "hb_verdict")) : 0;
		json_int_t sockops = kernel ? prog_id(hbk_prog_fd(h, "hb_sockops")) : 0;

		hb_json_print(stdout, json_pack(
			"{s:b,s:o,s:I,s:I,s:o,s:{s:I,s:s,s:s,s:I},s:s,s:I,s:I,s:I}", "loaded", 1,
			"dev", hb_json_str(dev), "ifindex", (json_int_t)ifindex, "port",
			(json_int_t)o.port, "pin_path", hb_json_str(pin),
			"xdp", "prog_id", (json_int_t)prog_id(hbk_prog_fd(h, HBK_PROG_XDP)),
			"mode", mode_s, "attach", how_id(h->xdp_how), "then_prog_id",
			(json_int_t)then_id,
			"tcp", tcp_s, "parser_id", parser, "verdict_id", verdict,
			"sockops_id", sockops));
		rc = HBCTL_OK;
		goto out;
	}
	printf("hbeat loaded on %s (ifindex %d), port %u, pins in %s\n", dev, ifindex, o.port, pin);
	printf("  xdp      hb_xdp id %u, %s mode, attached via %s\n",
	       prog_id(hbk_prog_fd(h, HBK_PROG_XDP)), mode_s, how_str(h->xdp_how));
	if (o.tcp_path == HB_TCP_USER) {
		printf("  tcp      heartbeats answered by hbd in userspace (--tcp user): no sockmap, no sock_ops\n");
	} else {
		printf("  sockhash hb_parser id %u, hb_verdict id %u\n", prog_id(hbk_prog_fd(h, "hb_parser")),
		       prog_id(hbk_prog_fd(h, "hb_verdict")));
		printf("  sockops  hb_sockops id %u on %s (link id %u, pinned)\n",
		       prog_id(hbk_prog_fd(h, "hb_sockops")), cg, link_id(h->sockops_link));
	}
	if (then)
		printf("  then     %s (id %u) runs after hb_xdp on what hbeat passes\n", then, then_id);
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

int hbctl_do_unload(const struct hbctl_args *a)
{
	const char *dev = hbctl_arg(a, "dev"), *pin = hbctl_arg(a, "pin-path");
	struct hbk_unload_report rep;
	int lock, err, ifindex;

	if (!dev) {
		fprintf(stderr, "hbctl unload: --dev IFACE is required\n");
		return HBCTL_USAGE;
	}
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

		if (hbctl_flag(a, "json")) {
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
	if (hbctl_flag(a, "json")) {
		/* tcp "user": there was nothing to detach */
		hb_json_print(stdout, json_pack(
			"{s:b,s:b,s:o*,s:b,s:b,s:s,s:i,s:b}", "loaded", 1,
			"xdp_detached", rep.xdp_detached,
			"xdp_note", rep.xdp_detached ? NULL : hb_json_str(rep.xdp_note),
			"sockops_detached", rep.sockops_detached,
			"sockmap_detached", rep.sockmap_detached,
			"tcp", rep.tcp_user ? "user" : "kernel",
			"pins_removed", rep.pins_removed,
			"pin_dir_removed", access(pin, F_OK) != 0));
	} else if (rep.xdp_detached)
		printf("detached hb_xdp from %s\n", dev);
	if (!hbctl_flag(a, "json")) {
		if (!rep.xdp_detached)
			printf("hb_xdp not detached: %s\n",
			       rep.xdp_note[0] ? rep.xdp_note : "unknown reason");
		if (rep.tcp_user) {
			printf("no TCP programs to detach (loaded with --tcp user)\n");
		} else {
			printf("%s hb_sockops\n", rep.sockops_detached ? "detached" : "could not detach");
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
