/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* hbeat ABI: the wire format and every map layout shared by bpf/, user/, loader/ and tests/.
 *
 * This is the only place these structs exist. BPF code includes it after vmlinux.h; userspace
 * includes it on its own (it pulls <linux/types.h>). Everything is fixed-width with explicit
 * padding so both compilers lay it out the same way; user/common/abi_check.c asserts the sizes.
 * docs/PROTOCOL.md describes the wire format in prose.
 */
#ifndef HBEAT_ABI_H
#define HBEAT_ABI_H

#ifndef __bpf__
#include <linux/types.h>
#endif

/* ------------------------------------------------------------------------------------------ */
/* Wire protocol v1. All multi-byte fields are big-endian (network order).                     */

#define HB_MAGIC 0x4842 /* "HB" */
#define HB_VERSION 1
/* Version 2 (UDP only): every frame of a session ends in an 8-byte tag, SipHash-2-4 under the
 * session's key over the frame before it (header, token, payload), which the daemon and XDP
 * check before they act on it or answer. A v2 session's key is derived at HELLO/WELCOME from
 * the device secret and both sides' nonces (docs/PROTOCOL.md). */
#define HB_VERSION_2 2
#define HB_TAG_LEN 8
#define HB_SESSION_KEY_LEN 16
#define HB_MAX_PAYLOAD 1024 /* larger declared lengths are malformed frames */
#define HB_DEFAULT_PORT 7600

/* Every frame, TCP and UDP, starts with this 8-byte header. On TCP the payload follows directly;
 * on UDP an 8-byte session token (zero in HELLO) sits between header and payload and is not
 * counted in len. seq is the sender's 16-bit sequence number: it wraps, and is only used to
 * match ACKs to DATA and PONGs to PINGs.
 */
struct hb_hdr {
	__be16 magic;
	__u8 version;
	__u8 type; /* enum hb_type */
	__be16 len; /* payload bytes after the header (and after the UDP token) */
	__be16 seq;
};

enum hb_type {
	HB_HELLO = 1, /* client: struct hb_hello */
	HB_WELCOME = 2, /* server: struct hb_welcome */
	HB_PING = 3, /* client: struct hb_ping */
	HB_PONG = 4, /* server: the PING with only the type changed */
	HB_ECHO = 5, /* client: any payload; answered verbatim, type unchanged */
	HB_DATA = 6, /* client: application payload, 1..HB_MAX_PAYLOAD bytes */
	HB_ACK = 7, /* either: empty payload; server: seq = the DATA frame's, device: the DOWN's */
	HB_BYE = 8, /* either: struct hb_bye */
	HB_ERROR = 9, /* server: struct hb_error */
	HB_DOWN = 10, /* server: downlink, 1..HB_MAX_PAYLOAD application bytes; the device ACKs
		       * it with the same seq (from the server's own downlink sequence space) */
	/* version 2, UDP: a session moves to a new source address only once the device answered
	 * a challenge sent there (RFC 9000 8.2): server -> new address: PATH_CHALLENGE with 8
	 * random bytes; device: PATH_RESPONSE with the same bytes, both tagged */
	HB_PATH_CHALLENGE = 11,
	HB_PATH_RESPONSE = 12,
	/* TCP, client: a heartbeat that wants no answer frame. The server records it as it does a
	 * PING; the device's proof that the server holds the connection is TCP's ACK of the frame
	 * (with TCP_USER_TIMEOUT on the device), its RTT the kernel's (TCP_INFO). Empty payload.
	 * Over UDP, which has no ACK, a BEAT is ignored. docs/PROTOCOL.md: what it proves. */
	HB_BEAT = 13,
	HB_TYPE_MAX = HB_BEAT,
};

#define HB_TOKEN_LEN 8 /* UDP session token after the header */
#define HB_NONCE_LEN 8
#define HB_MAC_LEN 32 /* HMAC-SHA256 */

/* HELLO payload. mac = HMAC-SHA256(device secret, HB_HELLO_LABEL || device_id || ts_ms || nonce),
 * all three fields as they appear on the wire. ts_ms is Unix time in milliseconds; the server
 * accepts it within its clock window and only if newer than the device's last accepted HELLO.
 */
