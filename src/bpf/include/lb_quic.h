/* SPDX-License-Identifier: Apache-2.0 */
/* QUIC connection-ID routing (Service spec.quic.connectionIdRouting, docs/datapath.md "QUIC connection IDs"): the
 * real a QUIC server put its server id into the connection IDs it chose (Katran's layout, below) is found from the
 * packet's destination connection ID, whatever the client's address and port now and whatever the service's table
 * says, so a QUIC connection survives table changes and client address migration. A packet without a usable server
 * id goes the ordinary way (connection table, then ring); nothing here drops or rewrites a packet.
 *
 * Server id in the connection ID (the first bytes of the destination connection ID, "CID"), by the CID's version in
 * its two top bits, as Katran reads it:
 *   version 1: 16 bits, the 6 low bits of CID[0], CID[1] and the 2 top bits of CID[2];
 *   version 2: 24 bits, CID[1..3] (big-endian);   version 3: 32 bits, CID[1..4];   version 0: no server id.
 * Server id 0 means none.
 *
 * Which packets carry a server-chosen CID: every short-header packet (1-RTT), and the Handshake packets of QUIC v1
 * (RFC 9000, long-header type 2) and v2 (RFC 9369, type 3). Initial and 0-RTT packets carry the CID the client chose;
 * Retry and version negotiation packets are sent by servers, never by clients; other versions are unknown to us.
 * Bounds (Katran's minimum, RFC 9000's maximum): a long header's DCID length must be 8..20 and the whole DCID inside
 * the packet; a short header must hold 8 bytes after its first byte (its CID length is the server's secret).
 *
 * Cost: only listeners with LB_VIP_F_QUIC (render sets it on the UDP listeners of a service with connection-ID
 * routing) reach this header's code, once per packet; every other listener pays one flag test. */
#ifndef LB_QUIC_H
#define LB_QUIC_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "lb_consts.h"
#include "lb_structs.h"
#include "lb_maps.h"

/* Entries of lb_quic_servers: the (service, server id) pairs of the healthy reals of every service with connection-ID
 * routing an lb node serves (DATAPLANE_LIMITS.lbQuicServers). */
#define LB_MAX_QUIC_SERVERS 65536

#define LB_QUIC_LONG_HEADER 0x80
#define LB_QUIC_TYPE_MASK 0x30
#define LB_QUIC_VERSION_1 0x00000001
#define LB_QUIC_VERSION_2 0x6b3343cf
#define LB_QUIC_MIN_CID 8
#define LB_QUIC_MAX_CID 20
/* first byte, version (4), DCID length: where a long header's DCID starts */
#define LB_QUIC_LONG_CID_OFF 6

/* lb_quic_servers key: one server id of one service (service ids are the same on every node). */
struct lb_quic_server_key {
	__u32 service_id;
	__u32 server_id;
};

/* The real that owns the server id: trusted only while lb_real_slots[real_slot] names real_id. */
struct lb_quic_server {
	__u32 real_id;
	__u32 real_slot;
};

/* per-outcome counters (lb_quic_stats); names in src/bpf/dataplane/codec.ts QUIC_COUNTER_NAMES */
enum lb_quic_counter {
	LB_QUIC_CNT_ROUTED = 0,  /* sent to the real its connection ID names */
	LB_QUIC_CNT_INITIAL,     /* Initial or 0-RTT: the client's own CID, so the table decides */
	LB_QUIC_CNT_NO_ID,       /* no server id: CID version 0 or id 0, version negotiation, Retry, an unknown version */
	LB_QUIC_CNT_UNKNOWN_ID,  /* a server id the service has no healthy real for (or one since removed) */
	LB_QUIC_CNT_MALFORMED,   /* too short for its header, or a long header's DCID length outside 8..20 */
	LB_QUIC_CNT_MAX,
};

/* (service, server id) -> real; written by the loader from render's quic server list (src/render/ops.ts). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LB_MAX_QUIC_SERVERS);
	__type(key, struct lb_quic_server_key);
	__type(value, struct lb_quic_server);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_quic_servers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LB_QUIC_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_quic_stats SEC(".maps");

static __always_inline void lb_quic_count(__u32 why)
{
	__u64 *c = bpf_map_lookup_elem(&lb_quic_stats, &why);

	if (c)
		*c += 1;
}

/* A big-endian 32-bit field of the packet, read with one load: x86 and arm64 load unaligned packet words, and the
 * verifier allows it wherever the kernel does (no strict alignment). */
static __always_inline __u32 lb_quic_be32(const __u8 *b)
{
	return bpf_ntohl(*(const __u32 *)b);
}

