// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbeat loader library: load, attach, pin, detach and unload the BPF side (see hb_bpf.h). */
#include "hb_bpf.h"
#include "hb_env.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xdp/libxdp.h>

#include "log.h"
#include "sk_skb_hb.skel.h"
#include "sockops_hb.skel.h"
#include "xdp_hb.skel.h"

#ifndef SO_NETNS_COOKIE
#define SO_NETNS_COOKIE 71
#endif

const char *const hbk_map_names[] = {
	HB_MAP_CONNS, HB_MAP_SESSIONS, HB_MAP_SOCKHASH, HB_MAP_KSTATS, HB_MAP_USTATS, HB_MAP_CONFIG,
	HB_MAP_XDP_CHAIN, HB_MAP_SEEN, NULL,
};

#define HBK_NAME(n) #n,
const char *const hbk_kstat_names[] = { HB_KSTATS(HBK_NAME) NULL };
const char *const hbk_ustat_names[] = { HB_USTATS(HBK_NAME) NULL };

/* ------------------------------------------------------------------------------------------ */
/* Logging glue                                                                               */

/* While libxdp tries its dispatcher, the expected failures of that attempt (a kernel that
 * refuses freplace, a driver without native XDP) come out of libbpf and libxdp as warnings;
 * hbk_attach_xdp() then says in one line what happened, so they are demoted to debug. */
static bool quiet_libs;

static int libxdp_print(enum libxdp_print_level level, const char *fmt, va_list ap)
{
	/* libxdp's INFO lines ("Falling back to ...") matter to an operator; its DEBUG do not. */
	enum hb_log_level l = level == LIBXDP_WARN   ? HB_LOG_WARN
			      : level == LIBXDP_INFO ? HB_LOG_INFO
						     : HB_LOG_DEBUG;

	hb_vlog(quiet_libs ? HB_LOG_DEBUG : l, fmt, ap);
	return 0;
}

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	/* libbpf's INFO chatter is only interesting when debugging (as in log.c) */
	hb_vlog(level == LIBBPF_WARN && !quiet_libs ? HB_LOG_WARN : HB_LOG_DEBUG, fmt, ap);
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
static int open_xdp(struct hbk *h, bool load)
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
	err = sockops_hb__load(h->sockops);
	if (err) {
		hb_err("loading hb_sockops failed: %s (the verifier's log is above)", strerror(-err));
		goto fail;
	}

	err = open_xdp(h, !o.xdp_defer_load);
	if (err)
		goto fail;

	*out = h;
	return 0;
fail:
	hbk_close(h);
	return err;
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

/* ------------------------------------------------------------------------------------------ */
/* Attaching                                                                                  */

int hbk_attach_sockmap(struct hbk *h)
{
	int map = bpf_map__fd(h->skskb->maps.sockhash);
	int parser = bpf_program__fd(h->skskb->progs.hb_parser);
	int verdict = bpf_program__fd(h->skskb->progs.hb_verdict);
	int err;

	/* libbpf 1.1 has no sockmap attach helper; the map-targeted BPF_PROG_ATTACH is the API. */
	err = bpf_prog_attach(parser, map, BPF_SK_SKB_STREAM_PARSER, 0);
	if (err) {
		hb_err("attaching hb_parser to the sockhash: %s", strerror(-err));
		return err;
	}
	err = bpf_prog_attach(verdict, map, BPF_SK_SKB_STREAM_VERDICT, 0);
	if (err) {
		hb_err("attaching hb_verdict to the sockhash: %s", strerror(-err));
		bpf_prog_detach2(parser, map, BPF_SK_SKB_STREAM_PARSER);
		return err;
	}
	h->sockmap_attached = true;
	return 0;
}

int hbk_detach_sockmap(struct hbk *h)
{
	int map = bpf_map__fd(h->skskb->maps.sockhash);
	int e1, e2;

	if (!h->sockmap_attached)
		return 0;
	e1 = bpf_prog_detach2(bpf_program__fd(h->skskb->progs.hb_verdict), map,
			      BPF_SK_SKB_STREAM_VERDICT);
	e2 = bpf_prog_detach2(bpf_program__fd(h->skskb->progs.hb_parser), map,
			      BPF_SK_SKB_STREAM_PARSER);
	h->sockmap_attached = false;
	return e1 ? e1 : e2;
}

