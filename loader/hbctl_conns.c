// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbctl conns: the live TCP connections and UDP sessions from the kernel maps, filtered and
 * sorted, with the kernel's RTT and last-ACK age of each TCP connection (hb_diag.h). */
#include "hbctl.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "clock.h"
#include "hb_diag.h"
#include "json_out.h"
#include "log.h"
#include "pins.h"

static const char *state_str(enum hb_state s)
{
	switch (s) {
	case HB_STATE_NEW:
		return "new";
	case HB_STATE_AUTHED:
		return "authed";
	case HB_STATE_CLOSING:
		return "closing";
	default:
		return "?";
	}
}

/* "[0000:...:0001]:port" (bpf_snprintf's full %pI6) → "[::1]:port" for people. raw is the
 * map's text, inlen bytes that need not end in a NUL. */
static void pretty_peer(const char *raw, size_t inlen, char *out, size_t len)
{
	char addr[64], in[HB_PEER_STR];
	const char *close;
	struct in6_addr a;

	snprintf(in, sizeof(in), "%.*s", (int)(inlen < sizeof(in) ? inlen : sizeof(in) - 1), raw);
	close = strchr(in, ']');

	if (in[0] == '[' && close && (size_t)(close - in - 1) < sizeof(addr)) {
		memcpy(addr, in + 1, close - in - 1);
		addr[close - in - 1] = 0;
		if (inet_pton(AF_INET6, addr, &a) == 1 &&
		    inet_ntop(AF_INET6, &a, addr, sizeof(addr))) {
			snprintf(out, len, "[%s]%s", addr, close + 1);
			return;
		}
	}
	snprintf(out, len, "%s", in);
}

/* "a.b.c.d:port" or "[v6]:port" of a 16-byte address (IPv4 as v4-mapped) and a host-order
 * port. */
static void addr_text(const __u8 addr[16], __u16 port, char *out, size_t len)
{
	static const __u8 mapped[12] = { [10] = 0xff, [11] = 0xff };
	char a[INET6_ADDRSTRLEN];

	if (!memcmp(addr, mapped, 12)) {
		inet_ntop(AF_INET, addr + 12, a, sizeof(a));
		snprintf(out, len, "%s:%u", a, port);
	} else {
		inet_ntop(AF_INET6, addr, a, sizeof(a));
		snprintf(out, len, "[%s]:%u", a, port);
	}
}

/* A session's peer from its address when the daemon left the text empty. */
static void session_peer(const struct hb_session *s, char *out, size_t len)
{
	if (s->peer[0])
		snprintf(out, len, "%.*s", (int)sizeof(s->peer), s->peer);
	else
		addr_text(s->addr, ntohs(s->port), out, len);
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
	bool keepalive; /* tcp: sock_ops turned TCP keepalive on */
	bool mqtt; /* tcp: an MQTT device (hbctl load --mqtt-port) */
	__u16 mqtt_keepalive; /* its CONNECT's keepalive, seconds */
	bool by_hbd; /* tcp: hbd answers its heartbeats (--tcp user|keepalive): no kernel counts */
	bool diag; /* tcp: the kernel's view below is known (hb_diag.h) */
	__u32 rtt_us, last_ack_ms;
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
	f->now = hb_mono_ns();
	f->device = o->device;
	f->by_device = o->by_device;
	if (o->silent_s >= 0) {
		f->silent_ns = (__u64)(o->silent_s * 1e9);
		if (!f->silent_ns)
			f->silent_ns = 1; /* "more than 0 s": anything not stamped this instant */
	}
	sort_key = o->sort;
}

/* Entries read per lookup_batch call: a few syscalls for the whole map instead of two an
 * entry (next key, lookup). A hash bucket holds far fewer. */
#define CONNS_BATCH 256

/* The heartbeat stamps hbd writes by slot (the seen map), read in place: one mapping instead
 * of a lookup per row. Without a mapping (pins of older versions lack the map, or it is not
 * mmapable) each stamp is looked up. */
struct seen_view {
	int fd; /* -1: no seen map */
	const __u64 *slot;
	__u32 nslots;
	size_t len;
};

static void seen_open(const char *pin, struct seen_view *v)
{
	struct bpf_map_info info = { 0 };
	__u32 ilen = sizeof(info);
	long pg = sysconf(_SC_PAGESIZE);
	void *p;

	memset(v, 0, sizeof(*v));
	v->fd = hb_pin_open(pin, HB_MAP_SEEN, NULL, 0);
	if (v->fd < 0 || bpf_obj_get_info_by_fd(v->fd, &info, &ilen) ||
	    !(info.map_flags & BPF_F_MMAPABLE) || info.value_size != sizeof(__u64) || pg <= 0)
		return;
	v->len = ((size_t)info.max_entries * sizeof(__u64) + (size_t)pg - 1) & ~((size_t)pg - 1);
	p = mmap(NULL, v->len, PROT_READ, MAP_SHARED, v->fd, 0);
	if (p == MAP_FAILED)
		return;
	v->slot = p;
	v->nslots = info.max_entries;
}

