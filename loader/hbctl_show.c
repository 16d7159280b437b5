// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbctl status and stats: read-only views of the pinned state, as tables or one line of JSON.
 * They work from the pins alone, so they see what any hbctl load made (conns: hbctl_conns.c). */
#include "hbctl.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <errno.h>
#include <limits.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hb_bpf.h"
#include "hb_env.h"
#include "json_out.h"
#include "log.h"
#include "pins.h"

/* With grace_ns 0 the kernel does not check liveness; hbctl still calls a stamp older than this
 * stale, so status says something useful about a daemon that stopped refreshing it. */
#define FRESH_NS_WITHOUT_GRACE 5000000000ull

static __u64 now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (__u64)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* fd of every map, or -1 each; false (and a message) if hbeat is not loaded. */
struct pinned {
	int fd[12];
};

static int pinned_fd(const struct pinned *p, const char *name)
{
	for (int i = 0; hbk_map_names[i]; i++)
		if (!strcmp(hbk_map_names[i], name))
			return p->fd[i];
	return -1;
}

static bool open_all(const char *dir, struct pinned *p, bool quiet)
{
	bool ok = true;

	for (size_t i = 0; i < sizeof(p->fd) / sizeof(p->fd[0]); i++)
		p->fd[i] = -1;
	for (int i = 0; hbk_map_names[i]; i++) {
		p->fd[i] = hb_pin_open(dir, hbk_map_names[i], NULL, 0);
		if (p->fd[i] < 0)
			ok = false;
	}
	if (!ok && !quiet)
		hb_err("hbeat is not loaded (no pins in %s); load it with: hbctl load --dev IFACE",
		       dir);
	return ok;
}

static void close_all(struct pinned *p)
{
	for (int i = 0; hbk_map_names[i]; i++)
		if (p->fd[i] >= 0)
			close(p->fd[i]);
}

