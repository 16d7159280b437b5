/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* hbeat loader library: loads the three BPF objects over one set of shared maps, attaches them
 * (XDP through libxdp, parser+verdict on the sockhash, sock_ops on a cgroup), pins what must
 * outlive the loader, and undoes all of it. Used by hbctl and by the tests.
 *
 * Lifecycle of a handle (every function returns 0 or a negative errno):
 *
 *   hbk_open()            load sk_skb_hb (creates the maps), sockops_hb and xdp_hb (reuse them)
 *   hbk_attach_sockmap()  hb_parser + hb_verdict on the sockhash — before sock_ops, because a
 *                         socket picks up the map's programs when it is inserted
 *   hbk_attach_sockops()  hb_sockops on a cgroup v2 directory (bpf_link)
 *   hbk_attach_xdp()      hb_xdp on a NIC through libxdp (dispatcher), plain link as fallback
 *   hbk_write_config()    the config map's load-time fields
 *   hbk_pin()             maps and links under a directory: from here on they outlive the process
 *   hbk_close()           frees the handle; a handle that was never pinned first undoes every
 *                         attachment it made, so a failed load leaves nothing behind
 *
 * hbk_unload() is the inverse of a pinned load, working only from the pins (another process).
 * Files by job: hb_bpf_load.c (open, load, close), hb_bpf_attach.c, hb_bpf_pin.c (pin, unload,
 * lock), hb_bpf_query.c (what is attached, seen from the pins and the NIC), hb_daemon_lock.c
 * (whether an hbd serves the pins).
 * No function here touches HB_PIN_DEFAULT unless the caller passes it.
 */
#ifndef HB_BPF_H
#define HB_BPF_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "hbeat_abi.h"
#include "pins.h"

struct sk_skb_hb;
struct sockops_hb;
struct xdp_hb;
struct bpf_link;
struct xdp_program;

/* Pin names for the links, next to the maps (HB_MAP_*). */
#define HBK_PIN_LINK_SOCKOPS "link_sockops"
#define HBK_PIN_LINK_XDP "link_xdp" /* only when libxdp could not be used */
#define HBK_PROG_XDP "hb_xdp"

#define HBK_DEFAULT_CGROUP "/sys/fs/cgroup/unified"
/* hbctl load --tcp. The default follows the figure hbeat exists to cut, server CPU per
 * heartbeat: under the peer bench's load hbd answering TCP itself (its wakeups batched) costs
 * less than the sockmap verdict, whose PONGs a kworker sends (docs/BENCHMARKS.md). hbd keeps a
 * conns entry per connection in this mode too, for hbctl conns and bpftool. --tcp kernel: the
 * verdict answers (and MQTT PINGREQs with --mqtt-port). Devices that need presence and NAT
 * keepalive, not an application echo: --tcp keepalive. */
#define HBK_DEFAULT_TCP_PATH HB_TCP_USER

struct hbk_opts {
	__u16 port; /* service port, host order; 0 = HB_DEFAULT_PORT */
	__u16 mqtt_port; /* MQTT port whose PINGREQs the kernel answers, host order; 0: none */
	__u64 netns_cookie; /* sock_ops serves only this netns; 0 = every netns */
	__u32 max_conns; /* conns/sockhash capacity; 0 = HB_MAX_CONNS */
	__u32 max_sessions; /* sessions capacity; 0 = HB_MAX_SESSIONS */
	/* true: leave hb_xdp unloaded so hbk_attach_xdp() can hand it to libxdp, which loads it as
	 * a dispatcher component (freplace). false: load it as a plain XDP program now (tests run
	 * it with bpf_prog_test_run_opts). */
	bool xdp_defer_load;
	/* HB_TCP_USER: hbctl attaches neither the sk_skb programs nor sock_ops, and says so in
	 * the config map; hbd then answers TCP heartbeats itself. HB_TCP_KEEPALIVE: sock_ops
	 * without the sk_skb programs; it turns TCP keepalive on with the timing hbd writes */
	enum hb_tcp_path tcp_path;
};

enum hbk_xdp_how {
	HBK_XDP_NONE = 0,
	HBK_XDP_DISPATCHER, /* libxdp multi-prog dispatcher */
	HBK_XDP_LIBXDP_LEGACY, /* libxdp attached it alone (kernel or NIC refused the dispatcher) */
	HBK_XDP_LINK, /* plain XDP bpf_link, libxdp failed */
};

struct hbk {
	struct sk_skb_hb *skskb; /* owns the maps */
	struct sockops_hb *sockops;
	struct xdp_hb *xdp;
	bool xdp_loaded; /* hb_xdp has a program fd */
	struct hbk_opts opts;

	/* What this handle attached (undone by hbk_close unless pinned). */
	bool sockmap_attached;
	struct bpf_link *sockops_link;
	struct xdp_program *xdp_prog; /* libxdp's handle (dispatcher or legacy) */
	int xdp_link_fd; /* fallback plain XDP link, -1 if none */
	int xdp_ifindex;
	enum hb_xdp_mode xdp_mode;
	enum hbk_xdp_how xdp_how;
	bool pinned;
	char pin_dir[PATH_MAX];
};

int hbk_open(struct hbk **out, const struct hbk_opts *opts);
void hbk_close(struct hbk *h);

/* fd of one shared map by ABI name (HB_MAP_*), or -ENOENT. Owned by the handle. */
int hbk_map_fd(const struct hbk *h, const char *name);
/* Program fds (hb_xdp only once loaded). */
int hbk_prog_fd(const struct hbk *h, const char *prog_name);

