// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbeat loader library, pinning and unloading: the maps and links pinned at the end of a load,
 * everything a pinned load made removed again from the pins alone, and the lock that keeps
 * two of these apart on one pin directory (see hb_bpf.h). */
#include "hb_bpf.h"
#include "hb_bpf_internal.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xdp/libxdp.h>

#include "log.h"
#include "pins.h"

static bool dir_is_empty(const char *dir)
{
	char path[PATH_MAX];
	struct stat st;

	/* Only hbeat's own names matter: anything else in there is not ours to judge. */
	for (int i = 0; hbk_map_names[i]; i++)
		if (!hb_pin_path(path, sizeof(path), dir, hbk_map_names[i]) && !stat(path, &st))
			return false;
	if (!hb_pin_path(path, sizeof(path), dir, HBK_PIN_LINK_SOCKOPS) && !stat(path, &st))
		return false;
	if (!hb_pin_path(path, sizeof(path), dir, HBK_PIN_LINK_XDP) && !stat(path, &st))
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
		if ((err = hb_pin_path(pinned[n], PATH_MAX, dir, hbk_map_names[i])))
			goto undo;
		if (bpf_obj_pin(hbk_map_fd(h, hbk_map_names[i]), pinned[n])) {
			err = -errno;
			hb_err("pinning %s: %s", pinned[n], strerror(-err));
			goto undo;
		}
		n++;
	}
	if (h->sockops_link) {
		if ((err = hb_pin_path(pinned[n], PATH_MAX, dir, HBK_PIN_LINK_SOCKOPS)))
			goto undo;
		if ((err = bpf_link__pin(h->sockops_link, pinned[n]))) {
			hb_err("pinning %s: %s", pinned[n], strerror(-err));
			goto undo;
		}
		n++;
	}
	if (h->xdp_link_fd >= 0) {
		if ((err = hb_pin_path(pinned[n], PATH_MAX, dir, HBK_PIN_LINK_XDP)))
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

/* The end of a load, committed (pinned) or not. */ void hbk_close(struct hbk *h)
{
	if (!h)
		return;
	if (!h->pinned) {
		/* Never committed: undo every attachment so nothing outlives a failed load. */
		hbk_detach_xdp(h);
		hbk_detach_sockmap(h);
	}
	hbk_free(h);
}

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
	int fd, err;

	fd = hb_pin_open(dir, HBK_PIN_LINK_XDP, NULL, 0);
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
	mp = hbk_get_multiprog(ifindex);
	p = hbk_find_hb_prog(mp);
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
	struct xdp_multiprog *mp = hbk_get_multiprog(ifindex);
	struct xdp_program *p = hbk_find_hb_prog(mp);
	int err = -ENOENT;

	if (p)
		err = xdp_program__detach(p, ifindex, xdp_multiprog__attach_mode(mp), 0);
	xdp_multiprog__close(mp);
	return err;
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

	if ((fd = hb_pin_open(dir, HB_MAP_CONFIG, NULL, 0)) >= 0) {
		bpf_map_lookup_elem(fd, &zero, &cfg);
		close(fd);
		ifindex = cfg.ifindex;
		rep->tcp_user = cfg.tcp_path == HB_TCP_USER;
		rep->tcp_path = cfg.tcp_path;
	}
	if (ifname) {
		int given = if_nametoindex(ifname);

		if (!given) {
			snprintf(rep->xdp_note, sizeof(rep->xdp_note), "no NIC named %s", ifname);
			ifindex = 0;
		} else {
			if (ifindex && given != ifindex)
				hb_warn("%s is ifindex %d but hbeat was loaded on ifindex %d (%s); "
					"detaching from %s as asked",
					ifname, given, ifindex, cfg.ifname, ifname);
			ifindex = given;
		}
	}
	err = unload_xdp(dir, ifindex, rep);
	first = first ?: err;

	if ((fd = hb_pin_open(dir, HBK_PIN_LINK_SOCKOPS, NULL, 0)) >= 0) {
		err = bpf_link_detach(fd);
		close(fd);
		if (!err)
			rep->sockops_detached = true;
		first = first ?: err;
	}
	if ((fd = hb_pin_open(dir, HB_MAP_SOCKHASH, NULL, 0)) >= 0) {
		int e1 = detach_map_progs(fd, BPF_SK_SKB_STREAM_VERDICT);
		int e2 = detach_map_progs(fd, BPF_SK_SKB_STREAM_PARSER);

		close(fd);
		if (!e1 && !e2)
			rep->sockmap_detached = true;
		first = first ?: (e1 ?: e2);
	}

	for (int i = 0; hbk_map_names[i]; i++)
		if (!hb_pin_path(path, sizeof(path), dir, hbk_map_names[i]) && !unlink(path))
			rep->pins_removed++;
	if (!hb_pin_path(path, sizeof(path), dir, HBK_PIN_LINK_SOCKOPS) && !unlink(path))
		rep->pins_removed++;
	if (!hb_pin_path(path, sizeof(path), dir, HBK_PIN_LINK_XDP) && !unlink(path))
		rep->pins_removed++;
	if (rmdir(dir)) {
		err = -errno;
		hb_warn("removing %s: %s", dir, strerror(-err));
		first = first ?: err;
	}
	return first;
}