#define HB_HELLO_LABEL "hbeat-hello-v1"
struct hb_hello {
	__be64 device_id;
	__be64 ts_ms;
	__u8 nonce[HB_NONCE_LEN];
	__u8 mac[HB_MAC_LEN];
};

/* The bound HELLO (64 bytes): the same fields and the id of the server it is meant for, under
 * mac = HMAC-SHA256(secret, HB_HELLO_BOUND_LABEL || device_id || ts_ms || nonce || server_id).
 * A server that has an id (hbd --server-id) refuses one bound to another server, so a HELLO
 * captured on its way to one server of a fleet sharing a key store cannot be replayed to
 * another. server_id 0 binds to no server (it is accepted wherever a 56-byte HELLO would be).
 * Protocol version 2 over UDP always uses this form.
 */
#define HB_HELLO_BOUND_LABEL "hbeat-hello-bound-v1"
struct hb_hello_bound {
	__be64 device_id;
	__be64 ts_ms;
	__u8 nonce[HB_NONCE_LEN];
	__be64 server_id;
	__u8 mac[HB_MAC_LEN];
};

struct hb_welcome {
	__be64 token; /* 64-bit random session token; UDP frames carry it */
	__be32 interval_ms; /* heartbeat interval the server wants */
	__be32 timeout_ms; /* silence after which the server expires the device */
};

/* The version 2 WELCOME (28 bytes): the 20 bytes of a WELCOME with flags, then the server's
 * nonce, from which (with the HELLO's) both sides derive the session key. It is tagged with
 * that key, so the device knows the server holds its secret too. */
struct hb_welcome2 {
	__be64 token;
	__be32 interval_ms;
	__be32 timeout_ms;
	__be32 flags; /* enum hb_welcome_flag */
	__u8 nonce[HB_NONCE_LEN];
} __attribute__((packed));

struct hb_path {
	__u8 data[8];
};

/* A WELCOME with server flags: the 16 bytes above, then a __be32 of enum hb_welcome_flag bits
 * (a 20-byte payload; not a struct, which would be padded to 24). A server sends this form only
 * when it sets a flag, so a device of a server that sets none sees the WELCOME it always did;
 * a receiver takes a 16-byte WELCOME as flags 0.
 */
#define HB_WELCOME_FLAGS_LEN (sizeof(struct hb_welcome) + sizeof(__be32))

enum hb_welcome_flag {
	/* TCP: the server tracks this connection's liveness with TCP keepalive (its kernel
	 * probes every interval_ms and closes the connection after timeout_ms without an answer).
	 * The device need send no PINGs (any it sends are still answered); it keeps TCP keepalive
	 * on its own side with TCP_USER_TIMEOUT = timeout_ms, so it learns of a dead server too.
	 */
	HB_WELCOME_KEEPALIVE = 1 << 0,
};

/* PING payload: the client's own timestamp, opaque to the server and returned unchanged in the
 * PONG, so the client measures round-trip time without trusting any server clock.
 */
struct hb_ping {
	__be64 ts;
};

enum hb_bye_reason {
	HB_BYE_NORMAL = 0,
	HB_BYE_SHUTDOWN = 1, /* server is draining */
	HB_BYE_EXPIRED = 2, /* no heartbeat within the timeout */
	HB_BYE_SUPERSEDED = 3, /* the device authenticated again elsewhere */
	HB_BYE_REVOKED = 4,
};

struct hb_bye {
	__be16 reason;
};

enum hb_error_code {
	HB_ERR_MALFORMED = 1, /* bad magic, version, type or length */
	HB_ERR_AUTH = 2, /* HELLO refused: unknown device, bad MAC, stale or replayed timestamp */
	HB_ERR_NOT_AUTHED = 3, /* a frame that needs a session before HELLO succeeded */
	HB_ERR_TOO_LARGE = 4,
	HB_ERR_FULL = 5, /* server at capacity */
	HB_ERR_RATE = 6, /* rate limit */
	HB_ERR_INTERNAL = 7,
	HB_ERR_VERSION = 8, /* protocol version refused: the server takes only version 2 over UDP
			     * (hbd --require-udp-mac) */
};

