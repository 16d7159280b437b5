// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbeat loader library, attaching: parser and verdict on the sockhash, sock_ops on a cgroup,
 * hb_xdp on a NIC (libxdp's dispatcher, a plain link as fallback), the XDP program chained
 * after it, and the config map's load-time fields (see hb_bpf.h). */
#include "hb_bpf.h"
#include "hb_bpf_internal.h"
#include "hb_env.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_link.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xdp/libxdp.h>

#include "localaddr.h"
#include "log.h"
#include "sk_skb_hb.skel.h"
#include "sockops_hb.skel.h"
#include "xdp_hb.skel.h"

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

/* Fallback when libxdp cannot attach: a plain XDP bpf_link (kernel 5.9). The object libxdp was
 * given may be half-loaded as a dispatcher component, so it is reopened as a plain XDP program. */
static int attach_xdp_link(struct hbk *h, int ifindex, enum hb_xdp_mode mode)
{
	LIBBPF_OPTS(bpf_link_create_opts, lo);
	int err, fd;

	if (!h->xdp_loaded || bpf_program__type(h->xdp->progs.hb_xdp) != BPF_PROG_TYPE_XDP) {
		xdp_hb__destroy(h->xdp);
		h->xdp = NULL;
		err = hbk_open_xdp(h, true);
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

	mp = hbk_get_multiprog(ifindex);
	existing = hbk_find_hb_prog(mp);
	if (existing) {
		hb_err("ifindex %d already runs %s (id %u)", ifindex, HBK_PROG_XDP,
		       xdp_program__id(existing));
		xdp_multiprog__close(mp);
		return -EEXIST;
	}
	if (mp && xdp_multiprog__is_legacy(mp) && xdp_multiprog__main_prog(mp)) {
		struct xdp_program *other = xdp_multiprog__main_prog(mp);

		hb_err("ifindex %d already runs XDP program %s (id %u), attached without libxdp's "
		       "dispatcher, so it cannot share the NIC",
		       ifindex, xdp_program__name(other), xdp_program__id(other));
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
		hbk_quiet_libs = true;
		err = xdp_program__attach(prog, ifindex, to_libxdp_mode(mode), 0);
		hbk_quiet_libs = false;
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
		mp = hbk_get_multiprog(ifindex);
		h->xdp_how = mp && !xdp_multiprog__is_legacy(mp) ? HBK_XDP_DISPATCHER
								 : HBK_XDP_LIBXDP_LEGACY;
		xdp_multiprog__close(mp);
		if (h->xdp_how == HBK_XDP_LIBXDP_LEGACY) {
			char why[256];

			if (hbe_probe_freplace(why, sizeof(why)))
				hb_warn("libxdp's multi-program dispatcher is unavailable: %s. hb_xdp is "
					"attached alone (libxdp legacy mode): other XDP programs cannot "
					"share this NIC (docs/COEXISTENCE.md)",
					why);
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
		err = xdp_program__detach(h->xdp_prog, h->xdp_ifindex, to_libxdp_mode(h->xdp_mode),
					  0);
		if (err)
			hb_err("detaching hb_xdp from ifindex %d: %s", h->xdp_ifindex,
			       strerror(-err));
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
	c.mqtt_port = h->opts.mqtt_port;
	c.xdp_mode = mode;
	c.tcp_path = (__u8)h->opts.tcp_path;
	memset(c.ifname, 0, sizeof(c.ifname));
	if (ifname)
		snprintf(c.ifname, sizeof(c.ifname), "%s", ifname);
	err = bpf_map_update_elem(fd, &zero, &c, BPF_ANY);
	if (err) {
		hb_err("writing the config map: %s", strerror(-err));
		return err;
	}
	return ifindex > 0 ? hbk_write_local_addrs(h, ifindex) : 0;
}

int hbk_write_local_addrs(struct hbk *h, int ifindex)
{
	struct hb_local_addrs set;
	int err = hb_local_collect(ifindex, &set);

	if (!err) {
		err = hb_local_sync(hbk_map_fd(h, HB_MAP_LOCAL_ADDRS), &set);
		err = err < 0 ? err : 0;
	}
	if (err)
		hb_err("writing the addresses of ifindex %d into %s: %s (XDP answers no PING "
		       "until hbd fills it)",
		       ifindex, HB_MAP_LOCAL_ADDRS, strerror(-err));
	return err;
}