static const char *how_str(enum hbk_xdp_how h)
{
	switch (h) {
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

/* ------------------------------------------------------------------------------------------ */
/* status                                                                                     */

static __u32 first_prog(int map_fd, enum bpf_attach_type t)
{
	__u32 ids[2], cnt = 2;

	return !bpf_prog_query(map_fd, t, 0, NULL, ids, &cnt) && cnt ? ids[0] : 0;
}

/* --tcp keepalive: the timing sock_ops sets, once an hbd has written it (null before); NULL
 * (no key) in the other modes. */
static json_t *keepalive_json(const struct hb_config *cfg)
{
	if (cfg->tcp_path != HB_TCP_KEEPALIVE)
		return NULL;
	if (!cfg->ka_idle_s)
		return json_null();
	return json_pack("{s:I,s:I,s:I,s:I}", "idle_s", (json_int_t)cfg->ka_idle_s, "intvl_s",
			 (json_int_t)cfg->ka_intvl_s, "probes", (json_int_t)cfg->ka_cnt,
			 "user_timeout_ms", (json_int_t)cfg->ka_user_timeout_ms);
}

/* One line of JSON for hbctl status --json (docs/OPERATIONS.md names its keys). */
static void print_status_json(const char *pin, const struct hb_config *cfg,
			      const struct hbk_xdp_info *xi, const char *dispatcher_why,
			      __u32 then_id, const char *then_name, __u32 parser, __u32 verdict,
			      const struct bpf_link_info *sl, const char *const fill_maps[3],
			      const __u32 fill[3], const __u32 max[3], __u64 now, bool stamped,
			      __u64 age, bool alive)
{
	const char *mode = xi->mode == HB_XDP_SKB      ? "skb"
			   : xi->mode == HB_XDP_NATIVE ? "native"
						       : "none";
	json_t *ifname = hb_json_bytes(cfg->ifname, strnlen(cfg->ifname, sizeof(cfg->ifname)));
	json_int_t loaded_s = cfg->loaded_ns && now > cfg->loaded_ns
				      ? (json_int_t)((now - cfg->loaded_ns) / 1000000000ull)
				      : 0;
	json_t *maps = json_object();

	for (int i = 0; maps && i < 3; i++) {
		json_t *m = json_pack("{s:I,s:I}", "entries", (json_int_t)fill[i], "max",
				      (json_int_t)max[i]);

		if (json_object_set_new(maps, fill_maps[i], m)) {
			json_decref(maps);
			maps = NULL;
		}
	}
	hb_json_print(stdout,
		      json_pack("{s:b,s:o,s:I,s:I,"
				"s:{s:o,s:I,s:s,s:s,s:I,s:s*,s:{s:I,s:o}},"
				"s:s,s:o*,s:{s:I,s:I},s:{s:I,s:I,s:o},s:o,s:{s:b,s:o,s:I}}",
				"loaded", 1, "pin_path", hb_json_str(pin), "port",
				(json_int_t)cfg->port, "loaded_s_ago", loaded_s, "xdp", "ifname",
				ifname, "ifindex", (json_int_t)cfg->ifindex, "mode", mode, "attach",
				how_str(xi->how), "prog_id", (json_int_t)xi->prog_id,
				"dispatcher_unavailable", dispatcher_why, "then", "prog_id",
				(json_int_t)then_id, "name", hb_json_str(then_name), "tcp",
				hbk_tcp_path_str(cfg->tcp_path), "keepalive", keepalive_json(cfg),
				"sockmap", "parser_id", (json_int_t)parser, "verdict_id",
				(json_int_t)verdict, "sockops", "link_id", (json_int_t)sl->id,
				"prog_id", (json_int_t)sl->prog_id, "cgroup_id",
				hb_json_u64(sl->cgroup.cgroup_id), "maps", maps, "daemon", "alive",
				alive, "stamp_age_ms",
				stamped ? hb_json_u64(age / 1000000) : json_null(), "grace_ms",
				(json_int_t)(cfg->grace_ns / 1000000)));
}

int hbctl_do_status(const void *opts, int argc, char **argv)
{
	const struct hbctl_show_opts *o = opts;
	const char *pin = o->pin_path;
	bool json = o->json;
	struct bpf_link_info sl = { 0 };
	struct hbk_xdp_info xi;
	struct hb_config cfg = { 0 };
	struct pinned p;
	__u32 zero = 0, parser, verdict, fill[3], max[3];
	static const char *const fill_maps[3] = { HB_MAP_CONNS, HB_MAP_SESSIONS, HB_MAP_SOCKHASH };
	__u64 now = now_ns(), age;
	bool alive, stamped, dispatcher_ok = true;
	char then_name[BPF_OBJ_NAME_LEN] = "", dispatcher_why[256] = "";
	__u32 then_id = 0;
	int fd;

	if (!open_all(pin, &p, true)) {
		close_all(&p);
		if (json)
			hb_json_print(stdout, json_pack("{s:b,s:o}", "loaded", 0, "pin_path",
							hb_json_str(pin)));
		else
			printf("hbeat is not loaded (no pins in %s)\n", pin);
		return HBCTL_OK;
	}
	bpf_map_lookup_elem(pinned_fd(&p, HB_MAP_CONFIG), &zero, &cfg);
	hbk_xdp_query(pin, cfg.ifindex, &xi);
	if (xi.how == HBK_XDP_LINK)
		xi.mode = cfg.xdp_mode;
	fd = hb_pin_open(pin, HBK_PIN_LINK_SOCKOPS, NULL, 0);
	if (fd >= 0) {
		__u32 len = sizeof(sl);

		bpf_obj_get_info_by_fd(fd, &sl, &len);
		close(fd);
	}
	hbk_chain_query(pinned_fd(&p, HB_MAP_XDP_CHAIN), &then_id, then_name, sizeof(then_name));
	if (xi.how == HBK_XDP_LIBXDP_LEGACY || xi.how == HBK_XDP_LINK)
		dispatcher_ok = hbe_probe_freplace(dispatcher_why, sizeof(dispatcher_why)) == 0;
	parser = first_prog(pinned_fd(&p, HB_MAP_SOCKHASH), BPF_SK_SKB_STREAM_PARSER);
	verdict = first_prog(pinned_fd(&p, HB_MAP_SOCKHASH), BPF_SK_SKB_STREAM_VERDICT);
	for (int i = 0; i < 3; i++)
		if (hb_map_fill(pinned_fd(&p, fill_maps[i]), &fill[i], &max[i]))
			fill[i] = max[i] = 0;
	stamped = cfg.alive_ns != 0;
	age = stamped && now > cfg.alive_ns ? now - cfg.alive_ns : 0;
	alive = stamped && age <= (cfg.grace_ns ? cfg.grace_ns : FRESH_NS_WITHOUT_GRACE);

	if (json) {
		print_status_json(pin, &cfg, &xi, dispatcher_ok ? NULL : dispatcher_why, then_id,
				  then_name, parser, verdict, &sl, fill_maps, fill, max, now,
				  stamped, age, alive);
	} else {
		printf("hbeat is loaded (pins in %s), port %u, loaded %llu s ago\n", pin, cfg.port,
		       (unsigned long long)(cfg.loaded_ns && now > cfg.loaded_ns
						    ? (now - cfg.loaded_ns) / 1000000000ull
						    : 0));
		if (xi.how == HBK_XDP_NONE)
			printf("  xdp       hb_xdp NOT attached to %s (ifindex %u)\n", cfg.ifname,
			       cfg.ifindex);
		else
			printf("  xdp       %s (ifindex %u), %s mode, hb_xdp id %u via %s\n",
			       cfg.ifname, cfg.ifindex, xi.mode == HB_XDP_SKB ? "skb" : "native",
			       xi.prog_id, how_str(xi.how));
		if (!dispatcher_ok)
			printf("            not shared through libxdp's dispatcher: %s\n",
			       dispatcher_why);
		if (then_id)
			printf("            then %s (id %u) on what hb_xdp passes\n", then_name,
			       then_id);
		if (cfg.tcp_path == HB_TCP_USER) {
			printf("  tcp       heartbeats answered by hbd in userspace (loaded with --tcp user)\n");
		} else {
			if (cfg.tcp_path == HB_TCP_KERNEL)
				printf("  sockhash  hb_parser id %u, hb_verdict id %u%s\n", parser,
				       verdict, parser && verdict ? "" : "  (NOT attached)");
			else if (!cfg.ka_idle_s)
				printf("  tcp       TCP keepalive (--tcp keepalive), no timing yet: "
				       "sock_ops sets the options once hbd has started\n");
			else
				printf("  tcp       TCP keepalive (--tcp keepalive): probe after %u s "
				       "idle, every %u s; closed %u ms after the last answer\n",
				       cfg.ka_idle_s, cfg.ka_intvl_s, cfg.ka_user_timeout_ms);
			if (sl.id)
				printf("  sockops   hb_sockops id %u, link id %u, cgroup id %llu\n",
				       sl.prog_id, sl.id, (unsigned long long)sl.cgroup.cgroup_id);
			else
				printf("  sockops   NOT attached (no %s pin)\n",
				       HBK_PIN_LINK_SOCKOPS);
		}
		printf("  maps      conns %u/%u, sessions %u/%u, sockhash %u/%u\n", fill[0], max[0],
		       fill[1], max[1], fill[2], max[2]);
		if (!stamped)
			printf("  daemon    never seen (no liveness stamp)\n");
		else
			printf("  daemon    %s (stamp %.1f s old, %s)\n",
			       alive ? "alive" : "NOT alive", age / 1e9,
			       cfg.grace_ns ? ""
					    : "no grace period: the kernel answers regardless");
		if (stamped && cfg.grace_ns)
			printf("            kernel answers heartbeats only while the stamp is under %.1f s old\n",
			       cfg.grace_ns / 1e9);
	}
	close_all(&p);
	return HBCTL_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* stats                                                                                      */

int hbctl_do_stats(const void *opts, int argc, char **argv)
{
	const struct hbctl_show_opts *o = opts;
	const char *pin = o->pin_path;
	bool json = o->json;
	struct hb_kstats k;
	struct hb_ustats u;
	struct pinned p;
	int err;

	if (!open_all(pin, &p, false)) {
		close_all(&p);
		return HBCTL_FAIL;
	}
	err = hb_kstats_read(pinned_fd(&p, HB_MAP_KSTATS), &k);
	if (!err)
		err = hb_ustats_read(pinned_fd(&p, HB_MAP_USTATS), &u);
	close_all(&p);
	if (err) {
		hb_err("reading counters: %s", strerror(-err));
		return HBCTL_FAIL;
	}
	if (json) {
		/* pings_kernel, pings_user and the mqtt_ pair are a contract outside checks rely
		 * on */
		hb_json_print(stdout,
			      json_pack("{s:o,s:o,s:o,s:o,s:o,s:o}", "pings_kernel",
					hb_json_u64(k.xdp_pong + k.sk_pong), "pings_user",
					hb_json_u64(u.pings_user), "mqtt_pings_kernel",
					hb_json_u64(k.mq_pong), "mqtt_pings_user",
					hb_json_u64(u.mqtt_pings_user), "kernel",
					hb_json_u64_fields(hb_kstat_names, (const uint64_t *)&k,
							   HB_KSTATS_N),
					"user",
					hb_json_u64_fields(hb_ustat_names, (const uint64_t *)&u,
							   HB_USTATS_N)));
		return HBCTL_OK;
	}
	printf("heartbeats answered: %llu in the kernel (xdp %llu, sockmap %llu), %llu by the daemon\n",
	       (unsigned long long)(k.xdp_pong + k.sk_pong), (unsigned long long)k.xdp_pong,
	       (unsigned long long)k.sk_pong, (unsigned long long)u.pings_user);
	printf("\nkernel (summed over CPUs)\n");
	for (int i = 0; i < HB_KSTATS_N; i++)
		printf("  %-22s %llu\n", hb_kstat_names[i], (unsigned long long)HB_STAT(&k, i));
	printf("\ndaemon (summed over %d worker slots)\n", HB_MAX_WORKERS);
	for (int i = 0; i < HB_USTATS_N; i++)
		printf("  %-22s %llu\n", hb_ustat_names[i], (unsigned long long)HB_STAT(&u, i));
	return HBCTL_OK;
}