struct hb_error {
	__be16 code;
};

/* The one rule for which payload lengths each type may carry; the BPF parsers and the userspace
 * codec both call it. Returns nonzero if the frame is well formed.
 */
static inline __attribute__((always_inline)) int hb_payload_len_ok(__u8 type, __u16 len)
{
	switch (type) {
	case HB_HELLO:
		return len == sizeof(struct hb_hello) || len == sizeof(struct hb_hello_bound);
	case HB_WELCOME:
		return len == sizeof(struct hb_welcome) || len == HB_WELCOME_FLAGS_LEN ||
		       len == sizeof(struct hb_welcome2);
	case HB_PING:
	case HB_PONG:
		return len == sizeof(struct hb_ping);
	case HB_ECHO:
		return len <= HB_MAX_PAYLOAD;
	case HB_DATA:
	case HB_DOWN:
		return len >= 1 && len <= HB_MAX_PAYLOAD;
	case HB_ACK:
	case HB_BEAT:
		return len == 0;
	case HB_BYE:
		return len == sizeof(struct hb_bye);
	case HB_ERROR:
		return len == sizeof(struct hb_error);
	case HB_PATH_CHALLENGE:
	case HB_PATH_RESPONSE:
		return len == sizeof(struct hb_path);
	default:
		return 0;
	}
}

/* The frames whose payload the daemon's own limit (hbd --max-payload, config.max_payload) caps:
 * the ones an application fills. HELLO, PING and the rest have sizes of their own, which no
 * limit may refuse. */
static inline __attribute__((always_inline)) int hb_payload_capped(__u8 type)
{
	return type == HB_DATA || type == HB_ECHO || type == HB_DOWN;
}

/* Size of a PING on the wire, header included (the UDP form adds the token). */
#define HB_PING_TCP_BYTES (sizeof(struct hb_hdr) + sizeof(struct hb_ping))
#define HB_PING_UDP_BYTES (sizeof(struct hb_hdr) + HB_TOKEN_LEN + sizeof(struct hb_ping))
#define HB_PING_V2_BYTES (HB_PING_UDP_BYTES + HB_TAG_LEN)
/* A v2 PING's timestamp must exceed the session's last answered one by at most this (its
 * replay window: a PING not newer than the last is a copy and never answered). The reference
 * client puts nanoseconds there: 2^48 ns is three days, longer than any heartbeat interval. */
#define HB_V2_TS_AHEAD (1ULL << 48)
#define HB_MAX_FRAME (sizeof(struct hb_hdr) + HB_TOKEN_LEN + HB_MAX_PAYLOAD + HB_TAG_LEN)

/* ------------------------------------------------------------------------------------------ */
/* Pinned maps (under the pin directory, default HB_PIN_DEFAULT). Map name == pin name.         */

#define HB_PIN_DEFAULT "/sys/fs/bpf/hbeat"
#define HB_MAP_CONNS "conns"
#define HB_MAP_SESSIONS "sessions"
#define HB_MAP_SOCKHASH "sockhash"
#define HB_MAP_KSTATS "kstats"
#define HB_MAP_USTATS "ustats"
#define HB_MAP_CONFIG "config"
#define HB_MAP_XDP_CHAIN "xdp_chain" /* PROG_ARRAY[1]: the XDP program run after hb_xdp */
#define HB_MAP_SEEN "seen" /* ARRAY of __u64 heartbeat stamps, mmapable: see struct hb_conn */
#define HB_MAP_LOCAL_ADDRS "local_addrs" /* HASH: the addresses XDP may answer for */

#define HB_MAX_CONNS (1 << 20) /* conns and sockhash capacity */
#define HB_MAX_SESSIONS (1 << 20) /* sessions capacity */
#define HB_MAX_WORKERS 64 /* ustats slots; workers beyond fold onto them */
#define HB_PEER_STR 48 /* "[ffff:...:ffff]:65535" and a NUL */
#define HB_MAX_LOCAL_ADDRS 16 /* addresses in local_addrs */

