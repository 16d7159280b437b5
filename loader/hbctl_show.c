// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbctl status, conns and stats: read-only views of the pinned state, as tables or one line of
 * JSON. They work from the pins alone, so they see what any hbctl load made. */
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
#include "hb_json.h"
#include "log.h"

/* With grace_ns 0 the kernel does not check liveness; hbctl still calls a stamp older than this
 * stale, so status says something useful about a daemon that stopped refreshing it. */
#define FRESH_NS_WITHOUT_GRACE 5000000000ull

static __u64 now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (__u64)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static int open_pin(const char *dir, const char *name)
{
	char p[PATH_MAX];

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return bpf_obj_get(p);
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

	for (int i = 0; hbk_map_names[i]; i++) {
		p->fd[i] = open_pin(dir, hbk_map_names[i]);
		if (p->fd[i] < 0)
			ok = false;
	}
	if (!ok && !quiet)
		hb_err("hbeat is not loaded (no pins in %s); load it with: hbctl load --dev IFACE", dir);
	return ok;
}

static void close_all(struct pinned *p)
{
	for (int i = 0; hbk_map_names[i]; i++)
		if (p->fd[i] >= 0)
			close(p->fd[i]);
}

static const char *state_str(enum hb_state s)
{
	switch (s) {
	case HB_STATE_NEW: return "new";
	case HB_STATE_AUTHED: return "authed";
	case HB_STATE_CLOSING: return "closing";
	default: return "?";
	}
}

static const char *how_str(enum hbk_xdp_how h)
{
	switch (h) {
	case HBK_XDP_DISPATCHER: return "libxdp-dispatcher";
	case HBK_XDP_LIBXDP_LEGACY: return "libxdp-single";
	case HBK_XDP_LINK: return "bpf_link";
	default: return "none";
	}
}

/* ------------------------------------------------------------------------------------------ */
/* status                                                                                     */

