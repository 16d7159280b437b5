// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbeat loader library, opening and loading: the three BPF objects over one set of shared maps,
 * libbpf's and libxdp's messages routed through hb_log, and freeing a handle (see hb_bpf.h). */
#include "hb_bpf.h"
#include "hb_bpf_internal.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xdp/libxdp.h>

#include "log.h"
#include "sk_skb_hb.skel.h"
#include "sockops_hb.skel.h"
#include "xdp_hb.skel.h"

const char *const hbk_map_names[] = {
	HB_MAP_CONNS,  HB_MAP_SESSIONS,	 HB_MAP_SOCKHASH, HB_MAP_KSTATS,      HB_MAP_USTATS,
	HB_MAP_CONFIG, HB_MAP_XDP_CHAIN, HB_MAP_SEEN,	  HB_MAP_LOCAL_ADDRS, NULL,
};

/* ------------------------------------------------------------------------------------------ */
/* Logging glue                                                                               */

/* While libxdp tries its dispatcher, the expected failures of that attempt (a kernel that
 * refuses freplace, a driver without native XDP) come out of libbpf and libxdp as warnings;
 * hbk_attach_xdp() then says in one line what happened, so they are demoted to debug. */
bool hbk_quiet_libs;

static int libxdp_print(enum libxdp_print_level level, const char *fmt, va_list ap)
{
	/* libxdp's INFO lines ("Falling back to ...") matter to an operator; its DEBUG do not. */
	enum hb_log_level l = level == LIBXDP_WARN   ? HB_LOG_WARN
			      : level == LIBXDP_INFO ? HB_LOG_INFO
						     : HB_LOG_DEBUG;

	hb_vlog(hbk_quiet_libs ? HB_LOG_DEBUG : l, fmt, ap);
	return 0;
}

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	/* libbpf's INFO chatter is only interesting when debugging (as in log.c) */
	hb_vlog(level == LIBBPF_WARN && !hbk_quiet_libs ? HB_LOG_WARN : HB_LOG_DEBUG, fmt, ap);
	return 0;
}

void hbk_route_logs(void)
{
	libbpf_set_print(libbpf_print);
	libxdp_set_print(libxdp_print);
}

/* ------------------------------------------------------------------------------------------ */
/* Opening and loading                                                                        */

/* LIBBPF_PIN_BY_NAME makes libbpf pin every map at load time under pin_root_path, and under
 * /sys/fs/bpf when none is given. hbeat pins explicitly and only at the end of a successful load
 * (hbk_pin), so a failed load cannot leave pins behind and tests never touch the real pin
 * directory: clear the paths libbpf derived at open. */
static void clear_pin_paths(struct bpf_object *obj)
{
	struct bpf_map *m;

	bpf_object__for_each_map(m, obj)
		bpf_map__set_pin_path(m, NULL);
}

/* Point every shared map of dst at the instance src already created. */
static int reuse_maps(struct bpf_object *dst, struct bpf_object *src)
{
	struct bpf_map *m, *s;
	int err;

	bpf_object__for_each_map(m, dst) {
		if (bpf_map__is_internal(m)) /* .rodata etc. are per object */
			continue;
		s = bpf_object__find_map_by_name(src, bpf_map__name(m));
		if (!s) {
			hb_err("map %s of %s has no counterpart in %s", bpf_map__name(m),
			       bpf_object__name(dst), bpf_object__name(src));
			return -ENOENT;
		}
		err = bpf_map__reuse_fd(m, bpf_map__fd(s));
		if (err) {
			hb_err("reusing map %s: %s", bpf_map__name(m), strerror(-err));
			return err;
		}
	}
	return 0;
}

static int load_xdp_plain(struct hbk *h)
{
	int err;

	err = xdp_hb__load(h->xdp);
	if (err) {
		hb_err("loading hb_xdp failed: %s (the verifier's log is above)", strerror(-err));
		return err;
	}
	h->xdp_loaded = true;
	return 0;
}

