// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Collecting a NIC's addresses and writing them into the local_addrs map. */
#include "localaddr.h"

#include <bpf/bpf.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int hb_local_add(struct hb_local_addrs *s, const uint8_t addr[16], uint32_t flags, uint32_t ifindex)
{
	for (unsigned i = 0; i < s->n; i++) {
		if (!memcmp(s->a[i].addr, addr, 16)) {
			s->a[i].flags |= flags;
			return 0;
		}
	}
	if (s->n >= HB_MAX_LOCAL_ADDRS)
		return -ENOSPC;
	memcpy(s->a[s->n].addr, addr, 16);
	s->a[s->n].flags = flags;
	s->a[s->n].ifindex = ifindex;
	s->n++;
	return 0;
}

/* An address label may be "eth0:1" (an IPv4 alias): the device is the part before the colon. */
static unsigned dev_index(const char *label, char *dev, size_t cap)
{
	snprintf(dev, cap, "%s", label);
	dev[strcspn(dev, ":")] = 0;
	return if_nametoindex(dev);
}

/* A VLAN device on top of nic has a lower_<nic> link in sysfs. */
static int is_upper_of(const char *dev, const char *nic)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "/sys/class/net/%s/lower_%s", dev, nic);
	return access(path, F_OK) == 0;
}

static int unicast(const uint8_t a[16])
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	if (!memcmp(a, mapped, 12))
		return (a[12] & 0xf0) != 0xe0 &&
		       !(a[12] == 255 && a[13] == 255 && a[14] == 255 && a[15] == 255);
	return a[0] != 0xff;
}

int hb_local_collect(int ifindex, struct hb_local_addrs *out)
{
	struct ifaddrs *ifa, *i;
	char nic[IF_NAMESIZE], dev[IF_NAMESIZE + 8];
	int rc = 0;

	memset(out, 0, sizeof(*out));
	if (!if_indextoname((unsigned)ifindex, nic))
		return -errno;
	if (getifaddrs(&ifa))
		return -errno;
	for (i = ifa; i && !rc; i = i->ifa_next) {
		uint8_t a[16] = { 0 };
		unsigned idx;
		uint32_t flags;

		if (!i->ifa_addr || !i->ifa_name)
			continue;
		if (i->ifa_addr->sa_family == AF_INET) {
			a[10] = a[11] = 0xff;
			memcpy(a + 12, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, 4);
		} else if (i->ifa_addr->sa_family == AF_INET6) {
			memcpy(a, &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, 16);
		} else {
			continue;
		}
		idx = dev_index(i->ifa_name, dev, sizeof(dev));
		if (idx == (unsigned)ifindex)
			flags = HB_LOCAL_NIC;
		else if (idx && is_upper_of(dev, nic))
			flags = HB_LOCAL_VLAN;
		else
			continue;
		/* the NIC's own first: a full set keeps those */
		if (unicast(a) && (flags == HB_LOCAL_NIC || out->n < HB_MAX_LOCAL_ADDRS / 2) &&
		    hb_local_add(out, a, flags, idx) == -ENOSPC)
			rc = 0;
	}
	freeifaddrs(ifa);
	return rc;
}

int hb_local_sync(int map_fd, const struct hb_local_addrs *s)
{
	struct hb_local_addrs cur;
	__u32 zero = 0;

	if (!bpf_map_lookup_elem(map_fd, &zero, &cur) && !memcmp(&cur, s, sizeof(cur)))
		return 0;
	return bpf_map_update_elem(map_fd, &zero, s, BPF_ANY) ? -errno : 1;
}
