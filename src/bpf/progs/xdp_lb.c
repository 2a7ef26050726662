// SPDX-License-Identifier: GPL-2.0
/* gitlb load-balancer node: one XDP program, read top to bottom as the packet's journey.
 *
 *   parse -> VIP? -> connection table -> (miss) Maglev ring -> real -> dispatch by mode -> send
 *
 * Map layout, the flow hash and every counter are specified in docs/datapath.md. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "lb_consts.h"
#include "lb_structs.h"
#include "lb_maps.h"
#include "lb_stats.h"
#include "lb_parsing.h"
#include "lb_hashing.h"
#include "lb_encap.h"
#include "lb_ipopt6.h"
#include "lb_icmp.h"
#include "lb_affinity.h"
#include "lb_sync.h"
#include "lb_snat.h"
#include "lb_sanity.h"
#include "lb_source_ranges.h"
#include "lb_quic.h"
#include "lb_capture_hooks.h"

char LICENSE[] SEC("license") = "GPL";

static __always_inline int lb_pass(__u32 reason)
{
	lb_count(reason);
	return XDP_PASS;
}

static __always_inline int lb_drop(__u32 reason)
{
	lb_count(reason);
	return XDP_DROP;
}

/* Map keys are written in 64-bit words, from registers: the kernel hashes a key in 32-bit words and copies it
 * in 64-bit ones, and a load that spans several narrower stores cannot be store-forwarded (a stall of a few ns
 * per word, several per packet). Keys must therefore be 8-byte aligned (LB_KEY_ALIGN). The packed words assume
 * the little-endian BPF target. */
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "lb_vip_key_of / lb_flow_key_of pack key words for a little-endian target"
#endif
#define LB_KEY_ALIGN __attribute__((aligned(8)))

static __always_inline void lb_put_addr(void *to, const __u32 *from)
{
	__u64 *w = to;

	w[0] = from[0] | ((__u64)from[1] << 32);
	w[1] = from[2] | ((__u64)from[3] << 32);
}

static __always_inline void lb_vip_key_of(const struct lb_packet *p, struct lb_vip_key *k, int with_port)
{
	__u32 port = with_port ? p->dport : 0;
	__u32 proto = with_port ? p->proto : 0;

	lb_put_addr(k->addr, p->dst);
	/* port (as on the wire), proto, family */
	*(__u32 *)&k->port = port | (proto << 16) | ((__u32)p->family << 24);
}

/* A damaged packet is ours to drop only if it was sent to one of our VIP addresses. */
static __attribute__((noinline)) int lb_damaged(const struct lb_packet *p, __u32 reason, int ports_known)
{
	struct lb_vip_key k LB_KEY_ALIGN;

	lb_vip_key_of(p, &k, ports_known);
	if (bpf_map_lookup_elem(&lb_vips, &k))
		return lb_drop(reason);
	if (ports_known) {
		lb_vip_key_of(p, &k, 0);
		if (bpf_map_lookup_elem(&lb_vips, &k))
			return lb_drop(reason);
	}
	return lb_pass(LB_CNT_PASS_NOT_VIP);
}

/* An echo request (lb_is_echo_request): answered when sent to one of our VIP addresses (its address marker),
 * screened like VIP traffic first (group MACs, martian sources, a wrong IPv4 header checksum get no answer).
 * -1: not to a VIP address, the caller goes on. */
static __attribute__((noinline)) int lb_echo(struct xdp_md *ctx, struct lb_packet *p)
{
	struct lb_vip_key k LB_KEY_ALIGN;
	__u32 reason;

	lb_vip_key_of(p, &k, 0);
	if (!bpf_map_lookup_elem(&lb_vips, &k))
		return -1;
	reason = lb_hostile_reason(ctx, p);
	if (reason)
		return lb_drop(reason);
	if (p->family == 4 && !lb_ipv4_csum_ok(ctx, p->l3_off, p->ihl_bytes))
		return lb_drop(LB_CNT_DROP_BAD_IP_CSUM);
	if (lb_trim_to_ip(ctx, p) || lb_icmp_echo_reply(ctx, p))
		return lb_drop(LB_CNT_DROP_ADJUST);
	lb_count(LB_CNT_ICMP_ECHO_REPLY);
	return XDP_TX;
}

