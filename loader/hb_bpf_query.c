// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbeat loader library, queries: how hb_xdp is attached, what runs after it, and this network
 * namespace's cookie, seen from the pins and the NIC (see hb_bpf.h). */
#include "hb_bpf.h"
#include "hb_bpf_internal.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <xdp/libxdp.h>

#include "pins.h"

#ifndef SO_NETNS_COOKIE
#define SO_NETNS_COOKIE 71
#endif

/* The hbeat program among those libxdp found on a NIC (owned by mp), or NULL. */
struct xdp_program *hbk_find_hb_prog(struct xdp_multiprog *mp)
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

struct xdp_multiprog *hbk_get_multiprog(int ifindex)
{
	struct xdp_multiprog *mp = xdp_multiprog__get_from_ifindex(ifindex);

	return libxdp_get_error(mp) ? NULL : mp;
}

int hbk_xdp_query(const char *pin_dir, int ifindex, struct hbk_xdp_info *out)
{
	struct xdp_multiprog *mp;
	struct xdp_program *p;
	int fd, err;

	memset(out, 0, sizeof(*out));
	fd = hb_pin_open(pin_dir, HBK_PIN_LINK_XDP, NULL, 0);
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
	mp = hbk_get_multiprog(ifindex);
	p = hbk_find_hb_prog(mp);
	if (p) {
		out->how =
			xdp_multiprog__is_legacy(mp) ? HBK_XDP_LIBXDP_LEGACY : HBK_XDP_DISPATCHER;
		out->prog_id = xdp_program__id(p);
		out->mode =
			xdp_multiprog__attach_mode(mp) == XDP_MODE_SKB ? HB_XDP_SKB : HB_XDP_NATIVE;
	}
	xdp_multiprog__close(mp);
	return 0;
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

const char *hbk_tcp_path_str(enum hb_tcp_path p)
{
	switch (p) {
	case HB_TCP_KERNEL:
		return "kernel";
	case HB_TCP_USER:
		return "user";
	case HB_TCP_KEEPALIVE:
		return "keepalive";
	default:
		return "?";
	}
}