/* Connection and session state, as the kernel and the daemon both see it. */
enum hb_state {
	HB_STATE_NEW = 0, /* connected, not yet authenticated: the kernel answers nothing */
	HB_STATE_AUTHED = 1, /* the daemon admitted it: the kernel answers its heartbeats */
	HB_STATE_CLOSING = 2, /* the daemon is closing it */
};

/* conns: one entry per TCP connection on the service port, keyed by socket cookie (the daemon
 * learns its sockets' cookies with getsockopt(SO_COOKIE), so it needs no regular fd). sock_ops
 * creates the entry when the connection is established; the daemon sets device_id and state on
 * HELLO; the sk_skb verdict updates the heartbeat fields; sock_ops deletes it when the socket
 * closes.
 */
struct hb_conn_key {
	__u64 cookie;
};

struct hb_conn {
	char peer[HB_PEER_STR]; /* "10.0.0.2:40000", formatted once by sock_ops */
	__u64 device_id; /* 0 until authenticated */
	__u64 last_seen_ns; /* CLOCK_MONOTONIC time of the last heartbeat (or of creation) */
	__u64 pings; /* heartbeats the kernel took: PINGs answered, BEATs recorded */
	__u64 echoes; /* ECHO frames reflected in the kernel */
	enum hb_state state;
	__u32 last_seq; /* seq of the last heartbeat */
	__u32 seen_slot; /* seen[seen_slot] gets last_seen_ns too (0: no slot) */
	__u32 flags; /* enum hb_conn_flag, set by sock_ops when the connection is established */
};

enum hb_conn_flag {
	/* sock_ops turned TCP keepalive on (hbctl load --tcp keepalive, with the daemon's timing
	 * in config): the kernel tracks this connection's liveness, and the daemon may leave it
	 * to the kernel instead of expecting PINGs */
	HB_CONN_KEEPALIVE = 1 << 0,
	/* on the MQTT port (hbctl load --mqtt-port): an MQTT device, whose CONNECT keepalive in
	 * seconds hbd writes into the bits from HB_CONN_MQTT_KA_SHIFT up */
	HB_CONN_MQTT = 1 << 1,
};
#define HB_CONN_MQTT_KA_SHIFT 16

/* seen: the heartbeat stamps the daemon's expiry reads. The daemon gives each authenticated
 * connection and session a slot (seen_slot in its conns or sessions entry, slot 0 meaning none)
 * and mmaps the array; the fast paths store last_seen_ns there as well. Expiry then costs the
 * daemon a memory read per device due instead of a map-lookup syscall, about one per device per
 * heartbeat interval. The map entries stay the record: a device whose stamp says silent is
 * looked up there once more before it is expired.
 */

/* sessions: one entry per admitted UDP session, keyed by its token. Written by the daemon on
 * HELLO; XDP answers a PING only if the token is here, the state is AUTHED and the packet's
 * source address and port are the ones the session was admitted from (or validated at, for
 * version 2: a new address takes a path challenge the daemon runs). A version 2 PING must also
 * carry the right tag under key and a timestamp newer than last_ts (within HB_V2_TS_AHEAD).
 */
struct hb_session_key {
	__u64 token; /* the token as a number: be64toh() of the 8 wire bytes (host order) */
};

struct hb_session {
	__u8 addr[16]; /* source address, IPv4 as v4-mapped IPv6 (::ffff:a.b.c.d) */
	__be16 port; /* source port */
	__u16 pad;
	enum hb_state state;
	char peer[HB_PEER_STR]; /* the same address as text, for people */
	__u64 device_id;
	__u64 last_seen_ns;
	__u64 pings; /* heartbeats answered by XDP */
	__u32 last_seq;
	__u32 seen_slot; /* as in struct hb_conn */
	__u8 key[HB_SESSION_KEY_LEN]; /* version 2: the session's SipHash key (zero for v1) */
	__u64 last_ts; /* version 2: timestamp of the newest PING answered (the replay window) */
	__u32 version; /* HB_VERSION or HB_VERSION_2 */
	__u32 pad2;
};

