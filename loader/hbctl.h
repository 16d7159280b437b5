/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* hbctl: the command-line front end of the loader library. Commands in the xdp-tools style: each
 * has a typed options table (user/common/opt.h: it also prints the command's --help), an options
 * struct with its defaults, and a do_<cmd>() function; the dispatcher checks the environment a
 * command needs before running it.
 */
#ifndef HBCTL_H
#define HBCTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hbeat_abi.h"
#include "nats_auth.h"

/* Exit codes (also printed by hbctl --help). */
enum hbctl_exit {
	HBCTL_OK = 0,
	HBCTL_USAGE = 1, /* bad command line */
	HBCTL_ENV = 2, /* environment or kernel feature missing: not root, no bpffs, no BTF, ... */
	HBCTL_FAIL =
		3, /* the operation failed: load/attach/pin error, already loaded, not loaded */
};

/* Each command's options, filled from its table in hbctl.c (defaults included), then handed to
 * its do_<cmd>() with the positional arguments that followed.
 */
struct hbctl_load_opts {
	const char *dev;
	enum hb_xdp_mode mode;
	uint16_t port;
	uint16_t mqtt_port; /* 0: none */
	const char *pin_path;
	const char *cgroup;
	const char *then; /* FILE[:PROG] or NULL */
	enum hb_tcp_path tcp;
	uint32_t max_conns, max_sessions;
	bool json;
};

struct hbctl_unload_opts {
	const char *dev;
	const char *pin_path;
	bool json;
};

/* status and stats */
struct hbctl_show_opts {
	bool json;
	const char *pin_path;
};

enum hbctl_sort {
	HBCTL_SORT_NONE,
	HBCTL_SORT_DEVICE,
	HBCTL_SORT_PEER,
	HBCTL_SORT_SILENT,
	HBCTL_SORT_PINGS
};

struct hbctl_conns_opts {
	bool json;
	const char *pin_path;
	uint32_t limit; /* 0: all */
	uint64_t device;
	bool by_device; /* --device was given */
	int state; /* enum hb_conn_state, -1: any */
	int transport; /* 0 tcp, 1 udp, -1: any */
	double silent_s; /* < 0: any */
	int sort; /* enum hbctl_sort */
};

struct hbctl_devices_opts {
	const char *keys;
	const char *secret; /* NULL: a random one */
	const char *mqtt_realm; /* mqtt-password: --realm */
	uint32_t mqtt_days; /* mqtt-password: --days */
	const char *control;
	bool no_reload;
	bool json;
};

struct hbctl_send_opts {
	const char *control;
	bool hex, base64;
	uint32_t timeout_ms;
	bool json;
};

struct hbctl_events_opts {
	const char *control;
	uint32_t count; /* 0: until hbd goes away */
	bool json;
};

struct hbctl_fleet_opts {
	const char *nats;
	struct hb_nats_auth auth; /* credentials and TLS, as hbd's --nats-* */
	uint32_t timeout_ms;
	bool json;
};

/* opts points to the command's struct above. */
int hbctl_do_load(const void *opts, int argc, char **argv);
int hbctl_do_unload(const void *opts, int argc, char **argv);
int hbctl_do_status(const void *opts, int argc, char **argv); /* hbctl_show.c */
int hbctl_do_conns(const void *opts, int argc, char **argv);
int hbctl_do_stats(const void *opts, int argc, char **argv);
int hbctl_do_devices(const void *opts, int argc, char **argv); /* hbctl_devices.c */
int hbctl_do_send(const void *opts, int argc, char **argv); /* hbctl_app.c */
int hbctl_do_events(const void *opts, int argc, char **argv);
int hbctl_do_fleet(const void *opts, int argc, char **argv); /* hbctl_fleet.c */

/* Defaults shared by the commands that talk to hbd or edit its files. */
#define HBCTL_DEFAULT_KEYS "/etc/hbeat/keys"
#define HBCTL_DEFAULT_CONTROL "/run/hbeat/hbd.sock"

/* hbctl_app.c: one request on hbd's control socket; the first reply line (without newline)
 * goes to reply. Returns 0, or -errno (ENOENT/ECONNREFUSED: hbd not listening there). */
int hbctl_ctl_request(const char *path, const char *request, char *reply, size_t cap,
		      int timeout_ms);

/* Entry point used by loader/main.c (and usable from tests). */
int hbctl_main(int argc, char **argv);

#endif