static void seen_close(struct seen_view *v)
{
	if (v->slot)
		munmap((void *)v->slot, v->len);
	if (v->fd >= 0)
		close(v->fd);
	v->fd = -1;
	v->slot = NULL;
}

/* The later of an entry's stamp and its seen slot's: the slot is where hbd stamps the
 * heartbeats it answers (the kernel stamps both). */
static __u64 stamp(const struct seen_view *v, __u32 slot, __u64 ns)
{
	__u64 s = 0;

	if (!slot || v->fd < 0)
		return ns;
	if (v->slot) {
		if (slot < v->nslots)
			s = __atomic_load_n(&v->slot[slot], __ATOMIC_RELAXED);
	} else if (bpf_map_lookup_elem(v->fd, &slot, &s)) {
		s = 0;
	}
	return s > ns ? s : ns;
}

struct collect_ctx {
	const struct filter *f;
	const struct seen_view *seen;
	bool by_hbd; /* the TCP path is not the kernel's */
	struct row **rows;
	size_t *n, cap;
};

static int conn_row(const void *key, const void *val, void *arg)
{
	const struct hb_conn_key *ck = key;
	const struct hb_conn *c = val;
	struct collect_ctx *x = arg;
	struct row r = { 0 };

	r.cookie = ck->cookie;
	r.device_id = c->device_id;
	r.state = c->state;
	r.last_seen_ns = stamp(x->seen, c->seen_slot, c->last_seen_ns);
	r.by_hbd = x->by_hbd;
	r.pings = c->pings;
	r.echoes = c->echoes;
	r.last_seq = c->last_seq;
	r.keepalive = c->flags & HB_CONN_KEEPALIVE;
	r.mqtt = c->flags & HB_CONN_MQTT;
	r.mqtt_keepalive = (__u16)(c->flags >> HB_CONN_MQTT_KA_SHIFT);
	pretty_peer(c->peer, sizeof(c->peer), r.peer, sizeof(r.peer));
	return keep(x->f, &r) ? push_row(x->rows, x->n, &x->cap, &r) : 0;
}

static int session_row(const void *key, const void *val, void *arg)
{
	const struct hb_session *s = val;
	struct collect_ctx *x = arg;
	struct row r = { 0 };

	(void)key;
	r.udp = true;
	r.device_id = s->device_id;
	r.state = s->state;
	r.last_seen_ns = stamp(x->seen, s->seen_slot, s->last_seen_ns);
	r.pings = s->pings;
	r.last_seq = s->last_seq;
	session_peer(s, r.peer, sizeof(r.peer));
	return keep(x->f, &r) ? push_row(x->rows, x->n, &x->cap, &r) : 0;
}

/* Every entry of a hash map, CONNS_BATCH at a time, handed to fn (which returns 0 or a
 * -errno that stops the walk). Entries added or removed meanwhile (connections opening and
 * closing) may or may not be seen, as with a walk by next key. */
static int each_entry(int fd, size_t ksz, size_t vsz,
		      int (*fn)(const void *key, const void *val, void *arg), void *arg)
{
	LIBBPF_OPTS(bpf_map_batch_opts, opts);
	char *keys = malloc(CONNS_BATCH * ksz), *vals = malloc(CONNS_BATCH * vsz);
	__u32 in = 0, out = 0, count;
	bool first = true, last = false;
	int err = 0;

	if (!keys || !vals)
		err = -ENOMEM;
	while (!err && !last) {
		count = CONNS_BATCH;
		/* ENOENT: this was the last batch (count may be 0) */
		if (bpf_map_lookup_batch(fd, first ? NULL : &in, &out, keys, vals, &count, &opts)) {
			if (errno != ENOENT) {
				err = -errno;
				break;
			}
			last = true;
		}
		for (__u32 i = 0; i < count && !err; i++)
			err = fn(keys + i * ksz, vals + i * vsz, arg);
		in = out;
		first = false;
	}
	free(keys);
	free(vals);
	return err;
}

/* Reads both maps into rows that pass the filter. */
static int collect(int cfd, int sfd, const struct seen_view *seen, bool by_hbd,
		   const struct filter *f, struct row **rows, size_t *n)
{
	struct collect_ctx x = { .f = f, .seen = seen, .by_hbd = by_hbd, .rows = rows, .n = n };
	int err = each_entry(cfd, sizeof(struct hb_conn_key), sizeof(struct hb_conn), conn_row, &x);

	return err ? err
		   : each_entry(sfd, sizeof(struct hb_session_key), sizeof(struct hb_session),
				session_row, &x);
}

