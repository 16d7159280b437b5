/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* io_uring socket operations liburing 2.3 has no prep helper for: bind, getsockopt, setsockopt,
 * and making a direct descriptor a regular fd.
 *
 * Debian 12 ships liburing 2.3, whose headers predate IORING_OP_BIND (kernel 6.11) and the socket
 * URING_CMD get/setsockopt (kernel 6.7), but they are the only way to bind or query a direct
 * descriptor (a socket with no regular fd, which is how hbd and hbload hold more sockets than
 * RLIMIT_NOFILE). The SQEs are filled by hand through liburing 2.3's older member names, exactly
 * where the kernel's io_uring/net.c (io_bind_prep) and io_uring/cmd_net.c read them:
 *   cmd_op        low half of the off union      level/optname  the two u32 halves of addr
 *   optlen        the file_index/splice_fd_in union            optval         addr3
 * With liburing >= 2.5 these become io_uring_prep_bind() and io_uring_prep_cmd_sock(), and with
 * 2.6 io_uring_prep_fixed_fd_install().
 */
#ifndef HB_URING_SOCK_H
#define HB_URING_SOCK_H

#include <endian.h>
#include <liburing.h>
#include <stdint.h>
#include <sys/socket.h>

#define HB_IORING_OP_FIXED_FD_INSTALL 54 /* enum io_uring_op, kernel >= 6.8 */
#define HB_IORING_OP_BIND 56 /* enum io_uring_op, kernel >= 6.11 */
#define HB_SOCKET_URING_OP_GETSOCKOPT 2 /* enum io_uring_socket_op, kernel >= 6.7 */
#define HB_SOCKET_URING_OP_SETSOCKOPT 3

_Static_assert(
	__BYTE_ORDER == __LITTLE_ENDIAN,
	"level/optname share sqe->addr as two u32s: the packing below assumes little endian");

/* bind(fd, addr, len): the address is copied into the kernel at submit time. */
static inline void hb_prep_bind(struct io_uring_sqe *sqe, int fd, const struct sockaddr *addr,
				socklen_t addrlen)
{
	io_uring_prep_rw(HB_IORING_OP_BIND, sqe, fd, addr, 0, addrlen);
}

static inline void hb_prep_sockopt(struct io_uring_sqe *sqe, uint32_t op, int fd, int level,
				   int optname, const void *optval, int optlen)
{
	io_uring_prep_rw(IORING_OP_URING_CMD, sqe, fd, NULL, 0, 0);
	sqe->off = op; /* cmd_op; __pad1 stays zero */
	sqe->addr = ((uint64_t)(uint32_t)optname << 32) | (uint32_t)level;
	sqe->splice_fd_in = optlen;
	sqe->addr3 = (uint64_t)(uintptr_t)optval;
}

/* A regular fd (O_CLOEXEC) for direct descriptor slot: the CQE's res is the fd or -errno. For
 * the calls that take only a regular fd (bpf map updates, SCM_RIGHTS); close it after. */
static inline void hb_prep_fixed_fd_install(struct io_uring_sqe *sqe, int slot)
{
	io_uring_prep_rw(HB_IORING_OP_FIXED_FD_INSTALL, sqe, slot, NULL, 0, 0);
	sqe->flags |= IOSQE_FIXED_FILE; /* rw_flags (install_fd_flags) 0: O_CLOEXEC */
}

/* getsockopt: the CQE's res is the option length or -errno. The kernel supports SOL_SOCKET
 * only (enough for SO_COOKIE and SO_PEERNAME). optval must stay valid until the CQE.
 */
static inline void hb_prep_getsockopt(struct io_uring_sqe *sqe, int fd, int level, int optname,
				      void *optval, int optlen)
{
	hb_prep_sockopt(sqe, HB_SOCKET_URING_OP_GETSOCKOPT, fd, level, optname, optval, optlen);
}

/* setsockopt: optval is read when the request is issued, not at submit; keep it valid until
 * the CQE (callers pass static storage).
 */
static inline void hb_prep_setsockopt(struct io_uring_sqe *sqe, int fd, int level, int optname,
				      const void *optval, int optlen)
{
	hb_prep_sockopt(sqe, HB_SOCKET_URING_OP_SETSOCKOPT, fd, level, optname, optval, optlen);
}

#endif