/* Opens xdp_hb over the maps of skskb; loads it unless the caller defers to libxdp. */
int hbk_open_xdp(struct hbk *h, bool load)
{
	int err;

	h->xdp = xdp_hb__open();
	if (!h->xdp) {
		err = -errno;
		hb_err("opening the xdp_hb object: %s", strerror(-err));
		return err;
	}
	clear_pin_paths(h->xdp->obj);
	err = reuse_maps(h->xdp->obj, h->skskb->obj);
	if (err)
		return err;
	h->xdp->rodata->hb_port = h->opts.port;
	h->xdp_loaded = false;
	return load ? load_xdp_plain(h) : 0;
}

int hbk_open(struct hbk **out, const struct hbk_opts *opts)
{
	struct hbk_opts o = opts ? *opts : (struct hbk_opts){ 0 };
	struct hbk *h;
	int err;

	*out = NULL;
	if (!o.port)
		o.port = HB_DEFAULT_PORT;
	if (!o.max_conns)
		o.max_conns = HB_MAX_CONNS;
	if (!o.max_sessions)
		o.max_sessions = HB_MAX_SESSIONS;

	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->opts = o;
	h->xdp_link_fd = -1;

	/* sk_skb_hb first: it creates the maps the other two reuse. */
	h->skskb = sk_skb_hb__open();
	if (!h->skskb) {
		err = -errno;
		hb_err("opening the sk_skb_hb object: %s", strerror(-err));
		goto fail;
	}
	clear_pin_paths(h->skskb->obj);
	h->skskb->rodata->hb_mqtt_port = o.mqtt_port;
	if ((err = bpf_map__set_max_entries(h->skskb->maps.conns, o.max_conns)) ||
	    (err = bpf_map__set_max_entries(h->skskb->maps.sockhash, o.max_conns)) ||
	    (err = bpf_map__set_max_entries(h->skskb->maps.sessions, o.max_sessions)) ||
	    (err = bpf_map__set_max_entries(h->skskb->maps.seen, o.max_conns + o.max_sessions)))
		goto fail;
	err = sk_skb_hb__load(h->skskb);
	if (err) {
		hb_err("loading hb_parser/hb_verdict failed: %s (the verifier's log is above)",
		       strerror(-err));
		goto fail;
	}

	h->sockops = sockops_hb__open();
	if (!h->sockops) {
		err = -errno;
		hb_err("opening the sockops_hb object: %s", strerror(-err));
		goto fail;
	}
	clear_pin_paths(h->sockops->obj);
	err = reuse_maps(h->sockops->obj, h->skskb->obj);
	if (err)
		goto fail;
	h->sockops->rodata->hb_port = o.port;
	h->sockops->rodata->hb_netns_cookie = o.netns_cookie;
	h->sockops->rodata->hb_mqtt_port = o.mqtt_port;
	err = sockops_hb__load(h->sockops);
	if (err) {
		hb_err("loading hb_sockops failed: %s (the verifier's log is above)",
		       strerror(-err));
		goto fail;
	}

	err = hbk_open_xdp(h, !o.xdp_defer_load);
	if (err)
		goto fail;

	*out = h;
	return 0;
fail:
	hbk_free(h); /* nothing is attached yet */
	return err;
}

void hbk_free(struct hbk *h)
{
	if (!h)
		return;
	/* For a pinned link these only close our fds; the pins keep the attachments. */
	xdp_program__close(h->xdp_prog);
	if (h->xdp_link_fd >= 0)
		close(h->xdp_link_fd);
	bpf_link__destroy(h->sockops_link);
	xdp_hb__destroy(h->xdp);
	sockops_hb__destroy(h->sockops);
	sk_skb_hb__destroy(h->skskb);
	free(h);
}

int hbk_map_fd(const struct hbk *h, const char *name)
{
	struct bpf_map *m = bpf_object__find_map_by_name(h->skskb->obj, name);

	return m ? bpf_map__fd(m) : -ENOENT;
}

int hbk_prog_fd(const struct hbk *h, const char *prog_name)
{
	struct bpf_object *objs[] = { h->skskb->obj, h->sockops->obj, h->xdp ? h->xdp->obj : NULL };
	struct bpf_program *p;
	int fd;

	for (size_t i = 0; i < sizeof(objs) / sizeof(objs[0]); i++) {
		if (!objs[i])
			continue;
		p = bpf_object__find_program_by_name(objs[i], prog_name);
		if (p) {
			fd = bpf_program__fd(p);
			return fd >= 0 ? fd : -EBADF;
		}
	}
	return -ENOENT;
}
