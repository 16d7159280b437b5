// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* /metrics in the Prometheus text format (version 0.0.4), served by libmicrohttpd.
 *
 * Everything is read at scrape time from memory the workers already keep: their counter slots
 * (relaxed atomics), their timing histograms, and the pinned per-CPU kernel counters (one map
 * lookup a scrape). Scrapes add nothing to the heartbeat paths.
 */
#include "metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fleet.h"
#include "log.h"
#include "pins.h"
#include "version.h"
#include "worker.h"

struct hbd_metrics {
	struct hbd_daemon *d;
	struct MHD_Daemon *mhd;
	int kstats_fd; /* pinned kstats, -1 without the BPF side */
	double start_s; /* Unix time */
};

int hbd_metrics_parse_addr(const char *s, struct sockaddr_storage *ss, socklen_t *len)
{
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
	char host[64] = "127.0.0.1";
	const char *port_s = s, *colon;
	char *end;
	long port;

	memset(ss, 0, sizeof(*ss));
	if (s[0] == '[') {
		const char *rb = strchr(s, ']');

		if (!rb || rb[1] != ':' || (size_t)(rb - s - 1) >= sizeof(host))
			return -EINVAL;
		memcpy(host, s + 1, (size_t)(rb - s - 1));
		host[rb - s - 1] = 0;
		port_s = rb + 2;
	} else if ((colon = strrchr(s, ':'))) {
		if ((size_t)(colon - s) >= sizeof(host))
			return -EINVAL;
		if (colon > s) {
			memcpy(host, s, (size_t)(colon - s));
			host[colon - s] = 0;
		}
		port_s = colon + 1;
	}
	errno = 0;
	port = strtol(port_s, &end, 10);
	if (!*port_s || *end || errno || port < 0 || port > 65535)
		return -EINVAL;
	if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
		*len = sizeof(*s4);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		*len = sizeof(*s6);
		return 0;
	}
	return -EINVAL;
}

/* One metric family header. */
static void family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* MQTT devices (hbd --mqtt-port): their keepalives by who answered, CONNECTs, PUBLISHes. */
static void mqtt_metrics(FILE *f, const struct hb_ustats *u, const struct hb_kstats *k)
{
	family(f, "hbeat_mqtt_pings_total", "counter",
	       "MQTT PINGREQs answered, by the sockmap verdict (kernel) or hbd (user).");
	fprintf(f, "hbeat_mqtt_pings_total{path=\"kernel\"} %" PRIu64 "\n",
		k ? (uint64_t)k->mq_pong : 0);
	fprintf(f, "hbeat_mqtt_pings_total{path=\"user\"} %" PRIu64 "\n",
		(uint64_t)u->mqtt_pings_user);
	family(f, "hbeat_mqtt_connects_total", "counter",
	       "MQTT CONNECTs accepted (CONNACK 0) and refused (another CONNACK code).");
	fprintf(f, "hbeat_mqtt_connects_total{result=\"ok\"} %" PRIu64 "\n",
		(uint64_t)u->mqtt_connects);
	fprintf(f, "hbeat_mqtt_connects_total{result=\"refused\"} %" PRIu64 "\n",
		(uint64_t)u->mqtt_refused);
	family(f, "hbeat_mqtt_publish_total", "counter", "MQTT PUBLISHes written to the sink.");
	fprintf(f, "hbeat_mqtt_publish_total %" PRIu64 "\n", (uint64_t)u->mqtt_publish);
	family(f, "hbeat_mqtt_bad_total", "counter",
	       "MQTT connections closed for a malformed or forbidden packet.");
	fprintf(f, "hbeat_mqtt_bad_total %" PRIu64 "\n", (uint64_t)u->mqtt_bad);
	family(f, "hbeat_mqtt_wills_total", "counter", "MQTT Will messages recorded.");
	fprintf(f, "hbeat_mqtt_wills_total %" PRIu64 "\n", (uint64_t)u->mqtt_wills);
}

/* Fleet mode (hbd --nats): the node's NATS side, for an operator to see a backlog or a
 * failing JetStream before presence goes stale. Left out on a single node. */