int hbk_attach_sockops(struct hbk *h, const char *cgroup_path)
{
	int cg, err;

	if (h->sockops_link)
		return -EALREADY;
	if (!cgroup_path)
		cgroup_path = HBK_DEFAULT_CGROUP;
	cg = open(cgroup_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cg < 0) {
		err = -errno;
		hb_err("opening cgroup %s: %s", cgroup_path, strerror(-err));
		return err;
	}
	/* A bpf_link, not BPF_PROG_ATTACH: it can be pinned, and is multi-attach by nature. */
	h->sockops_link = bpf_program__attach_cgroup(h->sockops->progs.hb_sockops, cg);
	err = h->sockops_link ? 0 : -errno;
	close(cg); /* the link holds its own reference to the cgroup */
	if (err)
		hb_err("attaching hb_sockops to cgroup %s: %s", cgroup_path, strerror(-err));
	return err;
}

static enum xdp_attach_mode to_libxdp_mode(enum hb_xdp_mode m)
{
	return m == HB_XDP_SKB ? XDP_MODE_SKB : XDP_MODE_NATIVE;
}

/* The hbeat program among those libxdp found on a NIC (owned by mp), or NULL. */
static struct xdp_program *find_hb_prog(struct xdp_multiprog *mp)
{
	struct xdp_program *p;

	if (!mp)
		return NULL;
	if (xdp_multiprog__is_legacy(mp)) {
		p = xdp_multiprog__main_prog(mp);
		return p && !strcmp(xdp_program__name(p), HBK_PROG_XDP) ? p : NULL;
	}
	for (p = xdp_multiprog__next_prog(NULL, mp); p; p = xdp_multiprog__next_prog(p, mp))
		if (!strcmp(xdp_program__name(p), HBK_PROG_XDP))
			return p;
	return NULL;
}

static struct xdp_multiprog *get_multiprog(int ifindex)
{
	struct xdp_multiprog *mp = xdp_multiprog__get_from_ifindex(ifindex);

	return libxdp_get_error(mp) ? NULL : mp;
}

/* Fallback when libxdp cannot attach: a plain XDP bpf_link (kernel 5.9). The object libxdp was
 * given may be half-loaded as a dispatcher component, so it is reopened as a plain XDP program. */
static int attach_xdp_link(struct hbk *h, int ifindex, enum hb_xdp_mode mode)
{
	LIBBPF_OPTS(bpf_link_create_opts, lo);
	int err, fd;

	if (!h->xdp_loaded || bpf_program__type(h->xdp->progs.hb_xdp) != BPF_PROG_TYPE_XDP) {
		xdp_hb__destroy(h->xdp);
		h->xdp = NULL;
		err = open_xdp(h, true);
		if (err)
			return err;
	}
	lo.flags = mode == HB_XDP_SKB ? XDP_FLAGS_SKB_MODE : XDP_FLAGS_DRV_MODE;
	fd = bpf_link_create(bpf_program__fd(h->xdp->progs.hb_xdp), ifindex, BPF_XDP, &lo);
	if (fd < 0)
		return fd;
	h->xdp_link_fd = fd;
	return 0;
}

