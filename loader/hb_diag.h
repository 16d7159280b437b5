/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The kernel's own view of TCP connections (RTT, last ACK) through NETLINK_SOCK_DIAG, for hbctl
 * conns. A socket is named by its cookie, which is the conns map's key (sock_diag, SO_COOKIE and
 * bpf_get_socket_cookie() all read one per-socket value), so rows match without an fd.
 *
 * Only the network namespace of the caller is searched: hbctl runs where hbeat was loaded.
 * Every function returns 0 or a negative errno.
 */
#ifndef HB_DIAG_H
#define HB_DIAG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One socket as inet_diag reports it (INET_DIAG_INFO: struct tcp_info). */
struct hbk_tcp_diag {
	uint64_t cookie;
	uint32_t rtt_us; /* tcpi_rtt: the smoothed round-trip time */
	uint32_t last_ack_ms; /* tcpi_last_ack_recv: how long ago the peer last ACKed */
	uint8_t peer_addr[16]; /* the remote address, IPv4 as v4-mapped IPv6 */
	uint16_t peer_port; /* the remote port, host order */
};

/* Every TCP socket of this netns with local port lport (host order), IPv4 and IPv6, into a
 * malloc'd array sorted by cookie (*n entries; free it). The kernel filters by port, but a dump
 * walks the whole established table: use it for a listing. */
int hbk_diag_dump(uint16_t lport, struct hbk_tcp_diag **out, size_t *n);

/* One socket by exact lookup (a hash lookup in the kernel, no walk): the connection from peer
 * (its text as sock_ops formats it, "10.0.0.2:40000" or "[full v6]:40000") to local port lport
 * whose cookie is cookie. The local address is not in conns, so each address of this netns of
 * the peer's family is tried. -ENOENT if none of them has it. */
int hbk_diag_lookup(const char *peer, uint16_t lport, uint64_t cookie, struct hbk_tcp_diag *out);

/* The entry of a sorted dump with this cookie, or NULL. */
const struct hbk_tcp_diag *hbk_diag_find(const struct hbk_tcp_diag *v, size_t n, uint64_t cookie);

#endif /* HB_DIAG_H */
