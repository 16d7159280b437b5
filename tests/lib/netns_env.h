/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* A server and a client network namespace on a veth pair (scripts/netns.sh), hbeat's BPF side
 * loaded on the server's veth with the real hbctl, and the test process able to step into the
 * client namespace so its own sockets are real remote clients. Used with hbd_harness.h
 * (ht_netns / ht_srv4 point hbd and the harness clients at the namespaces).
 *
 * Everything made is removed by hn_down(), which cmocka teardowns call after any outcome.
 */
#ifndef HT_NETNS_ENV_H
#define HT_NETNS_ENV_H

#include <stdbool.h>

#define HN_SRV_ADDR "10.77.0.1" /* scripts/netns.sh's fixed addresses */
#define HN_SRV_ADDR_HOST 0x0a4d0001u

struct hn_env {
	const char *build;
	char name[16]; /* netns.sh NAME: NAME-srv, NAME-cli, veths NAME-s, NAME-c */
	char srv_ns[32], cli_ns[32], srv_if[24], cli_if[24];
	char pin[96];
	int orig_ns; /* this process's own netns, to come back to */
	bool up, loaded;
};

/* Creates the namespaces (nsrc client source addresses 10.77.1.1..) for a test tagged tag. */
int hn_up(struct hn_env *e, char tag, int nsrc);

/* hbctl load on the server's veth (extra: more hbctl options, may be ""), with the TCP kernel
 * path (sockmap, sock_ops) that these tests exercise beside XDP, whatever the default. */
int hn_load(struct hn_env *e, unsigned port, const char *extra);
void hn_unload(struct hn_env *e);

/* This process's sockets from now on belong to namespace ns (/run/netns/ns). */
int hn_enter(struct hn_env *e, const char *ns);
/* ... to the client namespace. */
int hn_enter_cli(struct hn_env *e);
/* Back to the namespace the process started in. */
void hn_leave(struct hn_env *e);
/* hbd started by hbd_harness.h (ht_start) and the harness's clients aim at the server
 * namespace (ht_netns, ht_srv4) from now on; hn_unaim: at this process's own and 127.0.0.1. */
void hn_aim(const struct hn_env *e);
void hn_unaim(void);
/* Everything hn_up and hn_load made, and the harness aimed back (hn_unaim). */
void hn_down(struct hn_env *e);

/* A counter from `hbctl stats --json`, by jq path: "kernel.xdp_pong", "user.pings_user",
 * "pings_kernel" (-1 if unreadable).
 */
long long hn_stat(struct hn_env *e, const char *path);

#endif /* HT_NETNS_ENV_H */