static __u32 first_prog(int map_fd, enum bpf_attach_type t)
{
	__u32 ids[2], cnt = 2;

	return !bpf_prog_query(map_fd, t, 0, NULL, ids, &cnt) && cnt ? ids[0] : 0;
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
	struct hbj j;
	__u32 zero = 0, parser, verdict, fill[3], max[3];
	static const char *const fill_maps[3] = { HB_MAP_CONNS, HB_MAP_SESSIONS, HB_MAP_SOCKHASH };
	__u64 now = now_ns(), age;
	bool alive, stamped, dispatcher_ok = true;
	char then_name[BPF_OBJ_NAME_LEN] = "", dispatcher_why[256] = "";
	__u32 then_id = 0;
	int fd;

	if (!open_all(pin, &p, true)) {
		close_all(&p);
		if (json) {
			hbj_init(&j, stdout);
			hbj_obj(&j, NULL);
			hbj_bool(&j, "loaded", false);
			hbj_str(&j, "pin_path", pin);
			hbj_obj_end(&j);
			hbj_end(&j);
		} else {
			printf("hbeat is not loaded (no pins in %s)\n", pin);
		}
		return HBCTL_OK;
	}
	bpf_map_lookup_elem(pinned_fd(&p, HB_MAP_CONFIG), &zero, &cfg);
	hbk_xdp_query(pin, cfg.ifindex, &xi);
	if (xi.how == HBK_XDP_LINK)
		xi.mode = cfg.xdp_mode;
	fd = open_pin(pin, HBK_PIN_LINK_SOCKOPS);
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
		if (hbk_map_fill(pinned_fd(&p, fill_maps[i]), &fill[i], &max[i]))
			fill[i] = max[i] = 0;
	stamped = cfg.alive_ns != 0;
	age = stamped && now > cfg.alive_ns ? now - cfg.alive_ns : 0;
	alive = stamped && age <= (cfg.grace_ns ? cfg.grace_ns : FRESH_NS_WITHOUT_GRACE);

	if (json) {
		hbj_init(&j, stdout);
		hbj_obj(&j, NULL);
		hbj_bool(&j, "loaded", true);
		hbj_str(&j, "pin_path", pin);
		hbj_u64(&j, "port", cfg.port);
		hbj_u64(&j, "loaded_s_ago", cfg.loaded_ns && now > cfg.loaded_ns ? (now - cfg.loaded_ns) / 1000000000ull : 0);
		hbj_obj(&j, "xdp");
		hbj_str(&j, "ifname", cfg.ifname);
		hbj_u64(&j, "ifindex", cfg.ifindex);
		hbj_str(&j, "mode", xi.mode == HB_XDP_SKB ? "skb" : xi.mode == HB_XDP_NATIVE ? "native" : "none");
		hbj_str(&j, "attach", how_str(xi.how));
		hbj_u64(&j, "prog_id", xi.prog_id);
		if (!dispatcher_ok)
			hbj_str(&j, "dispatcher_unavailable", dispatcher_why);
		hbj_obj(&j, "then");
		hbj_u64(&j, "prog_id", then_id);
		hbj_str(&j, "name", then_name);
		hbj_obj_end(&j);
		hbj_obj_end(&j);
		hbj_str(&j, "tcp", cfg.tcp_path == HB_TCP_USER ? "user" : "kernel");
		hbj_obj(&j, "sockmap");
		hbj_u64(&j, "parser_id", parser);
		hbj_u64(&j, "verdict_id", verdict);
		hbj_obj_end(&j);
		hbj_obj(&j, "sockops");
		hbj_u64(&j, "link_id", sl.id);
		hbj_u64(&j, "prog_id", sl.prog_id);
		hbj_u64(&j, "cgroup_id", sl.cgroup.cgroup_id);
		hbj_obj_end(&j);
		hbj_obj(&j, "maps");
		for (int i = 0; i < 3; i++) {
			hbj_obj(&j, fill_maps[i]);
			hbj_u64(&j, "entries", fill[i]);
			hbj_u64(&j, "max", max[i]);
			hbj_obj_end(&j);
		}
		hbj_obj_end(&j);
		hbj_obj(&j, "daemon");
		hbj_bool(&j, "alive", alive);
		if (stamped)
			hbj_u64(&j, "stamp_age_ms", age / 1000000);
		else
			hbj_null(&j, "stamp_age_ms");
		hbj_u64(&j, "grace_ms", cfg.grace_ns / 1000000);
		hbj_obj_end(&j);
		hbj_obj_end(&j);
		hbj_end(&j);
	} else {
		printf("hbeat is loaded (pins in %s), port %u, loaded %llu s ago\n", pin, cfg.port,
		       (unsigned long long)(cfg.loaded_ns && now > cfg.loaded_ns ? (now - cfg.loaded_ns) / 1000000000ull : 0));
		if (xi.how == HBK_XDP_NONE)
			printf("  xdp       hb_xdp NOT attached to %s (ifindex %u)\n", cfg.ifname, cfg.ifindex);
		else
			printf("  xdp       %s (ifindex %u), %s mode, hb_xdp id %u via %s\n", cfg.ifname,
			       cfg.ifindex, xi.mode == HB_XDP_SKB ? "skb" : "native", xi.prog_id,
			       how_str(xi.how));
		if (!dispatcher_ok)
			printf("            not shared through libxdp's dispatcher: %s\n", dispatcher_why);
		if (then_id)
			printf("            then %s (id %u) on what hb_xdp passes\n", then_name, then_id);
		if (cfg.tcp_path == HB_TCP_USER) {
			printf("  tcp       heartbeats answered by hbd in userspace (loaded with --tcp user)\n");
		} else {
			printf("  sockhash  hb_parser id %u, hb_verdict id %u%s\n", parser, verdict,
			       parser && verdict ? "" : "  (NOT attached)");
			if (sl.id)
				printf("  sockops   hb_sockops id %u, link id %u, cgroup id %llu\n",
				       sl.prog_id, sl.id, (unsigned long long)sl.cgroup.cgroup_id);
			else
				printf("  sockops   NOT attached (no %s pin)\n", HBK_PIN_LINK_SOCKOPS);
		}
		printf("  maps      conns %u/%u, sessions %u/%u, sockhash %u/%u\n", fill[0], max[0],
		       fill[1], max[1], fill[2], max[2]);
		if (!stamped)
			printf("  daemon    never seen (no liveness stamp)\n");
		else
			printf("  daemon    %s (stamp %.1f s old, %s)\n", alive ? "alive" : "NOT alive",
			       age / 1e9, cfg.grace_ns ? "" : "no grace period: the kernel answers regardless");
		if (stamped && cfg.grace_ns)
			printf("            kernel answers heartbeats only while the stamp is under %.1f s old\n",
			       cfg.grace_ns / 1e9);
	}
	close_all(&p);
	return HBCTL_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* conns                                                                                      */

/* "[0000:...:0001]:port" (bpf_snprintf's full %pI6) → "[::1]:port" for people. */
static void pretty_peer(const char *in, char *out, size_t len)
{
	char addr[64];
	const char *close = strchr(in, ']');
	struct in6_addr a;

	if (in[0] == '[' && close && (size_t)(close - in - 1) < sizeof(addr)) {
		memcpy(addr, in + 1, close - in - 1);
		addr[close - in - 1] = 0;
		if (inet_pton(AF_INET6, addr, &a) == 1 && inet_ntop(AF_INET6, &a, addr, sizeof(addr))) {
			snprintf(out, len, "[%s]%s", addr, close + 1);
			return;
		}
	}
	snprintf(out, len, "%s", in);
}

/* A session's peer from its address when the daemon left the text empty. */
static void session_peer(const struct hb_session *s, char *out, size_t len)
{
	static const __u8 mapped[12] = { [10] = 0xff, [11] = 0xff };
	char a[INET6_ADDRSTRLEN];

	if (s->peer[0]) {
		snprintf(out, len, "%.*s", (int)sizeof(s->peer), s->peer);
		return;
	}
	if (!memcmp(s->addr, mapped, 12)) {
		inet_ntop(AF_INET, s->addr + 12, a, sizeof(a));
		snprintf(out, len, "%s:%u", a, ntohs(s->port));
	} else {
		inet_ntop(AF_INET6, s->addr, a, sizeof(a));
		snprintf(out, len, "[%s]:%u", a, ntohs(s->port));
	}
}

static void ago(__u64 now, __u64 t, char *out, size_t len)
{
	if (!t)
		snprintf(out, len, "never");
	else if (t >= now)
		snprintf(out, len, "0s ago");
	else
		snprintf(out, len, "%llus ago", (unsigned long long)((now - t) / 1000000000ull));
}

/* One row of hbctl conns, from either map. */
struct row {
	bool udp;
	__u64 cookie; /* tcp */
	__u64 device_id;
	enum hb_state state;
	__u64 last_seen_ns; /* 0: never */
	__u64 pings, echoes;
	__u32 last_seq;
	char peer[HB_PEER_STR + 48];
};

struct filter {
	int transport; /* -1 any, 0 tcp, 1 udp */
	int state; /* -1 any */
	bool by_device;
	__u64 device;
	__u64 silent_ns; /* 0: any */
	__u64 now;
};

static bool keep(const struct filter *f, const struct row *r)
{
	if (f->transport >= 0 && r->udp != (f->transport == 1))
		return false;
	if (f->state >= 0 && (int)r->state != f->state)
		return false;
	if (f->by_device && r->device_id != f->device)
		return false;
	/* "silent for more than N s": never heard from counts as silent forever */
	if (f->silent_ns && r->last_seen_ns && f->now > r->last_seen_ns &&
	    f->now - r->last_seen_ns <= f->silent_ns)
		return false;
	if (f->silent_ns && r->last_seen_ns && f->now <= r->last_seen_ns)
		return false;
	return true;
}

static int sort_key; /* for qsort's comparator: enum hbctl_sort */

static int cmp_rows(const void *x, const void *y)
{
	const struct row *a = x, *b = y;

	switch (sort_key) {
	case HBCTL_SORT_DEVICE:
		return a->device_id < b->device_id ? -1 : a->device_id > b->device_id;
	case HBCTL_SORT_PEER:
		return strcmp(a->peer, b->peer);
	case HBCTL_SORT_SILENT: /* longest silence first: the oldest last_seen, never-seen first */
		return a->last_seen_ns < b->last_seen_ns ? -1 : a->last_seen_ns > b->last_seen_ns;
	case HBCTL_SORT_PINGS:
		return a->pings > b->pings ? -1 : a->pings < b->pings;
	default:
		return 0;
	}
}

static int push_row(struct row **rows, size_t *n, size_t *cap, const struct row *r)
{
	if (*n == *cap) {
		size_t nc = *cap ? *cap * 2 : 1024;
		struct row *p = realloc(*rows, nc * sizeof(*p));

		if (!p)
			return -ENOMEM;
		*rows = p;
		*cap = nc;
	}
	(*rows)[(*n)++] = *r;
	return 0;
}

static void set_filter(const struct hbctl_conns_opts *o, struct filter *f)
{
	memset(f, 0, sizeof(*f));
	f->transport = o->transport;
	f->state = o->state;
	f->now = now_ns();
	f->device = o->device;
	f->by_device = o->by_device;
	if (o->silent_s >= 0) {
		f->silent_ns = (__u64)(o->silent_s * 1e9);
		if (!f->silent_ns)
			f->silent_ns = 1; /* "more than 0 s": anything not stamped this instant */
	}
	sort_key = o->sort;
}

/* Reads both maps into rows that pass the filter. Entries can vanish between next_key and
 * lookup (connections closing): those are skipped. */
static int collect(int cfd, int sfd, const struct filter *f, struct row **rows, size_t *n)
{
	struct hb_conn_key ck, cnext, *cprev = NULL;
	struct hb_session_key sk, snext, *sprev = NULL;
	struct hb_conn c;
	struct hb_session s;
	size_t cap = 0;
	struct row r;

	while (!bpf_map_get_next_key(cfd, cprev, &cnext)) {
		ck = cnext;
		cprev = &ck;
		if (bpf_map_lookup_elem(cfd, &ck, &c))
			continue;
		memset(&r, 0, sizeof(r));
		r.cookie = ck.cookie;
		r.device_id = c.device_id;
		r.state = c.state;
		r.last_seen_ns = c.last_seen_ns;
		r.pings = c.pings;
		r.echoes = c.echoes;
		r.last_seq = c.last_seq;
		c.peer[HB_PEER_STR - 1] = 0;
		pretty_peer(c.peer, r.peer, sizeof(r.peer));
		if (keep(f, &r) && push_row(rows, n, &cap, &r))
			return -ENOMEM;
	}
	while (!bpf_map_get_next_key(sfd, sprev, &snext)) {
		sk = snext;
		sprev = &sk;
		if (bpf_map_lookup_elem(sfd, &sk, &s))
			continue;
		memset(&r, 0, sizeof(r));
		r.udp = true;
		r.device_id = s.device_id;
		r.state = s.state;
		r.last_seen_ns = s.last_seen_ns;
		r.pings = s.pings;
		r.last_seq = s.last_seq;
		session_peer(&s, r.peer, sizeof(r.peer));
		if (keep(f, &r) && push_row(rows, n, &cap, &r))
			return -ENOMEM;
	}
	return 0;
}

static void print_json_row(struct hbj *j, const struct row *r, __u64 now)
{
	hbj_obj(j, NULL);
	hbj_str(j, "transport", r->udp ? "udp" : "tcp");
	/* the UDP token authenticates heartbeats: never printed; TCP rows carry the cookie */
	if (!r->udp)
		hbj_u64(j, "cookie", r->cookie);
	hbj_str(j, "peer", r->peer);
	hbj_u64(j, "device_id", r->device_id);
	hbj_str(j, "state", state_str(r->state));
	if (r->last_seen_ns)
		hbj_u64(j, "last_seen_ms_ago", now > r->last_seen_ns ? (now - r->last_seen_ns) / 1000000 : 0);
	else
		hbj_null(j, "last_seen_ms_ago");
	hbj_u64(j, "pings", r->pings);
	if (!r->udp)
		hbj_u64(j, "echoes", r->echoes);
	hbj_u64(j, "last_seq", r->last_seq);
	hbj_obj_end(j);
}

int hbctl_do_conns(const void *opts, int argc, char **argv)
{
	const struct hbctl_conns_opts *o = opts;
	const char *pin = o->pin_path;
	bool json = o->json;
	long limit = o->limit;
	__u64 ntcp = 0, nudp = 0, shown_tcp = 0, shown_udp = 0;
	struct row *rows = NULL;
	struct filter f;
	struct pinned p;
	struct hbj j;
	size_t n = 0;
	char last[32];
	int err;

	set_filter(o, &f);
	if (!open_all(pin, &p, false)) {
		close_all(&p);
		return HBCTL_FAIL;
	}
	err = collect(pinned_fd(&p, HB_MAP_CONNS), pinned_fd(&p, HB_MAP_SESSIONS), &f, &rows, &n);
	close_all(&p);
	if (err) {
		hb_err("reading the maps: %s", strerror(-err));
		free(rows);
		return HBCTL_FAIL;
	}
	if (sort_key)
		qsort(rows, n, sizeof(*rows), cmp_rows);
	for (size_t i = 0; i < n; i++)
		rows[i].udp ? nudp++ : ntcp++;
	if (json) {
		hbj_init(&j, stdout);
		hbj_obj(&j, NULL);
	} else {
		printf("%-9s %-47s %-20s %-8s %-14s %10s %8s\n", "TRANSPORT", "PEER", "DEVICE", "STATE",
		       "LAST HEARTBEAT", "PINGS", "LAST SEQ");
	}
	/* JSON keeps the two arrays; a sorted table is one list in the chosen order, an unsorted
	 * one lists TCP first */
	bool one_list = !json && sort_key;

	for (int pass = 0; pass < 2; pass++) {
		if (json)
			hbj_arr(&j, pass ? "sessions" : "conns");
		for (size_t i = 0; i < n; i++) {
			const struct row *r = &rows[i];
			__u64 *shown = r->udp ? &shown_udp : &shown_tcp;

			if (!one_list && r->udp != (pass == 1))
				continue;
			if (limit > 0 && *shown >= (__u64)limit)
				continue;
			(*shown)++;
			if (json) {
				print_json_row(&j, r, f.now);
			} else {
				char dev[24], seq[16];

				snprintf(dev, sizeof(dev), r->device_id ? "%llu" : "-",
					 (unsigned long long)r->device_id);
				snprintf(seq, sizeof(seq), r->pings ? "%u" : "-", r->last_seq);
				ago(f.now, r->last_seen_ns, last, sizeof(last));
				printf("%-9s %-47s %-20s %-8s %-14s %10llu %8s\n", r->udp ? "udp" : "tcp",
				       r->peer, dev, state_str(r->state), last,
				       (unsigned long long)r->pings, seq);
			}
		}
		if (json)
			hbj_arr_end(&j);
		if (one_list)
			break;
	}
	if (json) {
		hbj_obj(&j, "count");
		hbj_u64(&j, "tcp", ntcp);
		hbj_u64(&j, "udp", nudp);
		hbj_obj_end(&j);
		hbj_obj_end(&j);
		hbj_end(&j);
	} else {
		printf("%llu TCP connection(s), %llu UDP session(s)%s\n", (unsigned long long)ntcp,
		       (unsigned long long)nudp,
		       limit > 0 && (ntcp > (__u64)limit || nudp > (__u64)limit) ? " (listing cut at --limit)" : "");
	}
	free(rows);
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
	struct hbj j;
	int err;

	if (!open_all(pin, &p, false)) {
		close_all(&p);
		return HBCTL_FAIL;
	}
	err = hbk_read_kstats(pinned_fd(&p, HB_MAP_KSTATS), &k);
	if (!err)
		err = hbk_read_ustats(pinned_fd(&p, HB_MAP_USTATS), &u);
	close_all(&p);
	if (err) {
		hb_err("reading counters: %s", strerror(-err));
		return HBCTL_FAIL;
	}
	if (json) {
		/* pings_kernel and pings_user are a contract outside checks rely on */
		hbj_init(&j, stdout);
		hbj_obj(&j, NULL);
		hbj_u64(&j, "pings_kernel", k.xdp_pong + k.sk_pong);
		hbj_u64(&j, "pings_user", u.pings_user);
		hbj_obj(&j, "kernel");
		for (int i = 0; i < HB_KSTATS_N; i++)
			hbj_u64(&j, hbk_kstat_names[i], HBK_KSTAT(&k, i));
		hbj_obj_end(&j);
		hbj_obj(&j, "user");
		for (int i = 0; i < HB_USTATS_N; i++)
			hbj_u64(&j, hbk_ustat_names[i], HBK_USTAT(&u, i));
		hbj_obj_end(&j);
		hbj_obj_end(&j);
		hbj_end(&j);
		return HBCTL_OK;
	}
	printf("heartbeats answered: %llu in the kernel (xdp %llu, sockmap %llu), %llu by the daemon\n",
	       (unsigned long long)(k.xdp_pong + k.sk_pong), (unsigned long long)k.xdp_pong,
	       (unsigned long long)k.sk_pong, (unsigned long long)u.pings_user);
	printf("\nkernel (summed over CPUs)\n");
	for (int i = 0; i < HB_KSTATS_N; i++)
		printf("  %-22s %llu\n", hbk_kstat_names[i], (unsigned long long)HBK_KSTAT(&k, i));
	printf("\ndaemon (summed over %d worker slots)\n", HB_MAX_WORKERS);
	for (int i = 0; i < HB_USTATS_N; i++)
		printf("  %-22s %llu\n", hbk_ustat_names[i], (unsigned long long)HBK_USTAT(&u, i));
	return HBCTL_OK;
}
