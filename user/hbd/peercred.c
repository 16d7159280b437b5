// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The control socket's peer check: SO_PEERCRED for the user, SO_PEERGROUPS for the groups.
 *
 * The socket file's mode (0660) is the first gate; this one holds when the file's mode or its
 * directory is wider than meant, or an fd of a connection is passed on: the kernel recorded who
 * connected, and that is what is judged.
 */
#include "peercred.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Whether gid is among the peer's supplementary groups. */
static bool in_groups(int fd, gid_t gid)
{
	gid_t some[64], *g = some;
	socklen_t len = sizeof(some);
	bool found = false;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g, &len)) {
		if (errno != ERANGE || !(g = malloc(len)))
			return false;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g, &len)) {
			free(g);
			return false;
		}
	}
	for (size_t i = 0; i < len / sizeof(*g) && !found; i++)
		found = g[i] == gid;
	if (g != some)
		free(g);
	return found;
}

bool hbd_peer_permitted(int fd, bool has_group, gid_t gid, char *why, size_t whylen)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) || len != sizeof(cr)) {
		snprintf(why, whylen, "its credentials could not be read (%s)", strerror(errno));
		return false;
	}
	if (cr.uid == 0 || cr.uid == geteuid())
		return true;
	if (has_group && (cr.gid == gid || in_groups(fd, gid)))
		return true;
	snprintf(why, whylen, "uid %u (pid %d) is not root, not hbd's user%s", (unsigned)cr.uid,
		 (int)cr.pid, has_group ? " and not in --control-group" : "");
	return false;
}