static void fleet_metrics(FILE *f, struct hbd_daemon *d)
{
	struct hbd_fleet_stats s;

	if (!hbd_fleet_stats(d, &s))
		return;
	family(f, "hbeat_fleet_connected", "gauge",
	       "1 while connected to NATS with the stream and buckets in place.");
	fprintf(f, "hbeat_fleet_connected %d\n", s.connected);
	family(f, "hbeat_fleet_nats_errors_total", "counter",
	       "Asynchronous errors from nats-server: a permission this node's user lacks, a "
	       "slow consumer (each is logged, once a second at most).");
	fprintf(f, "hbeat_fleet_nats_errors_total %" PRIu64 "\n", s.nats_errors);
	family(f, "hbeat_fleet_nodes_live", "gauge",
	       "Nodes in hbeat_nodes refreshed within the node TTL, this one included.");
	fprintf(f, "hbeat_fleet_nodes_live %u\n", s.nodes_live);
	family(f, "hbeat_fleet_devices_held", "gauge",
	       "Devices whose presence entry this node owns, ended ones still to be written "
	       "included.");
	fprintf(f, "hbeat_fleet_devices_held %" PRIu64 "\n", s.held);
	family(f, "hbeat_fleet_presence_writes_total", "counter",
	       "Presence writes into hbeat_presence by outcome: acknowledged, or failed at the "
	       "publish, unacknowledged in time, refused by JetStream (each failure is written "
	       "again).");
#define PW(result, v) \
	fprintf(f, "hbeat_fleet_presence_writes_total{result=\"" result "\"} %" PRIu64 "\n", v);
	PW("acked", s.count.pres_written)
	PW("failed_publish", s.count.pres_failed_pub)
	PW("failed_timeout", s.count.pres_failed_timeout)
	PW("refused", s.count.pres_failed_js)
#undef PW
	family(f, "hbeat_fleet_presence_inflight", "gauge",
	       "Presence writes published and not acknowledged yet (--nats-presence-window "
	       "bounds the ends among them).");
	fprintf(f, "hbeat_fleet_presence_inflight %" PRIu64 "\n", s.pres_inflight);
	family(f, "hbeat_fleet_presence_retaken_total", "counter",
	       "Presence writes in flight given up (no acknowledgement, or NATS reconnected) and "
	       "made again.");
	fprintf(f, "hbeat_fleet_presence_retaken_total %" PRIu64 "\n", s.count.pres_taken_back);
	family(f, "hbeat_fleet_events_lost_total", "counter",
	       "Presence events the workers' queue had no room for (the device table is then "
	       "compared, so presence still catches up).");
	fprintf(f, "hbeat_fleet_events_lost_total %" PRIu64 "\n", s.count.events_lost);
	family(f, "hbeat_fleet_data_total", "counter",
	       "DATA frames published to HBEAT_DATA, by outcome (a failed one is not ACKed to "
	       "its device).");
	fprintf(f, "hbeat_fleet_data_total{result=\"acked\"} %" PRIu64 "\n",
		s.count.data_published);
	fprintf(f, "hbeat_fleet_data_total{result=\"failed\"} %" PRIu64 "\n", s.count.data_failed);
	family(f, "hbeat_fleet_downlink_requests_total", "counter",
	       "Requests on hbeat.down.<device> this node took, and the ones it answered.");
	fprintf(f, "hbeat_fleet_downlink_requests_total{result=\"received\"} %" PRIu64 "\n",
		s.count.down_in);
	fprintf(f, "hbeat_fleet_downlink_requests_total{result=\"answered\"} %" PRIu64 "\n",
		s.count.down_replied);
	family(f, "hbeat_fleet_superseded_total", "counter",
	       "Sessions here cut because the device came online on another node.");
	fprintf(f, "hbeat_fleet_superseded_total %" PRIu64 "\n", s.count.superseded);
	family(f, "hbeat_fleet_dead_node_devices_total", "counter",
	       "Devices of dead nodes this node marked offline in presence.");
	fprintf(f, "hbeat_fleet_dead_node_devices_total %" PRIu64 "\n", s.count.node_lost_marked);
}

static unsigned batch_wait_workers(const struct hbd_daemon *d)
{
	unsigned n = 0;

	for (unsigned w = 0; d->workers && w < d->plan.workers; w++)
		n += d->workers[w] && __atomic_load_n(&d->workers[w]->gate.on, __ATOMIC_RELAXED);
	return n;
}