/* The server id of a connection ID (its first 5 bytes must be readable), 0 for none. */
static __always_inline __u32 lb_quic_cid_server_id(const __u8 *cid)
{
	__u32 w = lb_quic_be32(cid);

	switch (w >> 30) {
	case 1: /* the 16 bits after the version */
		return (w >> 14) & 0xffff;
	case 2: /* CID[1..3] */
		return w & 0xffffff;
	case 3: /* CID[1..4] */
		return lb_quic_be32(cid + 1);
	}
	return 0;
}

/* Finds the real a QUIC packet's connection ID names within a service: real id << 32 | real slot + 1, or 0 (the
 * caller falls back to the table). Counts every outcome. l4_off: the UDP header's offset (lb_packet.l4_off); the
 * program cut the frame to its IP length before, so data_end is the end of the UDP datagram. One BPF subprogram
 * (a call only for QUIC listeners), so xdp_lb carries the parser once and its other paths stay as they were. */
static __attribute__((noinline)) __u64 lb_quic_find(struct xdp_md *ctx, __u32 l4_off, __u32 service_id)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 why = LB_QUIC_CNT_MALFORMED;
	__u64 found = 0;
	const __u8 *cid;
	__u8 *q;

	if (l4_off > 18 + LB_IPV4_MAX_HDR_LEN) /* cannot happen (lb_parse_l4); bounds the offset for the verifier */
		goto out;
	q = data + l4_off + 8; /* the UDP payload: the QUIC packet */
	if ((void *)(q + 1 + LB_QUIC_MIN_CID) > data_end)
		goto out;
	if (q[0] & LB_QUIC_LONG_HEADER) {
		if ((void *)(q + LB_QUIC_LONG_CID_OFF + LB_QUIC_MIN_CID) > data_end)
			goto out;
		__u32 version = lb_quic_be32(q + 1);
		__u8 type = q[0] & LB_QUIC_TYPE_MASK;
		__u32 dcil = q[5];

		why = LB_QUIC_CNT_NO_ID;
		if (version == LB_QUIC_VERSION_1) {
			if (type != 0x20) { /* Initial 0, 0-RTT 1 (the client's CID), Retry 3 (server-only) */
				if (type < 0x20)
					why = LB_QUIC_CNT_INITIAL;
				goto out;
			}
		} else if (version == LB_QUIC_VERSION_2) {
			if (type != 0x30) { /* Retry 0, Initial 1, 0-RTT 2 */
				if (type)
					why = LB_QUIC_CNT_INITIAL;
				goto out;
			}
		} else {
			goto out; /* version negotiation (0) or a version we cannot read */
		}
		if (dcil < LB_QUIC_MIN_CID || dcil > LB_QUIC_MAX_CID ||
		    (void *)(q + LB_QUIC_LONG_CID_OFF) + dcil > data_end) {
			why = LB_QUIC_CNT_MALFORMED;
			goto out;
		}
		cid = q + LB_QUIC_LONG_CID_OFF;
	} else {
		cid = q + 1;
	}

	struct lb_quic_server_key k __attribute__((aligned(8)));

	/* service_id, server_id as one 64-bit store (little-endian target, as lb_flow_key_of) */
	*(__u64 *)&k = service_id | ((__u64)lb_quic_cid_server_id(cid) << 32);
	why = LB_QUIC_CNT_NO_ID;
	if (!k.server_id)
		goto out;
	why = LB_QUIC_CNT_UNKNOWN_ID;
	struct lb_quic_server *s = bpf_map_lookup_elem(&lb_quic_servers, &k);

	if (!s)
		goto out;
	__u32 slot = s->real_slot;
	__u32 real_id = s->real_id;
	struct lb_real_slot *rs = bpf_map_lookup_elem(&lb_real_slots, &slot);

	if (!rs || !real_id || rs->real_id != real_id)
		goto out;
	why = LB_QUIC_CNT_ROUTED;
	found = ((__u64)real_id << 32) | (slot + 1);
out:
	lb_quic_count(why);
	return found;
}

/* lb_quic_find for the packet: the real its connection ID names (and *real_id), or 0. */
static __always_inline struct lb_real *lb_quic_route(struct xdp_md *ctx, const struct lb_packet *p, __u32 service_id,
						     __u32 *real_id)
{
	__u64 found = lb_quic_find(ctx, p->l4_off, service_id);

	if (!found)
		return 0;
	__u32 slot = (__u32)found - 1;
	struct lb_real_slot *rs = bpf_map_lookup_elem(&lb_real_slots, &slot);

	/* the slot's real again (a subprogram cannot return a map value): still the one the entry named */
	if (!rs || rs->real_id != (__u32)(found >> 32))
		return 0;
	*real_id = rs->real_id;
	return &rs->real;
}

#endif