/* ------------------------------------------------------------------------------------------ */
/* Locking                                                                                    */

/* The pin directory's absolute path with no "." or ".." parts, repeated or trailing slashes, or
 * symbolic links, so that every spelling of one directory finds one lock. The directory need not
 * exist yet (a first load creates it): then its parent is resolved. */
static int canonical_dir(const char *dir, char *out, size_t len)
{
	char copy[PATH_MAX], real[PATH_MAX];
	const char *parent, *base;
	char *slash;
	size_t n = strlen(dir);

	if (realpath(dir, real))
		return snprintf(out, len, "%s", real) < (int)len ? 0 : -ENAMETOOLONG;
	if (errno != ENOENT)
		return -errno;
	while (n > 1 && dir[n - 1] == '/')
		n--;
	if (n >= sizeof(copy))
		return -ENAMETOOLONG;
	memcpy(copy, dir, n);
	copy[n] = 0;
	slash = strrchr(copy, '/');
	if (!slash) {
		parent = ".";
		base = copy;
	} else if (slash == copy) {
		parent = "/";
		base = copy + 1;
	} else {
		*slash = 0;
		parent = copy;
		base = slash + 1;
	}
	if (!realpath(parent, real))
		return -errno;
	return snprintf(out, len, "%s/%s", strcmp(real, "/") ? real : "", base) < (int)len
		       ? 0
		       : -ENAMETOOLONG;
}

int hbk_lock_path(const char *pin_dir, char *out, size_t len)
{
	/* /run/lock is the system's place for lock files, and outlives every daemon (hbd's
	 * RuntimeDirectory /run/hbeat goes away when hbd stops, and a lock file deleted under a
	 * waiting hbctl would let the next one take a fresh lock beside it) */
	static const char *const dirs[] = { "/run/lock", "/run", "/tmp" };
	char canon[PATH_MAX] = "", name[NAME_MAX + 1];
	size_t n = 0;
	struct stat st;
	int rc;

	rc = canonical_dir(pin_dir, canon, sizeof(canon));
	if (rc)
		return rc;
	/* systemd's path escaping: "/" -> "-", anything but [A-Za-z0-9_.] as \xNN. It can be
	 * undone, so two directories never share a name (and a lock) */
	n = (size_t)snprintf(name, sizeof(name), "hbctl-");
	for (const unsigned char *p = (const unsigned char *)canon + 1; *p; p++) {
		bool plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
			     (*p >= '0' && *p <= '9') || *p == '_' || *p == '.';

		if (n + 5 + sizeof(".lock") > sizeof(name))
			return -ENAMETOOLONG;
		if (*p == '/')
			name[n++] = '-';
		else if (plain)
			name[n++] = (char)*p;
		else
			n += (size_t)snprintf(name + n, sizeof(name) - n, "\\x%02x", *p);
	}
	snprintf(name + n, sizeof(name) - n, ".lock");
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
		if (!stat(dirs[i], &st) && S_ISDIR(st.st_mode) && !access(dirs[i], W_OK))
			return snprintf(out, len, "%s/%s", dirs[i], name) < (int)len
				       ? 0
				       : -ENAMETOOLONG;
	return -ENOENT;
}

int hbk_lock(const char *pin_dir)
{
	/* A lock file outside bpffs, not a flock on the pin directory: the directory does not
	 * exist before a load and is removed by unload (a load waiting on the removed one would
	 * then run beside the next one), and bpffs holds nothing but pins and directories. */
	char path[PATH_MAX];
	int fd, err;

	err = hbk_lock_path(pin_dir, path, sizeof(path));
	if (err)
		return err;
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX)) {
		err = -errno;
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