int hbk_attach_xdp(struct hbk *h, int ifindex, enum hb_xdp_mode mode)
{
	struct xdp_multiprog *mp;
	struct xdp_program *prog, *existing;
	int err;

	if (h->xdp_how != HBK_XDP_NONE)
		return -EALREADY;

	mp = get_multiprog(ifindex);
	existing = find_hb_prog(mp);
	if (existing) {
		hb_err("ifindex %d already runs %s (id %u)", ifindex, HBK_PROG_XDP,
		       xdp_program__id(existing));
		xdp_multiprog__close(mp);
		return -EEXIST;
	}
	if (mp && xdp_multiprog__is_legacy(mp) && xdp_multiprog__main_prog(mp)) {
		struct xdp_program *other = xdp_multiprog__main_prog(mp);

		hb_err("ifindex %d already runs XDP program %s (id %u), attached without libxdp's "
		       "dispatcher, so it cannot share the NIC", ifindex, xdp_program__name(other),
		       xdp_program__id(other));
		xdp_multiprog__close(mp);
		return -EBUSY;
	}
	xdp_multiprog__close(mp);

	if (!h->xdp_loaded) {
		DECLARE_LIBXDP_OPTS(xdp_program_opts, xo, .obj = h->xdp->obj,
				    .prog_name = HBK_PROG_XDP);

		prog = xdp_program__create(&xo);
		err = libxdp_get_error(prog);
		if (err) {
			hb_warn("libxdp could not take hb_xdp: %s", strerror(-err));
			goto fallback;
		}
		quiet_libs = true;
		err = xdp_program__attach(prog, ifindex, to_libxdp_mode(mode), 0);
		quiet_libs = false;
		if (err) {
			xdp_program__close(prog);
			/* A driver without native XDP refuses a plain link just the same: say so. */
			if (err == -EOPNOTSUPP && mode == HB_XDP_NATIVE)
				return err;
			hb_warn("libxdp could not attach hb_xdp: %s", strerror(-err));
			goto fallback;
		}
		h->xdp_prog = prog;
		h->xdp_loaded = true;
		mp = get_multiprog(ifindex);
		h->xdp_how = mp && !xdp_multiprog__is_legacy(mp) ? HBK_XDP_DISPATCHER
								  : HBK_XDP_LIBXDP_LEGACY;
		xdp_multiprog__close(mp);
		if (h->xdp_how == HBK_XDP_LIBXDP_LEGACY) {
			char why[256];

			if (hbe_probe_freplace(why, sizeof(why)))
				hb_warn("libxdp's multi-program dispatcher is unavailable: %s. hb_xdp is "
					"attached alone (libxdp legacy mode): other XDP programs cannot "
					"share this NIC (docs/COEXISTENCE.md)", why);
			else
				hb_warn("libxdp could not use its multi-program dispatcher although the "
					"kernel loads freplace programs (hbctl -v shows libxdp's reason); "
					"hb_xdp is attached alone: other XDP programs cannot share this NIC");
		}
		goto done;
	}

	/* Loaded as a plain XDP program already (the caller chose it): a link is the way. */
	hb_dbg("attaching hb_xdp with a plain XDP bpf_link");
	goto link;
fallback:
	hb_warn("falling back to a plain XDP bpf_link (no coexistence with other XDP programs)");
link:
	err = attach_xdp_link(h, ifindex, mode);
	if (err) {
		hb_err("attaching hb_xdp to ifindex %d: %s", ifindex, strerror(-err));
		return err;
	}
	h->xdp_how = HBK_XDP_LINK;
done:
	h->xdp_ifindex = ifindex;
	h->xdp_mode = mode;
	return 0;
}

int hbk_detach_xdp(struct hbk *h)
{
	int err = 0;

	switch (h->xdp_how) {
	case HBK_XDP_DISPATCHER:
	case HBK_XDP_LIBXDP_LEGACY:
		err = xdp_program__detach(h->xdp_prog, h->xdp_ifindex, to_libxdp_mode(h->xdp_mode), 0);
		if (err)
			hb_err("detaching hb_xdp from ifindex %d: %s", h->xdp_ifindex, strerror(-err));
		break;
	case HBK_XDP_LINK:
		err = bpf_link_detach(h->xdp_link_fd);
		break;
	case HBK_XDP_NONE:
		return 0;
	}
	xdp_program__close(h->xdp_prog);
	h->xdp_prog = NULL;
	if (h->xdp_link_fd >= 0)
		close(h->xdp_link_fd);
	h->xdp_link_fd = -1;
	h->xdp_how = HBK_XDP_NONE;
	return err;
}