/* local_addrs: the unicast addresses of this host that XDP answers for, as a session's address
 * is kept (IPv4 v4-mapped), in an ARRAY of one entry: XDP compares a PING's destination with the
 * few addresses there, which costs less than hashing it for a lookup. hbctl load fills it from
 * the NIC's addresses, hbd keeps it in step with address changes. A PING to any other destination (broadcast, multicast, another host's
 * address: bridged or forwarded traffic) is passed to the stack, never answered in place. An
 * untagged frame is answered only for an address of the NIC itself: a NIC that strips VLAN tags
 * hands XDP a frame whose tag only the stack knows, and a reply sent in place would leave the
 * VLAN. A tagged frame (the tag is in the packet and stays in the reply) may also be for an
 * address of a VLAN device on top of the NIC.
 */
enum hb_local_flag {
	HB_LOCAL_NIC = 1 << 0, /* an address of the NIC carrying the XDP program */
	HB_LOCAL_VLAN = 1 << 1, /* an address of a VLAN device whose lower device is that NIC */
};

struct hb_local_addr {
	__u8 addr[16];
	__u32 flags; /* enum hb_local_flag */
	__u32 ifindex; /* the device the address is on */
};

struct hb_local_addrs {
	__u32 n; /* entries of a[] in use */
	__u32 pad;
	struct hb_local_addr a[HB_MAX_LOCAL_ADDRS];
};

/* config: a single entry the daemon keeps fresh. The fast paths answer only while the daemon
 * is alive: now - alive_ns <= grace_ns (grace_ns 0 disables the check). A killed daemon thus
 * stops looking alive to the fleet after the grace period instead of forever.
 */
enum hb_xdp_mode {
	HB_XDP_NONE = 0,
	HB_XDP_NATIVE = 1,
	HB_XDP_SKB = 2,
};

/* Who answers TCP heartbeats (hbctl load --tcp): the sk_skb verdict, or hbd, or nobody: with
 * keepalive the device sends no heartbeats and the kernels keep the connection alive with TCP
 * keepalive probes (sock_ops sets the options; docs/OPERATIONS.md). 0 is the kernel, as before
 * the field existed. */
enum hb_tcp_path {
	HB_TCP_KERNEL = 0,
	HB_TCP_USER = 1,
	HB_TCP_KEEPALIVE = 2,
};

/* The config map is created BPF_F_MMAPABLE (so is ustats): hbd may mmap it and refresh
 * alive_ns with a plain store. */
struct hb_config {
	__u64 alive_ns; /* CLOCK_MONOTONIC stamp the daemon refreshes */
	__u64 grace_ns; /* set by the daemon; 0 disables the check */
	__u64 loaded_ns; /* when hbctl load ran (CLOCK_MONOTONIC) */
	__u32 ifindex; /* NIC carrying the XDP program (0: none) */
	__u16 port; /* service port, host order */
	__u8 xdp_mode; /* enum hb_xdp_mode */
	__u8 tcp_path; /* enum hb_tcp_path */
	char ifname[16];
	/* set by the daemon: the largest DATA/ECHO/DOWN payload it takes (hbd --max-payload);
	 * the kernel reflects no larger ECHO but hands it to the daemon, which refuses it
	 * (0: HB_MAX_PAYLOAD) */
	__u32 max_payload;
	/* TCP keepalive timing for HB_TCP_KEEPALIVE, written by the daemon before it listens (all
	 * 0 until then: sock_ops sets no options). idle_s and intvl_s are TCP_KEEPIDLE and
	 * TCP_KEEPINTVL, cnt TCP_KEEPCNT, user_timeout_ms TCP_USER_TIMEOUT (which, once set,
	 * decides the kill instead of cnt: docs/OPERATIONS.md) */
	__u32 ka_idle_s;
	__u32 ka_intvl_s;
	__u32 ka_cnt;
	__u32 ka_user_timeout_ms;
	__u32 flags; /* enum hb_config_flag, set by the daemon */
	/* hbctl load --mqtt-port: the MQTT port whose PINGREQs the sk_skb verdict answers (host
	 * order, 0: none); hbd admits its MQTT connections to the sockhash only on that port */
	__u16 mqtt_port;
	__u16 pad;
	__u32 pad2;
};