static __always_inline void lb_flow_key_of(const struct lb_packet *p, struct lb_flow_key *k)
{
	lb_put_addr(k->src, p->src);
	lb_put_addr(k->dst, p->dst);
	/* sport, dport (as on the wire), proto, family, pad 0 */
	*(__u64 *)&k->sport = (__u64)p->sport | ((__u64)p->dport << 16) | ((__u64)p->proto << 32) | ((__u64)p->family << 40);
}

/* The outer source of dsr-ipip: IPv4, one of the node's own addresses (by flow hash among up to 8), as its value;
 * IPv6, 0 when cfg->src6 holds it. -1: the kernel chooses (BPF_FIB_LOOKUP_SRC). */
static __always_inline __s64 lb_ipip_source(const struct lb_config *cfg, __u32 hash, __u8 real_family)
{
	if (real_family == 4) {
		__u32 n = cfg->src4_count;

		if (n == 0)
			return -1;
		__u32 i = n > 1 ? (hash >> 16) % n : 0;

		if (i >= LB_MAX_SRC4)
			return -1;
		return cfg->src4[i];
	}
	return cfg->src6_set ? 0 : -1;
}

/* dsr-ipopt inserts its option into a flow's first packet: a TCP SYN (ACK clear), every UDP datagram */
static __always_inline int lb_ipopt_inserts(const struct lb_packet *p)
{
	return p->proto == IPPROTO_UDP || (p->tcp_flags & (LB_TCP_FLAG_SYN | LB_TCP_FLAG_ACK)) == LB_TCP_FLAG_SYN;
}

/* Too big for the real's path after our encapsulation: the client gets an ICMP answer with the MTU it must fit
 * in. A subprogram: rare, and one copy for both families. */
static __attribute__((noinline)) int lb_too_big(struct xdp_md *ctx, const struct lb_packet *p, __u32 mtu)
{
	/* a host discards a datagram whose header checksum is wrong (RFC 1122 3.2.1.2): it gets no answer */
	if (p->family == 4 && !lb_ipv4_csum_ok(ctx, p->l3_off, p->ihl_bytes))
		return lb_drop(LB_CNT_DROP_BAD_IP_CSUM);
	if (p->family == 4 ? lb_icmp4_frag_needed(ctx, p, mtu) : lb_icmp6_too_big(ctx, p, mtu))
		return lb_drop(LB_CNT_DROP_ADJUST);
	lb_count(LB_CNT_ICMP_SENT);
	return XDP_TX;
}