int hbk_chain_xdp(struct hbk *h, const char *file, const char *prog, __u32 *id)
{
	struct bpf_object *obj = bpf_object__open_file(file, NULL);
	struct bpf_program *p = NULL, *q;
	struct bpf_prog_info info = { 0 };
	__u32 zero = 0, len = sizeof(info);
	int err, fd;

	if (!obj) {
		err = -errno;
		hb_err("opening %s: %s", file, strerror(-err));
		return err;
	}
	bpf_object__for_each_program(q, obj) {
		bool want = prog ? !strcmp(bpf_program__name(q), prog)
				 : !p && bpf_program__type(q) == BPF_PROG_TYPE_XDP;

		bpf_program__set_autoload(q, want);
		if (want)
			p = q;
	}
	if (!p || bpf_program__type(p) != BPF_PROG_TYPE_XDP) {
		hb_err("%s has no XDP program%s%s", file, prog ? " named " : "", prog ? prog : "");
		err = -ENOENT;
		goto out;
	}
	err = bpf_object__load(obj);
	if (err) {
		hb_err("loading %s from %s: %s", bpf_program__name(p), file, strerror(-err));
		goto out;
	}
	fd = bpf_program__fd(p);
	/* the prog array holds the program from here on; the object can go */
	if (bpf_map_update_elem(hbk_map_fd(h, HB_MAP_XDP_CHAIN), &zero, &fd, BPF_ANY)) {
		err = -errno;
		hb_err("chaining %s after hb_xdp: %s%s", bpf_program__name(p), strerror(-err),
		       err == -EINVAL ? " (it must be a plain XDP program without frags)" : "");
		goto out;
	}
	bpf_obj_get_info_by_fd(fd, &info, &len);
	*id = info.id;
out:
	bpf_object__close(obj);
	return err;
}

int hbk_chain_query(int chain_fd, __u32 *id, char *name, size_t len)
{
	struct bpf_prog_info info = { 0 };
	__u32 zero = 0, ilen = sizeof(info);
	int fd;

	*id = 0;
	if (len)
		name[0] = 0;
	/* a prog array lookup from user space gives the program's id */
	if (chain_fd < 0 || bpf_map_lookup_elem(chain_fd, &zero, id))
		return errno == ENOENT ? 0 : -errno;
	fd = bpf_prog_get_fd_by_id(*id);
	if (fd >= 0) {
		if (!bpf_obj_get_info_by_fd(fd, &info, &ilen))
			snprintf(name, len, "%s", info.name);
		close(fd);
	}
	return 0;
}

int hbk_write_config(struct hbk *h, int ifindex, const char *ifname, enum hb_xdp_mode mode)
{
	int fd = bpf_map__fd(h->skskb->maps.config);
	struct hb_config c = { 0 };
	struct timespec ts;
	__u32 zero = 0;
	int err;

	/* Keep what hbd may already have written (alive_ns, grace_ns). */
	bpf_map_lookup_elem(fd, &zero, &c);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	c.loaded_ns = (__u64)ts.tv_sec * 1000000000ull + ts.tv_nsec;
	c.ifindex = ifindex;
	c.port = h->opts.port;
	c.xdp_mode = mode;
	c.tcp_path = (__u8)h->opts.tcp_path;
	memset(c.ifname, 0, sizeof(c.ifname));
	if (ifname)
		snprintf(c.ifname, sizeof(c.ifname), "%s", ifname);
	err = bpf_map_update_elem(fd, &zero, &c, BPF_ANY);
	if (err)
		hb_err("writing the config map: %s", strerror(-err));
	return err;
}

/* ------------------------------------------------------------------------------------------ */
/* Pinning                                                                                    */