enum hb_config_flag {
	/* hbd --require-udp-mac: XDP answers no version 1 PING (drops it) */
	HB_CFG_REQUIRE_UDP_MAC = 1 << 0,
};

/* Counters. One X-macro list per side, so the struct (with BTF field names bpftool prints) and
 * the name table userspace prints come from one definition.
 */
/* clang-format off */
#define HB_KSTATS(X)                                                                            \
	X(xdp_pong)		/* UDP PING answered with XDP_TX */                                \
	X(xdp_pass)		/* valid frame passed to the daemon (HELLO, DATA, ECHO, ...) */    \
	X(xdp_unknown_session)	/* PING with a token not in sessions: passed, never answered */ \
	X(xdp_addr_mismatch)	/* PING whose source is not the session's: passed */           \
	X(xdp_not_authed)	/* PING for a session not AUTHED: passed */                     \
	X(xdp_daemon_dead)	/* PING while the daemon's liveness stamp is stale: passed */   \
	X(xdp_not_local)	/* PING not addressed to this host (broadcast or multicast MAC or \
				 * IP, an address not in local_addrs): passed, never answered */ \
	X(xdp_bad_tag)		/* version 2 PING whose tag is not its session key's: dropped */ \
	X(xdp_replay)		/* version 2 PING not newer than the session's last: dropped */  \
	X(xdp_v1_refused)	/* version 1 PING under hbd --require-udp-mac: dropped */      \
	X(xdp_drop_malformed)	/* service-port datagram with bad magic/version/type/length */ \
	X(xdp_other)		/* not for the service: passed untouched */                     \
	X(sk_pong)		/* TCP PING answered by the sk_skb verdict */                     \
	X(sk_echo)		/* TCP ECHO reflected by the sk_skb verdict */                    \
	X(sk_pass)		/* TCP frame passed to the daemon */                              \
	X(sk_not_authed)	/* TCP PING/ECHO/BEAT on a connection not AUTHED: passed */     \
	X(sk_daemon_dead)	/* TCP PING/ECHO/BEAT while the daemon's stamp is stale: passed */ \
	X(sk_malformed)		/* bad frame: the rest of the stream goes to the daemon */      \
	X(sk_redirect_err)	/* redirect failed: frame went to the daemon by SK_PASS */       \
	X(sk_no_conn)		/* frame on a socket with no conns entry */                       \
	X(sockops_insert)	/* connection added to conns (hbd adds it to sockhash) */         \
	X(sockops_insert_err)	/* conns full/failed: the daemon path serves it */                \
	X(sockops_close)	/* conns entry removed on close */                                \
	X(sockops_keepalive)	/* TCP keepalive options set on a new connection (--tcp keepalive) */ \
	X(sockops_keepalive_err) /* setting them failed: the daemon expects PINGs instead */   \
	X(sockops_close_timeout) /* closed by a timer: keepalive or user timeout (sk_err ETIMEDOUT, \
				  * or the ICMP error that came before it) */                   \
	X(sockops_close_reset)	/* closed by a reset from the peer (sk_err ECONNRESET, EPIPE) */ \
	X(sockops_close_normal)	/* closed without an error (FIN, or closed by the daemon) */     \
	X(sockops_close_error)	/* closed with another socket error */                           \
	X(mq_pong)		/* MQTT PINGREQ answered with PINGRESP by the sk_skb verdict */   \
	X(mq_pass)		/* MQTT packet passed to the daemon */                            \
	X(sk_beat)		/* TCP BEAT taken by the sk_skb verdict: recorded, no answer frame */
/* clang-format on */