/* The packet's whole path; xdp_lb (below) is this, or this between the capture's entry and exit (lb_capture.h). */
static __always_inline int lb_process(struct xdp_md *ctx)
{
	struct lb_packet p = {};
	__u32 reason = 0;
	__u32 zero = 0;
	int verdict;

	/* 1. parse */
	verdict = lb_parse(ctx, &p, &reason);
	LB_CAP_PACKET(ctx, &p);
	if (verdict != LB_PARSE_OK) {
		/* replies of SNAT flows (and ICMP errors about them) come back to the SNAT address: lb_snat.h */
		int snat = lb_snat_reverse(ctx, &p, verdict);

		if (snat >= 0)
			return snat;
		/* ping a VIP, get an answer from it (echo requests only: the rest of ICMP stays the kernel's) */
		if (verdict == LB_PARSE_PASS && reason == LB_CNT_PASS_NOT_VIP && lb_is_echo_request(ctx, &p)) {
			int echo = lb_echo(ctx, &p);

			if (echo >= 0)
				return echo;
		}
		if (verdict == LB_PARSE_PASS)
			return lb_pass(reason);
		return lb_damaged(&p, reason, reason == LB_CNT_DROP_MALFORMED_L4 || (reason == LB_CNT_DROP_TRUNCATED_L4 && p.dport));
	}

	/* 2. is it a VIP:port:protocol? (VIP traffic never pays for the SNAT reply check) */
	struct lb_vip_key vk LB_KEY_ALIGN;

	lb_vip_key_of(&p, &vk, 1);
	struct lb_vip_value *vip = bpf_map_lookup_elem(&lb_vips, &vk);

	if (!vip) {
		int snat = lb_snat_reverse(ctx, &p, verdict);

		return snat >= 0 ? snat : lb_pass(LB_CNT_PASS_NOT_VIP);
	}
	/* ours from here on: refuse what must never be forwarded or answered, cut trailer bytes (lb_sanity.h) */
	reason = lb_hostile_reason(ctx, &p);
	if (reason)
		return lb_drop(reason);
	/* only clients in the service's sourceRanges, on every packet (established flows too); a service without
	 * ranges pays this flag test only (lb_source_ranges.h) */
	if ((vip->flags & LB_VIP_F_SOURCE_RANGES) && !lb_source_allowed(&p, vip->service_id))
		return lb_drop(LB_CNT_DROP_SOURCE_RANGE);
	if (lb_trim_to_ip(ctx, &p))
		return lb_drop(LB_CNT_DROP_ADJUST);
	__u32 service_id = vip->service_id;
	__u32 stats_slot = vip->stats_slot;
	__u8 mode = vip->mode;
	__be16 target_port = vip->target_port;
	int use_sport = vip->flags & LB_VIP_F_HASH_SRC_PORT;
	__u32 affinity_s = vip->affinity_s;
	int quic = vip->flags & LB_VIP_F_QUIC;

	if (mode == LB_MODE_SNAT) {
		/* SNAT forwarding (address + port translation, NAT table): lb_snat.h, a subprogram that reads the
		 * listener's fields once on entry, as this path did above */
		lb_traffic_add(&lb_service_stats, stats_slot, p.frame_len, 0);
		return lb_snat_forward(ctx, &p, vip);
	}

	/* 3. connection table: an established flow keeps its real whatever the ring says now */
	int new_flow = p.proto == IPPROTO_TCP &&
		       (p.tcp_flags & (LB_TCP_FLAG_SYN | LB_TCP_FLAG_ACK)) == LB_TCP_FLAG_SYN;
	struct lb_flow_key fk LB_KEY_ALIGN;
	struct lb_real *real = 0;
	__u32 real_id = 0;
	__u32 hash = 0;
	int have_hash = 0;

	lb_flow_key_of(&p, &fk);
	/* QUIC listeners: the server id in the connection ID names the real, whatever the client's address and port
	 * and whatever the ring says; without a usable one the connection table and the ring decide (lb_quic.h) */
	if (quic)
		real = lb_quic_route(ctx, &p, service_id, &real_id);
	if (!real && !new_flow) {
		struct lb_flow_value *fv = bpf_map_lookup_elem(&lb_conntrack, &fk);

		if (fv && fv->service_id == service_id) {
			/* the real by its slot (array); a slot since freed or given to another real names another id */
			__u32 slot = fv->real_slot;
			struct lb_real_slot *rs = bpf_map_lookup_elem(&lb_real_slots, &slot);

			if (rs && rs->real_id && rs->real_id == fv->real_id) {
				real_id = rs->real_id;
				real = &rs->real;
				lb_count(LB_CNT_CT_HIT);
				/* coarse last-seen (a drained node counts the connections it still carries): written at
				 * most once per 1.07 s per flow, so an established flow's packets leave its cache line alone;
				 * only forward (the coarse clock may trail the insert's by a tick) */
				__u32 seen = bpf_ktime_get_coarse_ns() >> 30;

				if (seen > fv->last_seen)
					fv->last_seen = seen;
			}
		}
	}
	/* node settings: looked up only once the connection table has answered */
	struct lb_config *cfg = bpf_map_lookup_elem(&lb_config, &zero);

	if (!cfg)
		return lb_drop(LB_CNT_DROP_NO_SERVICE);
	if (real) {
		new_flow = 0;
	} else {
		lb_count(LB_CNT_CT_MISS);
		/* 4. miss: a service with session affinity sends the client where its last connection went, while the
		 * current ring still names that real (lb_affinity.h); services without it never look */
		struct lb_affinity_key ak LB_KEY_ALIGN;
		__u64 now = 0;
		int remember = 0;

		if (affinity_s)
			real = lb_affinity_lookup(&p, service_id, affinity_s, &ak, &now, &real_id, 0);
		if (!real) {
			/* the service's Maglev ring picks the real */
			hash = lb_flow_hash(&p, use_sport, cfg->hash_seed);
			have_hash = 1;
			real = lb_ring_pick(service_id, hash, &real_id, &reason);
			if (!real) {
				if (reason == LB_CNT_DROP_NO_REAL) /* an empty service still counts the traffic sent to it */
					lb_traffic_add(&lb_service_stats, stats_slot, p.frame_len, 0);
				return lb_drop(reason);
			}
			remember = affinity_s != 0;
		}
		/* real_id and service_id as one 64-bit store: the kernel copies the value in 64-bit words */
		struct lb_flow_value nv LB_KEY_ALIGN;

		*(__u64 *)&nv.real_id = real_id | ((__u64)service_id << 32);
		nv.real_slot = real->slot;
		/* the recency mark: when this real was chosen (a SYN always lands here), never touched on a hit. The
		 * coarse clock (CLOCK_MONOTONIC to the last tick, a few ms): the sync compares marks to 1 s, and the
		 * precise clock cost 25-50 ns per SYN here */
		nv.chosen_ns = bpf_ktime_get_coarse_ns();
		nv.last_seen = nv.chosen_ns >> 30;

		if (cfg->new_flow_rate && lb_over_new_flow_rate(cfg->new_flow_rate)) {
			lb_count(LB_CNT_CT_RATE_LIMITED);
			/* a SYN skipped the lookup: an entry of an earlier connection on this 5-tuple may name another
			 * real, and the connection's next packets must not find it (a delete frees, never evicts) */
			if (new_flow)
				bpf_map_delete_elem(&lb_conntrack, &fk);
		} else {
			/* a new entry (a new flow, or a SYN that re-read the table) goes to the other lb nodes (lb_sync.h) */
			long written = bpf_map_update_elem(&lb_conntrack, &fk, &nv, BPF_ANY) == 0;

			lb_sync_publish(cfg, written, LB_SYNC_EV_CT, &fk, &nv);
			/* the rate guard bounds affinity inserts too: a flood of new clients evicts no remembered client */
			if (remember)
				lb_affinity_remember(&ak, real_id, real->slot, now);
		}
		new_flow = 1;
	}
	lb_traffic_add(&lb_service_stats, stats_slot, p.frame_len, new_flow);
	lb_real_traffic_add(real->slot, &p, new_flow);
	LB_CAP_REAL(real_id);

	/* 5. dispatch: per mode the checks before the next hop, then one next-hop lookup, the mode's rewrite and one
	 * send (one copy of the next-hop cache and the send in the hot function, not one per mode). Few values
	 * live across the next-hop lookup (its helper calls): what the rewrite needs is recomputed after it. */
	const struct lb_next_hop *nh;
	__s64 outer_src = 0; /* dsr-ipip/gue: the IPv4 outer source (IPv6: 0 = cfg->src6), -1 = the kernel's */
	int rc;

	if (mode == LB_MODE_DSR_IPIP || mode == LB_MODE_DSR_GUE) {
		/* dsr-gue: the same outer header with UDP to the GUE port (target_port) after it, same family only */
		int gue = mode == LB_MODE_DSR_GUE;
		__u32 overhead = (real->family == 4 ? LB_IPV4_HDR_LEN : LB_IPV6_HDR_LEN) + (gue ? LB_GUE_UDP_LEN : 0);

		if (gue && p.family != real->family)
			return lb_drop(LB_CNT_DROP_UNSUPPORTED);
		if (p.l3_len + overhead > cfg->mtu)
			goto too_big;
		/* the flow hash is entropy for the outer header: on a connection-table hit it is computed only when
		 * something uses it (a choice among several IPv4 sources, the IPv6 flow label, the GUE source port) */
		if (!have_hash && (gue || real->family != 4 || cfg->src4_count > 1))
			hash = lb_flow_hash(&p, use_sport, cfg->hash_seed);
		outer_src = lb_ipip_source(cfg, hash, real->family);
	} else if (mode == LB_MODE_DSR_IPOPT) {
		/* the option names the VIP to a real of the VIP's family (IPv4 option, IPv6 destination options) */
		if (p.family != real->family)
			return lb_drop(LB_CNT_DROP_UNSUPPORTED);
		if (lb_ipopt_inserts(&p)) {
			if (p.family == 4) {
				if (p.ihl_bytes + LB_DSR_OPT_LEN > LB_IPV4_MAX_HDR_LEN)
					return lb_drop(LB_CNT_DROP_IPOPT_NO_ROOM);
				/* the insert recomputes the header checksum: never over a header that arrived corrupted */
				if (!lb_ipv4_csum_ok(ctx, p.l3_off, p.ihl_bytes))
					return lb_drop(LB_CNT_DROP_BAD_IP_CSUM);
			}
			if (p.l3_len + (p.family == 4 ? LB_DSR_OPT_LEN : LB_DSR_EXT6_LEN) > cfg->mtu)
				goto too_big;
		}
	} else if (mode != LB_MODE_DSR_L2) {
		return lb_drop(LB_CNT_DROP_UNSUPPORTED);
	}

	nh = lb_next_hop(ctx, real, real_id, outer_src < 0, &reason);
	if (!nh)
		return lb_drop(reason);

	if (mode == LB_MODE_DSR_IPIP || mode == LB_MODE_DSR_GUE) {
		/* the outer source: the node's configured address, or the one the kernel chose for the next hop */
		__be32 src4 = outer_src < 0 ? nh->src4 : (__be32)outer_src;
		const void *src6 = outer_src < 0 ? (const void *)nh->src6 : (const void *)cfg->src6;
		__u8 tos;

		{
			void *data = (void *)(long)ctx->data;
			void *data_end = (void *)(long)ctx->data_end;
			__u8 *l3 = data + (p.l3_off & 0x1f);

			if ((void *)(l3 + 2) > data_end)
				return lb_drop(LB_CNT_DROP_ADJUST);
			tos = p.family == 4 ? l3[1] : (__u8)((l3[0] << 4) | (l3[1] >> 4));
		}
		if (lb_push_ipip(ctx, &p, real, src4, src6, hash, tos, mode == LB_MODE_DSR_GUE ? target_port : 0))
			return lb_drop(LB_CNT_DROP_ADJUST);
	} else if (mode == LB_MODE_DSR_IPOPT) {
		int insert = lb_ipopt_inserts(&p);

		if (p.family == 4 ? lb_ipopt(ctx, &p, real, p.dport, target_port, insert)
				  : lb_ipopt6(ctx, &p, real, target_port, insert))
			return lb_drop(LB_CNT_DROP_ADJUST);
	}
	/* dsr-l2: MACs only. The frame leaves in the real's family under an outer header, else in the packet's */
	__u8 out_family = mode == LB_MODE_DSR_IPIP || mode == LB_MODE_DSR_GUE ? real->family : p.family;

	rc = lb_send(ctx, nh, p.l3_off, out_family == 4 ? bpf_htons(LB_ETH_P_IP) : bpf_htons(LB_ETH_P_IPV6), &reason);
	if (rc < 0)
		return lb_drop(LB_CNT_DROP_ADJUST);
	lb_count(reason);
	return rc;

too_big:
	/* answer the client with the MTU its packets must fit in after our encapsulation */
	{
		__u32 overhead = mode == LB_MODE_DSR_IPOPT ? (p.family == 4 ? LB_DSR_OPT_LEN : LB_DSR_EXT6_LEN)
				 : (real->family == 4 ? LB_IPV4_HDR_LEN : LB_IPV6_HDR_LEN) +
				   (mode == LB_MODE_DSR_GUE ? LB_GUE_UDP_LEN : 0);
		return lb_too_big(ctx, &p, cfg->mtu - overhead);
	}
}

#ifdef LB_CAPTURE
/* xdp_lb_capture.o: the same program, with the frames the capture's filters select handed to `gitlb capture` as
 * they arrived and as they leave, with the verdict, the real and the counters moved (lb_capture.h). The command
 * swaps it into the running link for as long as it captures; xdp_lb.o never carries it, so capture costs nothing
 * while nobody captures. */
SEC("xdp")
int xdp_lb(struct xdp_md *ctx)
{
	lb_cap_enter(ctx);
	int verdict = lb_process(ctx);
	lb_cap_exit(ctx, verdict, LB_CAP_HOOK_XDP);
	return verdict;
}
#else
SEC("xdp")
int xdp_lb(struct xdp_md *ctx)
{
	return lb_process(ctx);
}
#endif