static int join(char *out, size_t len, const char *dir, const char *name)
{
	int n = snprintf(out, len, "%s/%s", dir, name);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static bool dir_is_empty(const char *dir)
{
	char path[PATH_MAX];
	struct stat st;

	/* Only hbeat's own names matter: anything else in there is not ours to judge. */
	for (int i = 0; hbk_map_names[i]; i++)
		if (!join(path, sizeof(path), dir, hbk_map_names[i]) && !stat(path, &st))
			return false;
	if (!join(path, sizeof(path), dir, HBK_PIN_LINK_SOCKOPS) && !stat(path, &st))
		return false;
	if (!join(path, sizeof(path), dir, HBK_PIN_LINK_XDP) && !stat(path, &st))
		return false;
	return true;
}

int hbk_pin(struct hbk *h, const char *dir)
{
	char pinned[12][PATH_MAX];
	int n = 0, err = 0, i;
	bool created = false;

	if (mkdir(dir, 0700) == 0) {
		created = true;
	} else if (errno != EEXIST) {
		err = -errno;
		hb_err("creating pin directory %s: %s", dir, strerror(-err));
		return err;
	} else if (!dir_is_empty(dir)) {
		hb_err("%s already holds hbeat pins", dir);
		return -EEXIST;
	}
	/* Readable by root only: the maps hold session tokens and peer addresses. */
	if (chmod(dir, 0700)) {
		err = -errno;
		goto undo;
	}

	for (i = 0; hbk_map_names[i]; i++) {
		if ((err = join(pinned[n], PATH_MAX, dir, hbk_map_names[i])))
			goto undo;
		if (bpf_obj_pin(hbk_map_fd(h, hbk_map_names[i]), pinned[n])) {
			err = -errno;
			hb_err("pinning %s: %s", pinned[n], strerror(-err));
			goto undo;
		}
		n++;
	}
	if (h->sockops_link) {
		if ((err = join(pinned[n], PATH_MAX, dir, HBK_PIN_LINK_SOCKOPS)))
			goto undo;
		if ((err = bpf_link__pin(h->sockops_link, pinned[n]))) {
			hb_err("pinning %s: %s", pinned[n], strerror(-err));
			goto undo;
		}
		n++;
	}
	if (h->xdp_link_fd >= 0) {
		if ((err = join(pinned[n], PATH_MAX, dir, HBK_PIN_LINK_XDP)))
			goto undo;
		if (bpf_obj_pin(h->xdp_link_fd, pinned[n])) {
			err = -errno;
			hb_err("pinning %s: %s", pinned[n], strerror(-err));
			goto undo;
		}
		n++;
	}
	h->pinned = true;
	snprintf(h->pin_dir, sizeof(h->pin_dir), "%s", dir);
	return 0;
undo:
	while (n-- > 0)
		unlink(pinned[n]);
	if (created)
		rmdir(dir);
	return err;
}

/* ------------------------------------------------------------------------------------------ */
/* Closing                                                                                    */

void hbk_close(struct hbk *h)
{
	if (!h)
		return;
	if (!h->pinned) {
		/* Never committed: undo every attachment so nothing outlives a failed load. */
		hbk_detach_xdp(h);
		hbk_detach_sockmap(h);
	}
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

/* ------------------------------------------------------------------------------------------ */
/* Unloading from the pins                                                                    */

static int detach_map_progs(int map_fd, enum bpf_attach_type type)
{
	__u32 ids[4], cnt = 4;
	int err, pfd, first = 0;

	err = bpf_prog_query(map_fd, type, 0, NULL, ids, &cnt);
	if (err)
		return err;
	for (__u32 i = 0; i < cnt; i++) {
		pfd = bpf_prog_get_fd_by_id(ids[i]);
		if (pfd < 0) {
			first = first ?: pfd;
			continue;
		}
		err = bpf_prog_detach2(pfd, map_fd, type);
		close(pfd);
		if (err)
			first = first ?: err;
	}
	return first;
}

static int unload_xdp(const char *dir, int ifindex, struct hbk_unload_report *rep)
{
	struct xdp_multiprog *mp;
	struct xdp_program *p;
	char path[PATH_MAX];
	int fd, err;

	if ((err = join(path, sizeof(path), dir, HBK_PIN_LINK_XDP)))
		return err;
	fd = bpf_obj_get(path);
	if (fd >= 0) {
		/* Plain-link fallback: detach explicitly, other holders of the link fd notwithstanding. */
		err = bpf_link_detach(fd);
		close(fd);
		if (!err)
			rep->xdp_detached = true;
		return err;
	}
	if (ifindex <= 0) {
		snprintf(rep->xdp_note, sizeof(rep->xdp_note), "no NIC recorded or found");
		return 0;
	}
	mp = get_multiprog(ifindex);
	p = find_hb_prog(mp);
	if (!p) {
		snprintf(rep->xdp_note, sizeof(rep->xdp_note), "%s is not attached to ifindex %d",
			 HBK_PROG_XDP, ifindex);
		xdp_multiprog__close(mp);
		return 0;
	}
	err = xdp_program__detach(p, ifindex, xdp_multiprog__attach_mode(mp), 0);
	xdp_multiprog__close(mp);
	if (!err)
		rep->xdp_detached = true;
	else
		snprintf(rep->xdp_note, sizeof(rep->xdp_note), "libxdp detach failed: %s",
			 strerror(-err));
	return err;
}

int hbk_detach_xdp_ifindex(int ifindex)
{
	struct xdp_multiprog *mp = get_multiprog(ifindex);
	struct xdp_program *p = find_hb_prog(mp);
	int err = -ENOENT;

	if (p)
		err = xdp_program__detach(p, ifindex, xdp_multiprog__attach_mode(mp), 0);
	xdp_multiprog__close(mp);
	return err;
}

int hbk_xdp_query(const char *pin_dir, int ifindex, struct hbk_xdp_info *out)
{
	struct xdp_multiprog *mp;
	struct xdp_program *p;
	char path[PATH_MAX];
	int fd, err;

	memset(out, 0, sizeof(*out));
	if ((err = join(path, sizeof(path), pin_dir, HBK_PIN_LINK_XDP)))
		return err;
	fd = bpf_obj_get(path);
	if (fd >= 0) {
		struct bpf_link_info li = { 0 };
		__u32 len = sizeof(li);

		err = bpf_obj_get_info_by_fd(fd, &li, &len);
		close(fd);
		if (err)
			return err;
		out->how = HBK_XDP_LINK;
		out->prog_id = li.prog_id;
		return 0;
	}
	if (ifindex <= 0)
		return 0;
	mp = get_multiprog(ifindex);
	p = find_hb_prog(mp);
	if (p) {
		out->how = xdp_multiprog__is_legacy(mp) ? HBK_XDP_LIBXDP_LEGACY : HBK_XDP_DISPATCHER;
		out->prog_id = xdp_program__id(p);
		out->mode = xdp_multiprog__attach_mode(mp) == XDP_MODE_SKB ? HB_XDP_SKB : HB_XDP_NATIVE;
	}
	xdp_multiprog__close(mp);
	return 0;
}

int hbk_map_fill(int fd, __u32 *entries, __u32 *max_entries)
{
	struct bpf_map_info info = { 0 };
	__u32 len = sizeof(info), n = 0;
	__u8 key[64], next[64];
	void *prev = NULL;
	int err;

	err = bpf_obj_get_info_by_fd(fd, &info, &len);
	if (err)
		return err;
	if (info.key_size > sizeof(key))
		return -E2BIG;
	*max_entries = info.max_entries;
	/* Bounded by max_entries: a map being refilled while we walk cannot keep us forever. */
	while (n <= info.max_entries && !bpf_map_get_next_key(fd, prev, next)) {
		memcpy(key, next, info.key_size);
		prev = key;
		n++;
	}
	*entries = n;
	return 0;
}

int hbk_unload(const char *dir, const char *ifname, struct hbk_unload_report *rep)
{
	struct hb_config cfg = { 0 };
	char path[PATH_MAX];
	int fd, err, first = 0, ifindex = 0;
	__u32 zero = 0;
	struct stat st;

	memset(rep, 0, sizeof(*rep));
	if (stat(dir, &st) || dir_is_empty(dir))
		return -ENOENT;

	if (!join(path, sizeof(path), dir, HB_MAP_CONFIG) && (fd = bpf_obj_get(path)) >= 0) {
		bpf_map_lookup_elem(fd, &zero, &cfg);
		close(fd);
		ifindex = cfg.ifindex;
		rep->tcp_user = cfg.tcp_path == HB_TCP_USER;
	}
	if (ifname) {
		int given = if_nametoindex(ifname);

		if (!given) {
			snprintf(rep->xdp_note, sizeof(rep->xdp_note), "no NIC named %s", ifname);
			ifindex = 0;
		} else {
			if (ifindex && given != ifindex)
				hb_warn("%s is ifindex %d but hbeat was loaded on ifindex %d (%s); "
					"detaching from %s as asked", ifname, given, ifindex,
					cfg.ifname, ifname);
			ifindex = given;
		}
	}
	err = unload_xdp(dir, ifindex, rep);
	first = first ?: err;

	if (!join(path, sizeof(path), dir, HBK_PIN_LINK_SOCKOPS) && (fd = bpf_obj_get(path)) >= 0) {
		err = bpf_link_detach(fd);
		close(fd);
		if (!err)
			rep->sockops_detached = true;
		first = first ?: err;
	}
	if (!join(path, sizeof(path), dir, HB_MAP_SOCKHASH) && (fd = bpf_obj_get(path)) >= 0) {
		int e1 = detach_map_progs(fd, BPF_SK_SKB_STREAM_VERDICT);
		int e2 = detach_map_progs(fd, BPF_SK_SKB_STREAM_PARSER);

		close(fd);
		if (!e1 && !e2)
			rep->sockmap_detached = true;
		first = first ?: (e1 ?: e2);
	}

	for (int i = 0; hbk_map_names[i]; i++)
		if (!join(path, sizeof(path), dir, hbk_map_names[i]) && !unlink(path))
			rep->pins_removed++;
	if (!join(path, sizeof(path), dir, HBK_PIN_LINK_SOCKOPS) && !unlink(path))
		rep->pins_removed++;
	if (!join(path, sizeof(path), dir, HBK_PIN_LINK_XDP) && !unlink(path))
		rep->pins_removed++;
	if (rmdir(dir)) {
		err = -errno;
		hb_warn("removing %s: %s", dir, strerror(-err));
		first = first ?: err;
	}
	return first;
}

/* ------------------------------------------------------------------------------------------ */
/* Locking, counters, netns                                                                   */

int hbk_lock(const char *pin_dir)
{
	/* A lock file outside bpffs (which holds only pins and directories): flocking a bpffs
	 * directory would deadlock against libxdp if a pin path ever sat in libxdp's own locked
	 * directory. One lock for every pin directory: loads are rare, serialising them is free. */
	static const char *const paths[] = { "/run/lock/hbctl.lock", "/run/hbctl.lock", "/tmp/hbctl.lock" };
	int fd = -1;

	(void)pin_dir;
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]) && fd < 0; i++)
		fd = open(paths[i], O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX)) {
		int err = -errno;

		close(fd);
		return err;
	}
	return fd;
}

