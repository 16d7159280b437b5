// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Start-up check that the kernel has the io_uring operations hbload builds on, so a missing
 * feature is one clear message instead of every client failing to connect.
 *
 * It runs the real thing once on a scratch ring: a direct socket, the URING_CMD setsockopt
 * (kernel >= 6.7) and, with --source, IORING_OP_BIND (kernel >= 6.11) to the first source
 * address. No packet is sent.
 */
#include <errno.h>
#include <string.h>

#include "hbload.h"
#include "log.h"
#include "uring_sock.h"

static const struct linger probe_linger = { .l_onoff = 1, .l_linger = 0 };

int hbl_probe_kernel(const struct hbl_cfg *cfg)
{
	struct io_uring ring;
	struct io_uring_sqe *sqe;
	struct io_uring_cqe *cqe;
	int rc, steps = 2, res[3] = { 0 };

	rc = io_uring_queue_init(8, &ring, 0);
	if (rc) {
		hb_err("io_uring is not available: %s (kernel >= 6.11 with io_uring enabled; "
		       "check /proc/sys/kernel/io_uring_disabled)",
		       strerror(-rc));
		return rc;
	}
	rc = io_uring_register_files_sparse(&ring, 1);
	if (rc) {
		hb_err("io_uring direct descriptors: %s (kernel >= 5.19)", strerror(-rc));
		goto out;
	}
	sqe = io_uring_get_sqe(&ring);
	io_uring_prep_socket_direct(sqe, cfg->family, SOCK_STREAM, 0, 0, 0);
	sqe->flags |= IOSQE_IO_LINK;
	sqe->user_data = 0;
	sqe = io_uring_get_sqe(&ring);
	hb_prep_setsockopt(sqe, 0, SOL_SOCKET, SO_LINGER, &probe_linger, sizeof(probe_linger));
	sqe->flags |= IOSQE_FIXED_FILE | (cfg->nsrc ? IOSQE_IO_LINK : 0);
	sqe->user_data = 1;
	if (cfg->nsrc) {
		sqe = io_uring_get_sqe(&ring);
		hb_prep_bind(sqe, 0, (const struct sockaddr *)&cfg->src[0], cfg->src_len);
		sqe->flags |= IOSQE_FIXED_FILE;
		sqe->user_data = 2;
		steps = 3;
	}
	rc = io_uring_submit_and_wait(&ring, (unsigned)steps);
	if (rc < 0) {
		hb_err("io_uring submit of the socket/bind probe: %s", strerror(-rc));
		io_uring_queue_exit(&ring);
		return rc;
	}
	for (int i = 0; i < steps && !io_uring_peek_cqe(&ring, &cqe); i++) {
		if (cqe->user_data < 3)
			res[cqe->user_data] = cqe->res;
		io_uring_cqe_seen(&ring, cqe);
	}
	rc = 0;
	if (res[0] < 0) {
		hb_err("io_uring socket creation (IORING_OP_SOCKET into a direct descriptor): %s "
		       "(kernel >= 5.19)",
		       strerror(-res[0]));
		rc = res[0];
	} else if (res[1] < 0 && res[1] != -ECANCELED) {
		hb_err("io_uring setsockopt on a direct descriptor (URING_CMD SETSOCKOPT): %s "
		       "(kernel >= 6.7)",
		       strerror(-res[1]));
		rc = res[1];
	} else if (res[2] == -EINVAL) {
		hb_err("io_uring bind (IORING_OP_BIND) is not supported: %s (kernel >= 6.11; or run "
		       "without --source)",
		       strerror(-res[2]));
		rc = res[2];
	} else if (res[2] < 0 && res[2] != -ECANCELED) {
		hb_err("cannot bind to the first --source address: %s (does this host have it?)",
		       strerror(-res[2]));
		rc = res[2];
	}
out:
	io_uring_queue_exit(&ring);
	return rc;
}
