// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hb_sockops: keeps a conns entry for every passively established TCP connection on the
 * service port, from establishment to close. hbd adds the socket to the sockhash (where
 * hb_parser/hb_verdict take over its receive path) once the device has authenticated: before
 * that there is nothing for the kernel to answer, and HELLO reaches hbd without the stream
 * parser and the psock's kworker on its way. With hbctl load --tcp keepalive there is no
 * sockhash: this program turns TCP keepalive on instead, and the kernel tracks liveness.
 *
 * Established (BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB, local port == hb_port, and the loader's netns
 * if hb_netns_cookie is set): enable the state callback; in keepalive mode, once the daemon has
 * written its timing into config, set SO_KEEPALIVE, TCP_KEEPIDLE/KEEPINTVL/KEEPCNT and
 * TCP_USER_TIMEOUT (every connection, authenticated or not: hbd's --hello-timeout closes an
 * unauthenticated one long before its first probe); create conns[cookie] (state NEW, peer text,
 * last_seen_ns = now, HB_CONN_KEEPALIVE if the options are on). If conns is full the connection
 * stays on the daemon's path (sockops_insert_err).
 * Closed (BPF_SOCK_OPS_STATE_CB → TCP_CLOSE): count why from the socket's error, delete
 * conns[cookie] (the sockhash drops the socket on its own).
 *
 * Kernel features: cgroup sock_ops (4.13), STATE_CB (4.16),
 * bpf_get_socket_cookie for sock_ops (4.19), bpf_get_netns_cookie for sock_ops (5.15),
 * bpf_snprintf with %pI4/%pI6 (5.13), cgroup bpf_link (5.7), bpf_setsockopt of SO_KEEPALIVE,
 * TCP_KEEPIDLE/KEEPINTVL/KEEPCNT and TCP_USER_TIMEOUT (5.9), bpf_skc_to_tcp_sock (5.9).
 */
#include "hb_vmlinux.bpf.h"
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "hbeat_abi.h"
#include "hb_maps.bpf.h"

/* Socket options and errno values vmlinux.h lacks (#defines, not BTF). */
#define SOL_SOCKET 1
#define SO_KEEPALIVE 9
#define SOL_TCP 6
#define TCP_KEEPIDLE 4
#define TCP_KEEPINTVL 5
#define TCP_KEEPCNT 6
#define TCP_USER_TIMEOUT 18
#define EPIPE 32
#define ENETUNREACH 101
#define ECONNRESET 104
#define ETIMEDOUT 110
#define EHOSTUNREACH 113

/* Service port (host order) and, if nonzero, the only network namespace served; both set by
 * the loader before load. The netns filter keeps a same-port service in another namespace (a
 * container, a test) off our maps even though the cgroup hook sees it. */
const volatile __u16 hb_port = HB_DEFAULT_PORT;
const volatile __u64 hb_netns_cookie = 0;
/* The MQTT port (0: none), tracked as the service port is: its devices send PINGREQs, so
 * keepalive mode sets no keepalive options on it. */
const volatile __u16 hb_mqtt_port = 0;

/* remote_port in the sock_ops context holds the network-order port in the upper 16 bits on the
 * kernels that matter (the field notes' trap); older ones had it in the lower 16. Either way one
 * half is zero: pick the other and return a host-order port. */
static __always_inline __u16 remote_port_host(__u32 rp)
{
	if (rp & 0xffff)
		return bpf_ntohs((__u16)rp);
	return (__u16)bpf_ntohl(rp);
}

/* "a.b.c.d:port" or "[v6]:port" (%pI6 prints the full 8 groups; bpf_snprintf has no compressed
 * form). A v4-mapped address (a dual-stack socket accepting IPv4) prints as plain IPv4. */
static __always_inline void format_peer(struct bpf_sock_ops *skops, char *out)
{
	__u16 port = remote_port_host(skops->remote_port);

	if (skops->family == AF_INET) {
		__u32 a4 = skops->remote_ip4;

		BPF_SNPRINTF(out, HB_PEER_STR, "%pI4:%u", &a4, port);
		return;
	}
	if (skops->family == AF_INET6) {
		__u32 a6[4];

		a6[0] = skops->remote_ip6[0];
		a6[1] = skops->remote_ip6[1];
		a6[2] = skops->remote_ip6[2];
		a6[3] = skops->remote_ip6[3];
		if (a6[0] == 0 && a6[1] == 0 && a6[2] == bpf_htonl(0xffff)) {
			BPF_SNPRINTF(out, HB_PEER_STR, "%pI4:%u", &a6[3], port);
			return;
		}
		BPF_SNPRINTF(out, HB_PEER_STR, "[%pI6]:%u", a6, port);
	}
}