static void timing(FILE *f, struct hbd_daemon *d, size_t off, const char *name, const char *help)
{
	static const uint64_t bound[HBD_TIMING_N] = HBD_TIMING_BOUNDS_US;
	uint64_t b[HBD_TIMING_N + 1] = { 0 }, sum = 0, cum = 0;

	for (unsigned w = 0; w < d->plan.workers; w++) {
		const struct hbd_timing *t;

		if (!d->workers || !d->workers[w])
			continue;
		t = (const struct hbd_timing *)((const char *)d->workers[w] + off);
		for (int i = 0; i <= HBD_TIMING_N; i++)
			b[i] += __atomic_load_n(&t->bucket[i], __ATOMIC_RELAXED);
		sum += __atomic_load_n(&t->sum_us, __ATOMIC_RELAXED);
	}
	family(f, name, "histogram", help);
	for (int i = 0; i < HBD_TIMING_N; i++) {
		cum += b[i];
		fprintf(f, "%s_bucket{le=\"%g\"} %" PRIu64 "\n", name, (double)bound[i] / 1e6, cum);
	}
	/* _count is the +Inf bucket, not the separate count field, so the two always agree even
	 * while a worker is between its increments */
	cum += b[HBD_TIMING_N];
	fprintf(f, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", name, cum);
	fprintf(f, "%s_sum %.6f\n%s_count %" PRIu64 "\n", name, (double)sum / 1e6, name, cum);
}

char *hbd_metrics_render(struct hbd_metrics *m, size_t *len)
{
	struct hbd_daemon *d = m->d;
	struct hb_ustats u;
	struct hb_kstats k;
	bool have_k;
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);

	if (!f)
		return NULL;
	hb_ustats_sum(d->stats, HB_MAX_WORKERS, &u);
	have_k = m->kstats_fd >= 0 && hb_kstats_read(m->kstats_fd, &k) == 0;

	family(f, "hbeat_build_info", "gauge", "Version of hbd and how it answers heartbeats.");
	fprintf(f, "hbeat_build_info{version=\"%s\",mode=\"%s\"} 1\n", HBEAT_VERSION,
		d->kern.offload ? "offload" : "userspace");
	family(f, "hbeat_start_time_seconds", "gauge", "Unix time hbd started.");
	fprintf(f, "hbeat_start_time_seconds %.3f\n", m->start_s);

	family(f, "hbeat_devices_connected", "gauge",
	       "Devices with an open session, by transport.");
	fprintf(f, "hbeat_devices_connected{transport=\"tcp\"} %" PRIu64 "\n",
		(uint64_t)u.tcp_authed);
	fprintf(f, "hbeat_devices_connected{transport=\"udp\"} %" PRIu64 "\n",
		(uint64_t)u.udp_active);
	family(f, "hbeat_tcp_connections", "gauge", "Open TCP connections, authenticated or not.");
	fprintf(f, "hbeat_tcp_connections %" PRIu64 "\n", (uint64_t)u.tcp_active);

	family(f, "hbeat_heartbeats_kernel_total", "counter",
	       "Heartbeats answered in the kernel: XDP (udp) and the sockmap verdict (tcp).");
	fprintf(f, "hbeat_heartbeats_kernel_total{transport=\"udp\"} %" PRIu64 "\n",
		have_k ? (uint64_t)k.xdp_pong : 0);
	fprintf(f, "hbeat_heartbeats_kernel_total{transport=\"tcp\"} %" PRIu64 "\n",
		have_k ? (uint64_t)k.sk_pong : 0);
	family(f, "hbeat_heartbeats_user_total", "counter", "Heartbeats hbd answered itself.");
	fprintf(f, "hbeat_heartbeats_user_total %" PRIu64 "\n", (uint64_t)u.pings_user);
	mqtt_metrics(f, &u, have_k ? &k : NULL);

	family(f, "hbeat_expired_total", "counter", "Sessions expired after a silent timeout.");
	fprintf(f, "hbeat_expired_total{transport=\"tcp\"} %" PRIu64 "\n", (uint64_t)u.expired_tcp);
	fprintf(f, "hbeat_expired_total{transport=\"udp\"} %" PRIu64 "\n", (uint64_t)u.expired_udp);
	family(f, "hbeat_keepalive_expired_total", "counter",
	       "TCP devices in keepalive mode whose kernel stopped answering probes (in "
	       "hbeat_expired_total too).");
	fprintf(f, "hbeat_keepalive_expired_total %" PRIu64 "\n", (uint64_t)u.keepalive_expired);
	if (have_k) {
		family(f, "hbeat_keepalive_set_total", "counter",
		       "New TCP connections sock_ops turned keepalive on for (hbctl load --tcp "
		       "keepalive), by outcome.");
		fprintf(f, "hbeat_keepalive_set_total{result=\"ok\"} %" PRIu64 "\n",
			(uint64_t)k.sockops_keepalive);
		fprintf(f, "hbeat_keepalive_set_total{result=\"failed\"} %" PRIu64 "\n",
			(uint64_t)k.sockops_keepalive_err);
		family(f, "hbeat_tcp_closed_total", "counter",
		       "TCP connections on the service port closed, by what the kernel saw: a "
		       "keepalive or user timeout, a reset, a clean close, another error.");
#define CLOSED(reason, field)                                                     \
	fprintf(f, "hbeat_tcp_closed_total{reason=\"" reason "\"} %" PRIu64 "\n", \
		(uint64_t)k.field);
		CLOSED("timeout", sockops_close_timeout)
		CLOSED("reset", sockops_close_reset)
		CLOSED("normal", sockops_close_normal)
		CLOSED("error", sockops_close_error)
#undef CLOSED
	}
	family(f, "hbeat_auth_total", "counter", "HELLOs by outcome.");
	fprintf(f, "hbeat_auth_total{result=\"ok\"} %" PRIu64 "\n", (uint64_t)u.auth_ok);
	fprintf(f, "hbeat_auth_total{result=\"failed\"} %" PRIu64 "\n", (uint64_t)u.auth_fail);

	family(f, "hbeat_data_frames_total", "counter", "DATA frames received from devices.");
	fprintf(f, "hbeat_data_frames_total %" PRIu64 "\n", (uint64_t)u.frames_data);
	family(f, "hbeat_data_acked_total", "counter",
	       "DATA frames written to the sink and ACKed.");
	fprintf(f, "hbeat_data_acked_total %" PRIu64 "\n", (uint64_t)u.data_acked);
	family(f, "hbeat_data_bytes_total", "counter", "DATA payload bytes written to the sink.");
	fprintf(f, "hbeat_data_bytes_total %" PRIu64 "\n", (uint64_t)u.data_bytes);

	family(f, "hbeat_drops_total", "counter", "Frames and clients refused, by reason.");
	fprintf(f, "hbeat_drops_total{reason=\"xdp_malformed\"} %" PRIu64 "\n",
		have_k ? (uint64_t)k.xdp_drop_malformed : 0);
	fprintf(f, "hbeat_drops_total{reason=\"malformed\"} %" PRIu64 "\n", (uint64_t)u.frames_bad);
	fprintf(f, "hbeat_drops_total{reason=\"unknown_session\"} %" PRIu64 "\n",
		(uint64_t)u.unknown_session);
	fprintf(f, "hbeat_drops_total{reason=\"full\"} %" PRIu64 "\n", (uint64_t)u.full);
	fprintf(f, "hbeat_drops_total{reason=\"unexpected_type\"} %" PRIu64 "\n",
		(uint64_t)u.frames_other);
	/* the limits (docs/RELIABILITY.md), each a reason of its own */
#define DROP(reason, field) \
	fprintf(f, "hbeat_drops_total{reason=\"" reason "\"} %" PRIu64 "\n", (uint64_t)u.field);
	DROP("too_large", too_large)
	DROP("per_source_limit", refused_per_source)
	DROP("hello_timeout", hello_timeout)
	DROP("pending_evicted", pending_evicted)
	DROP("auth_rate_limited", auth_rate_limited)
	DROP("data_rate_limited", data_rate_limited)
	DROP("slow_reader", slow_reader)
	DROP("map_full", map_full)
#undef DROP

	family(f, "hbeat_downlink_total", "counter", "Downlink messages by outcome.");
	fprintf(f, "hbeat_downlink_total{result=\"sent\"} %" PRIu64 "\n", (uint64_t)u.down_sent);
	fprintf(f, "hbeat_downlink_total{result=\"acked\"} %" PRIu64 "\n", (uint64_t)u.down_acked);
	fprintf(f, "hbeat_downlink_total{result=\"failed\"} %" PRIu64 "\n",
		(uint64_t)u.down_failed);
	family(f, "hbeat_revoked_total", "counter",
	       "Live sessions cut because the device was revoked.");
	fprintf(f, "hbeat_revoked_total %" PRIu64 "\n", (uint64_t)u.revoked);
	family(f, "hbeat_key_reloads_total", "counter", "Key store reloads.");
	fprintf(f, "hbeat_key_reloads_total %" PRIu64 "\n", (uint64_t)u.key_reloads);
	family(f, "hbeat_expiry_lookups_total", "counter",
	       "Map lookups by expiry (a device due without a heartbeat stamp, or a silence "
	       "confirmed).");
	fprintf(f, "hbeat_expiry_lookups_total %" PRIu64 "\n", (uint64_t)u.expiry_lookups);
	family(f, "hbeat_batch_wait_workers", "gauge",
	       "Workers whose completion rate has their --batch-wait timed wait on now.");
	fprintf(f, "hbeat_batch_wait_workers %u\n", batch_wait_workers(d));
	family(f, "hbeat_errors_total", "counter", "I/O and internal errors in hbd.");
	fprintf(f, "hbeat_errors_total %" PRIu64 "\n", (uint64_t)u.errors);
	family(f, "hbeat_events_dropped_total", "counter",
	       "Presence events lost because subscribers fell behind.");
	fprintf(f, "hbeat_events_dropped_total %" PRIu64 "\n",
		(uint64_t)__atomic_load_n(&d->ctl.events_lost, __ATOMIC_RELAXED));

	fleet_metrics(f, d);

	timing(f, d, offsetof(struct hbd_worker, t_sink), "hbeat_sink_write_seconds",
	       "Time from handing a DATA batch to the sink until it was written (and synced).");
	timing(f, d, offsetof(struct hbd_worker, t_down), "hbeat_downlink_ack_seconds",
	       "Round trip of a downlink: DOWN sent until the device's ACK arrived.");

	/* every raw counter under its ABI name, so nothing hbctl stats shows is missing here */
	if (have_k) {
		family(f, "hbeat_kernel_counter_total", "counter",
		       "Kernel fast-path counters (hbctl stats, kernel).");
#define K(name)                                                                       \
	fprintf(f, "hbeat_kernel_counter_total{counter=\"" #name "\"} %" PRIu64 "\n", \
		(uint64_t)k.name);
		HB_KSTATS(K)
#undef K
	}
	family(f, "hbeat_daemon_counter", "untyped",
	       "Daemon counters and gauges (hbctl stats, user) under their ABI names.");
#define U(name) \
	fprintf(f, "hbeat_daemon_counter{counter=\"" #name "\"} %" PRIu64 "\n", (uint64_t)u.name);
	HB_USTATS(U)
#undef U
	if (fclose(f)) {
		free(buf);
		return NULL;
	}
	return buf;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
			      const char *method, const char *version, const char *upload,
			      size_t *upload_len, void **state)
{
	static const char not_found[] = "only /metrics lives here\n";
	struct hbd_metrics *m = cls;
	struct MHD_Response *r;
	enum MHD_Result ret;
	unsigned status = MHD_HTTP_OK;
	size_t len = 0;
	char *body = NULL;

	if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
		return MHD_NO; /* closes the connection: nothing else is served */
	if (!strcmp(url, "/metrics"))
		body = hbd_metrics_render(m, &len);
	if (body) {
		r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	} else {
		status = strcmp(url, "/metrics") ? MHD_HTTP_NOT_FOUND
						 : MHD_HTTP_INTERNAL_SERVER_ERROR;
		r = MHD_create_response_from_buffer(sizeof(not_found) - 1, (void *)not_found,
						    MHD_RESPMEM_PERSISTENT);
	}
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
				"text/plain; version=0.0.4; charset=utf-8");
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char line[256];

	vsnprintf(line, sizeof(line), fmt, ap);
	line[strcspn(line, "\n")] = 0;
	hb_warn("metrics: %s", line);
}