/* clang-format off */
#define HB_USTATS(X)                                                                            \
	X(pings_user)		/* heartbeats the daemon answered itself */                       \
	X(frames_hello) X(frames_ping) X(frames_echo) X(frames_data) X(frames_bye)              \
	X(frames_other)		/* frames of a type the server does not accept */                \
	X(frames_bad)		/* malformed frames */                                             \
	X(auth_ok) X(auth_fail)                                                                 \
	X(data_bytes)		/* DATA payload bytes written to the sink */                       \
	X(data_acked)		/* DATA frames acknowledged after the sink write */                \
	X(tcp_accepted) X(tcp_closed) X(tcp_active)                                             \
	X(tcp_authed)		/* gauge: authenticated TCP connections (devices online) */       \
	X(udp_sessions) X(udp_active)                                                           \
	X(expired_tcp) X(expired_udp)                                                           \
	X(unknown_session)	/* UDP frames with a token the daemon does not know: dropped */  \
	X(errors)		/* I/O and internal errors */                                      \
	X(full)			/* clients refused because a table or map was full */             \
	X(refused_per_source)	/* TCP connections refused: source at --max-per-source */        \
	X(accept_paused)	/* accepting paused by --accept-rate (the kernel queues meanwhile) */ \
	X(hello_timeout)	/* TCP connections closed: no HELLO within --hello-timeout */     \
	X(pending_evicted)	/* no HELLO yet, closed for a newer one: --max-pending */        \
	X(auth_rate_limited)	/* failed HELLOs from a source over --auth-fail-rate */          \
	X(data_rate_limited)	/* DATA frames refused: device over --data-rate */              \
	X(too_large)		/* frames above --max-payload: TCP closed, datagram dropped */    \
	X(slow_reader)		/* TCP connections closed: more than --max-output unsent */      \
	X(map_full)		/* clients the kernel map had no room for (--on-map-full) */     \
	X(handoff_out)		/* connections and sessions handed to a new hbd (upgrade) */     \
	X(handoff_in)		/* connections and sessions taken over from the old hbd */       \
	X(adopted)		/* UDP sessions adopted from the pinned map at start */          \
	X(stale_conns)		/* conns entries of a dead daemon removed at start */           \
	X(down_sent)		/* DOWN frames sent to devices */                                  \
	X(down_acked)		/* DOWN frames the device acknowledged */                          \
	X(down_failed)		/* DOWN requests not delivered: offline, timeout, session ended */ \
	X(revoked)		/* sessions cut because their device was revoked */              \
	X(key_reloads)		/* key store reloads (SIGHUP or the control socket) */          \
	X(expiry_lookups)	/* map lookups by expiry: devices due without a seen slot, and  \
				 * silent ones confirmed before they are expired */              \
	X(keepalive_expired)	/* TCP devices in keepalive mode whose kernel stopped answering \
				 * probes (in expired_tcp too) */                               \
	X(udp_v1_refused)	/* version 1 UDP frames refused under --require-udp-mac */       \
	X(udp_bad_tag)		/* version 2 datagrams whose tag is wrong (or of a v1 session): \
				 * dropped */                                                   \
	X(udp_replay)		/* version 2 PINGs not newer than the session's last: dropped */ \
	X(path_challenges)	/* PATH_CHALLENGEs sent to a new source of a session */          \
	X(path_moves)		/* sessions moved to a new address after its PATH_RESPONSE */ \
	X(mqtt_pings_user)	/* MQTT PINGREQs the daemon answered itself */                   \
	X(mqtt_connects)	/* MQTT CONNECTs accepted (CONNACK 0) */                          \
	X(mqtt_refused)		/* MQTT CONNECTs refused with a CONNACK code */                  \
	X(mqtt_bad)		/* MQTT connections closed for a malformed or forbidden packet */ \
	X(mqtt_publish)		/* MQTT PUBLISHes taken into the sink */                          \
	X(mqtt_wills)		/* MQTT Will messages recorded (abnormal ends) */                 \
	X(frames_beat)		/* TCP BEATs that reached the daemon */                           \
	X(beats_user)		/* BEATs of authenticated devices the daemon recorded itself */
/* clang-format on */

#define HB_STAT_FIELD(name) __u64 name;
struct hb_kstats {
	HB_KSTATS(HB_STAT_FIELD)
};
/* One slot a worker, each on its own cache lines: workers add without sharing a line. */
struct hb_ustats {
	HB_USTATS(HB_STAT_FIELD)
} __attribute__((aligned(64)));

#define HB_STAT_COUNT_ONE(name) +1
#define HB_KSTATS_N (0 HB_KSTATS(HB_STAT_COUNT_ONE))
#define HB_USTATS_N (0 HB_USTATS(HB_STAT_COUNT_ONE))

#endif /* HBEAT_ABI_H */