void hbk_unlock(int fd)
{
	if (fd >= 0) {
		flock(fd, LOCK_UN);
		close(fd);
	}
}

int hbk_read_kstats(int fd, struct hb_kstats *sum)
{
	int ncpu = libbpf_num_possible_cpus();
	struct hb_kstats *v;
	__u32 zero = 0;
	int err;

	memset(sum, 0, sizeof(*sum));
	if (ncpu < 0)
		return ncpu;
	/* Per-CPU values are copied out 8-byte aligned; struct hb_kstats is all __u64. */
	v = calloc(ncpu, sizeof(*v));
	if (!v)
		return -ENOMEM;
	err = bpf_map_lookup_elem(fd, &zero, v);
	if (!err)
		for (int c = 0; c < ncpu; c++)
			for (int i = 0; i < HB_KSTATS_N; i++)
				((__u64 *)sum)[i] += HBK_KSTAT(&v[c], i);
	free(v);
	return err;
}

int hbk_read_ustats(int fd, struct hb_ustats *sum)
{
	struct hb_ustats v;
	int err;

	memset(sum, 0, sizeof(*sum));
	for (__u32 k = 0; k < HB_MAX_WORKERS; k++) {
		err = bpf_map_lookup_elem(fd, &k, &v);
		if (err)
			return err;
		for (int i = 0; i < HB_USTATS_N; i++)
			((__u64 *)sum)[i] += HBK_USTAT(&v, i);
	}
	return 0;
}

int hbk_netns_cookie(__u64 *cookie)
{
	socklen_t len = sizeof(*cookie);
	int fd, err = 0;

	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, cookie, &len))
		err = -errno;
	close(fd);
	return err;
}