int hbd_metrics_start(struct hbd_metrics **out, struct hbd_daemon *d, const char *addr,
		      uint16_t *port)
{
	struct hbd_metrics *m = calloc(1, sizeof(*m));
	struct sockaddr_storage ss;
	const union MHD_DaemonInfo *info;
	socklen_t slen;

	if (!m)
		return -ENOMEM;
	if (hbd_metrics_parse_addr(addr, &ss, &slen)) {
		free(m);
		return -EINVAL;
	}
	m->d = d;
	m->start_s = (double)hb_realtime_ms() / 1000;
	/* without the BPF side the kernel families are left out */
	m->kstats_fd = hb_pin_open(d->cfg->pin_path, HB_MAP_KSTATS, NULL, 0);
	m->mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG |
					  (ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0),
				  0, NULL, NULL, handle, m, MHD_OPTION_EXTERNAL_LOGGER, mhd_log,
				  NULL, MHD_OPTION_SOCK_ADDR, &ss, MHD_OPTION_CONNECTION_LIMIT, 32u,
				  MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
	if (!m->mhd) {
		int rc = errno ? -errno : -EADDRINUSE;

		if (m->kstats_fd >= 0)
			close(m->kstats_fd);
		free(m);
		return rc;
	}
	info = MHD_get_daemon_info(m->mhd, MHD_DAEMON_INFO_BIND_PORT);
	*port = info ? info->port : 0;
	*out = m;
	return 0;
}

void hbd_metrics_stop(struct hbd_metrics *m)
{
	if (!m)
		return;
	MHD_stop_daemon(m->mhd);
	if (m->kstats_fd >= 0)
		close(m->kstats_fd);
	free(m);
}