/* A TCP row's kernel figure: the value, or null when the kernel did not say; no key for UDP. */
static json_t *tcp_figure(const struct row *r, __u32 v)
{
	if (r->udp)
		return NULL;
	return r->diag ? json_integer(v) : json_null();
}

static json_t *json_row(const struct row *r, __u64 now)
{
	__u64 ago = now > r->last_seen_ns ? (now - r->last_seen_ns) / 1000000 : 0;

	/* the UDP token authenticates heartbeats: never printed; TCP rows carry the cookie */
	return json_pack("{s:s,s:o*,s:o*,s:o,s:o,s:s,s:o,s:o,s:o*,s:o,s:o*,s:o*,s:o*}", "transport",
			 r->udp ? "udp" : "tcp", "mqtt_keepalive_s",
			 r->mqtt ? json_integer(r->mqtt_keepalive) : NULL, "cookie",
			 r->udp ? NULL : hb_json_u64(r->cookie), "peer", hb_json_str(r->peer),
			 "device_id", hb_json_u64(r->device_id), "state", state_str(r->state),
			 "last_seen_ms_ago", r->last_seen_ns ? hb_json_u64(ago) : json_null(),
			 "pings", r->by_hbd ? json_null() : hb_json_u64(r->pings), "echoes",
			 r->udp	     ? NULL
			 : r->by_hbd ? json_null()
				     : hb_json_u64(r->echoes),
			 "last_seq", r->by_hbd ? json_null() : json_integer(r->last_seq),
			 "keepalive", r->udp ? NULL : json_boolean(r->keepalive), "rtt_us",
			 tcp_figure(r, r->rtt_us), "last_ack_ms", tcp_figure(r, r->last_ack_ms));
}

/* The kernel's RTT and last-ACK age for the TCP rows (hb_diag.h). One exact lookup a row when
 * --device picked a few, else one dump of the port, which walks the kernel's whole established
 * table. A row the kernel does not know (closed meanwhile) keeps diag false; failing to ask at
 * all is said once and the listing goes on without the figures. */
static void add_kernel_view(struct row *rows, size_t n, __u16 port, bool one_device)
{
	struct hbk_tcp_diag *all = NULL, d;
	size_t nall = 0, ntcp = 0;
	int err = 0;

	for (size_t i = 0; i < n; i++)
		ntcp += !rows[i].udp;
	if (!ntcp || !port)
		return;
	if (one_device && ntcp <= 4) {
		for (size_t i = 0; i < n; i++) {
			struct row *r = &rows[i];

			if (r->udp)
				continue;
			if (!r->peer[0]) { /* hbd made the entry (--tcp user): the dump knows it */
				err = -ENOENT;
				break;
			}
			err = hbk_diag_lookup(r->peer, port, r->cookie, &d);
			if (err == -ENOENT) /* not on a local address of ours: ask the dump */
				break;
			if (err)
				goto fail;
			r->diag = true;
			r->rtt_us = d.rtt_us;
			r->last_ack_ms = d.last_ack_ms;
		}
		if (!err)
			return;
	}
	err = hbk_diag_dump(port, &all, &nall);
	if (err)
		goto fail;
	for (size_t i = 0; i < n; i++) {
		const struct hbk_tcp_diag *k =
			rows[i].udp ? NULL : hbk_diag_find(all, nall, rows[i].cookie);

		if (k) {
			rows[i].diag = true;
			rows[i].rtt_us = k->rtt_us;
			rows[i].last_ack_ms = k->last_ack_ms;
			if (!rows[i].peer[0])
				/* hbd made the entry (--tcp user): sock_diag knows the peer */
				addr_text(k->peer_addr, k->peer_port, rows[i].peer,
					  sizeof(rows[i].peer));
		}
	}
	free(all);
	return;
fail:
	hb_warn("the kernel's RTT and last ACK are not shown: sock_diag: %s", strerror(-err));
}

/* The TRANSPORT column of an MQTT device: "mqtt/30s", its keepalive. */
static const char *mqtt_col(const struct row *r, char *out, size_t len)
{
	snprintf(out, len, "mqtt/%us", r->mqtt_keepalive);
	return out;
}

/* "1.23ms" / "-": a TCP row's RTT for the table. */
static void rtt_text(const struct row *r, char *out, size_t len)
{
	if (r->udp || !r->diag)
		snprintf(out, len, "-");
	else
		snprintf(out, len, "%.2fms", r->rtt_us / 1000.0);
}

static void last_ack_text(const struct row *r, char *out, size_t len)
{
	if (r->udp || !r->diag)
		snprintf(out, len, "-");
	else
		snprintf(out, len, "%.1fs ago", r->last_ack_ms / 1000.0);
}

