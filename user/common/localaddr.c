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

int hb_local_add(struct hb_local_set *s, const uint8_t addr[16], uint32_t flags, uint32_t ifindex)
{
	for (unsigned i = 0; i < s->n; i++) {
		if (!memcmp(s->key[i].addr, addr, 16)) {
			s->val[i].flags |= flags;
			return 0;
		}
	}
	if (s->n >= HB_LOCAL_SET_MAX)
		return -ENOSPC;
	memcpy(s->key[s->n].addr, addr, 16);
	s->val[s->n].flags = flags;
	s->val[s->n].ifindex = ifindex;
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

int hb_local_collect(int ifindex, struct hb_local_set *out)
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
		if (unicast(a))
			rc = hb_local_add(out, a, flags, idx);
	}
	freeifaddrs(ifa);
	return rc;
}

static int in_set(const struct hb_local_set *s, const struct hb_local_addr_key *k)
{
	for (unsigned i = 0; i < s->n; i++)
		if (!memcmp(s->key[i].addr, k->addr, 16))
			return 1;
	return 0;
}

int hb_local_sync(int map_fd, const struct hb_local_set *s)
{
	struct hb_local_addr_key k, next, gone[HB_MAX_LOCAL_ADDRS];
	struct hb_local_addr v;
	unsigned ngone = 0;
	int changed = 0;
	void *prev = NULL;

	while (!bpf_map_get_next_key(map_fd, prev, &next)) {
		if (!in_set(s, &next) && ngone < HB_MAX_LOCAL_ADDRS)
			gone[ngone++] = next;
		k = next;
		prev = &k;
	}
	for (unsigned i = 0; i < ngone; i++)
		if (!bpf_map_delete_elem(map_fd, &gone[i]))
			changed++;
	for (unsigned i = 0; i < s->n; i++) {
		if (!bpf_map_lookup_elem(map_fd, &s->key[i], &v) && v.flags == s->val[i].flags &&
		    v.ifindex == s->val[i].ifindex)
			continue;
		if (bpf_map_update_elem(map_fd, &s->key[i], &s->val[i], BPF_ANY))
			return -errno;
		changed++;
	}
	return changed;
}
