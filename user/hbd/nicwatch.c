// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* NIC watch: the fast path degrades by itself (a PING that XDP does not answer reaches the UDP
 * socket and hbd answers it), so there is nothing to switch; what an operator needs is to be
 * told, once per change, what happened and what to do.
 */
#include "nicwatch.h"

#include <bpf/libbpf.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "localaddr.h"
#include "log.h"
#include "pins.h"

enum { NIC_UNKNOWN, NIC_OK, NIC_DOWN, NIC_NO_XDP, NIC_GONE };

void hbd_nic_init(struct hbd_nicwatch *n, int ifindex, const char *ifname, const char *pin_dir)
{
	memset(n, 0, sizeof(*n));
	n->ifindex = ifindex;
	snprintf(n->ifname, sizeof(n->ifname), "%s", ifname);
	n->state = NIC_UNKNOWN;
	/* pins of an older hbctl have no local_addrs: their XDP program checks no destination */
	n->local_fd = hb_pin_open(pin_dir, HB_MAP_LOCAL_ADDRS, NULL, 0);
	if (n->local_fd < 0)
		n->local_fd = -1;
}

void hbd_nic_close(struct hbd_nicwatch *n)
{
	if (n->local_fd >= 0)
		close(n->local_fd);
	n->local_fd = -1;
}

/* Addresses come and go (DHCP, an operator adding one): XDP answers only for those in the map,
 * so a new one is served in userspace until the next pass and a removed one is not answered
 * from after it. */
static void sync_addrs(struct hbd_nicwatch *n)
{
	struct hb_local_addrs set;
	int rc;

	if (n->local_fd < 0 || hb_local_collect(n->ifindex, &set))
		return;
	rc = hb_local_sync(n->local_fd, &set);
	if (rc > 0)
		hb_info("NIC %s: %u local address%s for the XDP fast path", n->ifname, set.n,
			set.n == 1 ? "" : "es");
	else if (rc < 0)
		hb_warn("NIC %s: updating %s: %s", n->ifname, HB_MAP_LOCAL_ADDRS, strerror(-rc));
}

static int nic_state(const struct hbd_nicwatch *n)
{
	LIBBPF_OPTS(bpf_xdp_query_opts, q);
	struct ifreq ifr = { 0 };
	char name[IF_NAMESIZE];
	int fd, rc;

	if (!if_indextoname((unsigned)n->ifindex, name))
		return NIC_GONE;
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return NIC_UNKNOWN;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
	rc = ioctl(fd, SIOCGIFFLAGS, &ifr);
	close(fd);
	if (rc)
		return NIC_UNKNOWN;
	if (!(ifr.ifr_flags & IFF_UP) || !(ifr.ifr_flags & IFF_RUNNING))
		return NIC_DOWN;
	/* any XDP program: hb_xdp itself, or libxdp's dispatcher carrying it */
	if (bpf_xdp_query(n->ifindex, 0, &q))
		return NIC_UNKNOWN;
	return q.prog_id || q.drv_prog_id || q.skb_prog_id ? NIC_OK : NIC_NO_XDP;
}

void hbd_nic_check(struct hbd_nicwatch *n, uint64_t now_ms)
{
	int st;

	if (!n->ifindex || now_ms < n->next_ms)
		return;
	n->next_ms = now_ms + 1000;
	st = nic_state(n);
	if (st != NIC_GONE)
		sync_addrs(n);
	if (st == n->state || st == NIC_UNKNOWN)
		return;
	switch (st) {
	case NIC_OK:
		if (n->state != NIC_UNKNOWN)
			hb_info("NIC %s is up with its XDP program: UDP heartbeats are answered in the "
				"kernel again",
				n->ifname);
		break;
	case NIC_DOWN:
		hb_warn("NIC %s is down: no heartbeat reaches this host through it until it is up "
			"again (the XDP program stays attached)",
			n->ifname);
		break;
	case NIC_NO_XDP:
		hb_warn("NIC %s has no XDP program any more: UDP heartbeats are answered in "
			"userspace; to restore the fast path: hbctl unload --dev %s && hbctl load "
			"--dev %s, then restart hbd (kill -USR2 keeps its devices)",
			n->ifname, n->ifname, n->ifname);
		break;
	case NIC_GONE:
		hb_warn("NIC %s (ifindex %d) is gone: its XDP program went with it; UDP heartbeats "
			"arriving on other NICs are answered in userspace",
			n->ifname, n->ifindex);
		break;
	}
	n->state = st;
}