int hbctl_do_conns(const void *opts, int argc, char **argv)
{
	const struct hbctl_conns_opts *o = opts;
	const char *pin = o->pin_path;
	bool json = o->json;
	long limit = o->limit;
	__u64 ntcp = 0, nudp = 0, shown_tcp = 0, shown_udp = 0;
	struct row *rows = NULL;
	struct hb_config cfg = { 0 };
	struct filter f;
	size_t n = 0;
	char last[32];
	struct seen_view seen;
	int cfd, sfd, kfd, err;
	__u32 zero = 0;

	set_filter(o, &f);
	cfd = hb_pin_open(pin, HB_MAP_CONNS, NULL, 0);
	sfd = hb_pin_open(pin, HB_MAP_SESSIONS, NULL, 0);
	kfd = hb_pin_open(pin, HB_MAP_CONFIG, NULL, 0);
	seen_open(pin, &seen);
	if (cfd < 0 || sfd < 0 || kfd < 0) {
		hb_err("hbeat is not loaded (no pins in %s); load it with: hbctl load --dev IFACE",
		       pin);
		err = -ENOENT;
	} else {
		bpf_map_lookup_elem(kfd, &zero, &cfg);
		err = collect(cfd, sfd, &seen, cfg.tcp_path != HB_TCP_KERNEL, &f, &rows, &n);
		if (err)
			hb_err("reading the maps: %s", strerror(-err));
	}
	if (cfd >= 0)
		close(cfd);
	if (sfd >= 0)
		close(sfd);
	if (kfd >= 0)
		close(kfd);
	seen_close(&seen);
	if (err) {
		free(rows);
		return HBCTL_FAIL;
	}
	add_kernel_view(rows, n, cfg.port, o->by_device);
	if (sort_key && n)
		qsort(rows, n, sizeof(*rows), cmp_rows);
	for (size_t i = 0; i < n; i++)
		rows[i].udp ? nudp++ : ntcp++;
	/* JSON: the envelope is written here and each row by jansson as it comes, so a listing of
	 * half a million connections is never one document in memory */
	if (json) {
		fputc('{', stdout);
	} else {
		printf("%-9s %-47s %-20s %-8s %-14s %10s %8s %9s %11s\n", "TRANSPORT", "PEER",
		       "DEVICE", "STATE", "LAST HEARTBEAT", "PINGS", "LAST SEQ", "RTT", "LAST ACK");
	}
	/* JSON keeps the two arrays; a sorted table is one list in the chosen order, an unsorted
	 * one lists TCP first */
	bool one_list = !json && sort_key;

	for (int pass = 0; pass < 2; pass++) {
		bool first = true;

		if (json)
			printf("%s\"%s\":[", pass ? "," : "", pass ? "sessions" : "conns");
		for (size_t i = 0; i < n; i++) {
			const struct row *r = &rows[i];
			__u64 *shown = r->udp ? &shown_udp : &shown_tcp;

			if (!one_list && r->udp != (pass == 1))
				continue;
			if (limit > 0 && *shown >= (__u64)limit)
				continue;
			(*shown)++;
			if (json) {
				if (!first)
					fputc(',', stdout);
				first = false;
				hb_json_dump(stdout, json_row(r, f.now));
			} else {
				char dev[24], seq[16], pings[24], rtt[16], ack[24], ka[16];

				snprintf(dev, sizeof(dev), r->device_id ? "%llu" : "-",
					 (unsigned long long)r->device_id);
				snprintf(seq, sizeof(seq), r->pings ? "%u" : "-", r->last_seq);
				snprintf(pings, sizeof(pings), r->by_hbd ? "-" : "%llu",
					 (unsigned long long)r->pings);
				ago(f.now, r->last_seen_ns, last, sizeof(last));
				rtt_text(r, rtt, sizeof(rtt));
				last_ack_text(r, ack, sizeof(ack));
				printf("%-9s %-47s %-20s %-8s %-14s %10s %8s %9s %11s\n",
				       r->udp	 ? "udp"
				       : r->mqtt ? mqtt_col(r, ka, sizeof(ka))
						 : "tcp",
				       r->peer, dev, state_str(r->state), last, pings, seq, rtt,
				       ack);
			}
		}
		if (json)
			fputc(']', stdout);
		if (one_list)
			break;
	}
	if (json) {
		fputs(",\"count\":", stdout);
		hb_json_dump(stdout, json_pack("{s:o,s:o}", "tcp", hb_json_u64(ntcp), "udp",
					       hb_json_u64(nudp)));
		fputs("}\n", stdout);
		fflush(stdout);
	} else {
		printf("%llu TCP connection(s), %llu UDP session(s)%s\n", (unsigned long long)ntcp,
		       (unsigned long long)nudp,
		       limit > 0 && (ntcp > (__u64)limit || nudp > (__u64)limit)
			       ? " (listing cut at --limit)"
			       : "");
	}
	free(rows);
	return HBCTL_OK;
}