static __always_inline int set_int(struct bpf_sock_ops *skops, int level, int name, __u32 v)
{
	int i = (int)v;

	return bpf_setsockopt(skops, level, name, &i, sizeof(i));
}

/* Keepalive mode: the daemon's timing on this connection. HB_CONN_KEEPALIVE if every option took
 * (a connection with only some of them is left to the daemon's own expiry), else 0. */
static __always_inline __u32 keepalive(struct bpf_sock_ops *skops)
{
	__u32 zero = 0, idle, intvl, cnt, uto;
	struct hb_config *c = bpf_map_lookup_elem(&config, &zero);

	if (!c || c->tcp_path != HB_TCP_KEEPALIVE)
		return 0;
	idle = c->ka_idle_s;
	intvl = c->ka_intvl_s;
	cnt = c->ka_cnt;
	uto = c->ka_user_timeout_ms;
	if (!idle || !intvl || !cnt) /* no daemon has said how yet */
		return 0;
	if (set_int(skops, SOL_SOCKET, SO_KEEPALIVE, 1) ||
	    set_int(skops, SOL_TCP, TCP_KEEPIDLE, idle) ||
	    set_int(skops, SOL_TCP, TCP_KEEPINTVL, intvl) ||
	    set_int(skops, SOL_TCP, TCP_KEEPCNT, cnt) ||
	    set_int(skops, SOL_TCP, TCP_USER_TIMEOUT, uto)) {
		HB_COUNT(sockops_keepalive_err);
		return 0;
	}
	HB_COUNT(sockops_keepalive);
	return HB_CONN_KEEPALIVE;
}

static __always_inline void track(struct bpf_sock_ops *skops, int mqtt)
{
	struct hb_conn_key key = { .cookie = bpf_get_socket_cookie(skops) };
	struct hb_conn conn = {};

	/* Ask for the close notification first: once it is on, a failure below can leave nothing
	 * behind that the close callback would not also try to remove. */
	if (bpf_sock_ops_cb_flags_set(skops,
				      skops->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_STATE_CB_FLAG)) {
		HB_COUNT(sockops_insert_err);
		return;
	}
	conn.flags = mqtt ? HB_CONN_MQTT : keepalive(skops);
	conn.state = HB_STATE_NEW;
	conn.last_seen_ns = bpf_ktime_get_ns();
	format_peer(skops, conn.peer);
	if (bpf_map_update_elem(&conns, &key, &conn, BPF_ANY)) {
		HB_COUNT(sockops_insert_err);
		return;
	}
	HB_COUNT(sockops_insert);
}

/* Why a connection closed, from the error the kernel left on the socket: a keepalive or user
 * timeout kill writes sk_err (ETIMEDOUT, or an ICMP error that came before) before the state
 * becomes TCP_CLOSE, a reset from the peer ECONNRESET (EPIPE once we had sent a FIN). */
static __always_inline void count_close(struct bpf_sock_ops *skops)
{
	struct bpf_sock *sk = skops->sk;
	struct tcp_sock *tp;
	int err;

	if (!sk)
		return;
	tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return;
	err = tp->inet_conn.icsk_inet.sk.sk_err;
	if (!err)
		HB_COUNT(sockops_close_normal);
	else if (err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH)
		HB_COUNT(sockops_close_timeout);
	else if (err == ECONNRESET || err == EPIPE)
		HB_COUNT(sockops_close_reset);
	else
		HB_COUNT(sockops_close_error);
}

SEC("sockops")
int hb_sockops(struct bpf_sock_ops *skops)
{
	struct hb_conn_key key;

	switch (skops->op) {
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		if (skops->local_port != hb_port &&
		    (!hb_mqtt_port || skops->local_port != hb_mqtt_port))
			break;
		if (hb_netns_cookie && bpf_get_netns_cookie(skops) != hb_netns_cookie)
			break;
		track(skops, hb_mqtt_port && skops->local_port == hb_mqtt_port);
		break;
	case BPF_SOCK_OPS_STATE_CB:
		/* Only sockets track() enabled the callback on get here. */
		if (skops->args[1] != TCP_CLOSE)
			break;
		count_close(skops);
		key.cookie = bpf_get_socket_cookie(skops);
		if (bpf_map_delete_elem(&conns, &key) == 0)
			HB_COUNT(sockops_close);
		break;
	default:
		break;
	}
	return 1;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