int hbk_attach_sockmap(struct hbk *h);
int hbk_detach_sockmap(struct hbk *h);
int hbk_attach_sockops(struct hbk *h, const char *cgroup_path);
/* mode: HB_XDP_NATIVE or HB_XDP_SKB. -EOPNOTSUPP from a native attach means the driver lacks
 * native XDP (try HB_XDP_SKB); -EEXIST means the NIC already runs a program that cannot share. */
int hbk_attach_xdp(struct hbk *h, int ifindex, enum hb_xdp_mode mode);
int hbk_detach_xdp(struct hbk *h);
/* Loads the XDP program prog (NULL: the first XDP program) of the object file and puts it in
 * xdp_chain, so it runs after hb_xdp on every packet hb_xdp passes: coexistence on a NIC where
 * libxdp's dispatcher is unavailable (docs/COEXISTENCE.md). *id gets its program id. */
int hbk_chain_xdp(struct hbk *h, const char *file, const char *prog, __u32 *id);
/* The program in an xdp_chain map (by fd): its id and name, or 0 / "" if none. */
int hbk_chain_query(int chain_fd, __u32 *id, char *name, size_t len);
/* The config map's load-time fields, and (ifindex > 0) local_addrs from the NIC's addresses. */
int hbk_write_config(struct hbk *h, int ifindex, const char *ifname, enum hb_xdp_mode mode);
/* local_addrs = the unicast addresses of the NIC and of the VLAN devices on it (localaddr.h). */
int hbk_write_local_addrs(struct hbk *h, int ifindex);

/* Pins every shared map and every link of the handle under dir, created with mode 0700. dir must
 * not exist yet (or be empty). On failure everything pinned so far is removed again. */
int hbk_pin(struct hbk *h, const char *dir);

/* Names of the shared maps, in pin order; NULL-terminated. */
extern const char *const hbk_map_names[];

/* What hbk_unload() found and removed; each message is one line for people. */
struct hbk_unload_report {
	bool xdp_detached;
	bool sockops_detached;
	bool sockmap_detached;
	bool tcp_user; /* loaded with --tcp user: there were no TCP programs to detach */
	enum hb_tcp_path tcp_path; /* what the load recorded in config */
	int pins_removed;
	char xdp_note[160]; /* why XDP was not detached, if it was not */
};

/* Removes everything a pinned load made: XDP program (libxdp or link) on ifname (NULL: the one
 * recorded in config), the sock_ops link, parser/verdict, every pin and the directory.
 * -ENOENT if dir holds no hbeat pins. Goes on past individual failures and returns the first. */
int hbk_unload(const char *dir, const char *ifname, struct hbk_unload_report *rep);

/* Detaches an hb_xdp that libxdp finds on ifindex (left by a crashed load): 0 if one was
 * detached, -ENOENT if there is none. */
int hbk_detach_xdp_ifindex(int ifindex);

/* How hb_xdp is attached as seen from the pins and the NIC (another process than the loader). */
struct hbk_xdp_info {
	enum hbk_xdp_how how; /* HBK_XDP_NONE: not attached */
	__u32 prog_id;
	enum hb_xdp_mode mode;
};
int hbk_xdp_query(const char *pin_dir, int ifindex, struct hbk_xdp_info *out);

/* Serialises load and unload of one pin directory across processes: an exclusive flock on a
 * lock file named after the directory's canonical path (hbk_lock_path), held for the whole
 * operation; other pin directories are not held up. Returns an fd to pass to hbk_unlock(), or
 * a negative errno. */
int hbk_lock(const char *pin_dir);
void hbk_unlock(int fd);
/* The lock file of a pin directory: /run/lock/hbctl-<path, escaped as systemd does>.lock, e.g.
 * /run/lock/hbctl-sys-fs-bpf-hbeat.lock (/run or /tmp where /run/lock is missing). */
int hbk_lock_path(const char *pin_dir, char *out, size_t len);

/* The counters are read by user/common/pins.h (hb_kstats_read and friends); these names stay
 * for the loader library's callers, the tests. */
#define hbk_kstat_names hb_kstat_names
#define hbk_ustat_names hb_ustat_names
#define HBK_KSTAT(s, i) HB_STAT(s, i)
#define HBK_USTAT(s, i) HB_STAT(s, i)
static inline int hbk_read_kstats(int kstats_fd, struct hb_kstats *sum)
{
	return hb_kstats_read(kstats_fd, sum);
}

/* The word hbctl load --tcp takes for a TCP path: "kernel", "user", "keepalive" ("?" if none). */
const char *hbk_tcp_path_str(enum hb_tcp_path p);

/* Whether an hbd serves the pin directory now: 1 if one holds its instance lock (user/hbd
 * restart.c; *pid gets the holder's pid as the kernel recorded it, 0 if unknown), 0 if none
 * does, or a negative errno. It never takes the lock, so it cannot stand in a starting hbd's
 * way (hb_daemon_lock.c). */
int hbk_daemon_running(const char *pin_dir, int *pid);

/* The current network namespace's cookie (SO_NETNS_COOKIE, 5.14), for hbk_opts.netns_cookie. */
int hbk_netns_cookie(__u64 *cookie);

/* Routes libbpf and libxdp messages through hb_log. */
void hbk_route_logs(void);

#endif /* HB_BPF_H */
