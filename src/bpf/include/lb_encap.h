/* SPDX-License-Identifier: Apache-2.0 */
/* Forwarding to a real: next hop from the kernel (bpf_fib_lookup), then one of
 *   dsr-l2    MACs rewritten, packet otherwise untouched
 *   dsr-ipip  outer IPv4 or IPv6 header pushed in front of the client's packet
 *   dsr-gue   the same with a UDP header after it (lb_gue.h)
 *   dsr-ipopt destination rewritten to the real, Cilium-layout DSR option carrying VIP:port inserted */
#ifndef LB_ENCAP_H
#define LB_ENCAP_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "lb_consts.h"
#include "lb_structs.h"
#include "lb_csum.h"
#include "lb_maps.h"
#include "lb_gue.h"

#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif

/* bpf_fib_lookup's 64-byte argument lives here, per CPU, not on the stack: lb_fib_next_hop is a subprogram called
 * from other subprograms (the SNAT paths), and the kernel bounds the stack of a whole call chain (512 bytes). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bpf_fib_lookup);
} lb_fib_scratch SEC(".maps");

/* One bpf_fib_lookup (a subprogram: a next-hop cache miss is rare) from the ingress interface to dst (4 or 16 bytes by family); fills nh.
 * Returns 0 or the LB_CNT_DROP_* reason. Shared by the real path (below) and the SNAT client path (lb_snat.h). */
static __always_inline int lb_fib_next_hop(struct xdp_md *ctx, __u8 family, const void *dst, __u32 flags,
					   struct lb_next_hop *nh)
{
	__u32 zero = 0;
	struct bpf_fib_lookup *fib = bpf_map_lookup_elem(&lb_fib_scratch, &zero);
	int rc;

	if (!fib)
		return LB_CNT_DROP_FIB;
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->ifindex = ctx->ingress_ifindex;
	if (family == 4) {
		fib->family = AF_INET;
		__builtin_memcpy(&fib->ipv4_dst, dst, 4);
	} else {
		fib->family = AF_INET6;
		__builtin_memcpy(fib->ipv6_dst, dst, 16);
	}
	rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), flags);
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
		return LB_CNT_DROP_FIB_NO_NEIGH;
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return LB_CNT_DROP_FIB;
	__builtin_memcpy(nh->dmac, fib->dmac, 6);
	__builtin_memcpy(nh->smac, fib->smac, 6);
	nh->ifindex = fib->ifindex;
	nh->src4 = fib->ipv4_src;
	__builtin_memcpy(nh->src6, fib->ipv6_src, 16);
	return 0;
}

/* The next hop towards a real, or 0 with *reason set (an LB_CNT_DROP_* reason). want_src asks the kernel to
 * choose a source address. Results are kept per CPU for LB_NH_CACHE_JIFFIES (bpf_fib_lookup is the most expensive
 * step of a packet), and the result points into this CPU's cache slot: a hit copies nothing (XDP runs with
 * migration disabled, so the slot cannot change under the packet). */
static __always_inline const struct lb_next_hop *lb_next_hop(struct xdp_md *ctx, const struct lb_real *real,
							      __u32 real_id, int want_src, __u32 *reason)
{
	__u32 slot = real->slot & (LB_NH_CACHE_SLOTS - 1); /* dense slots: distinct reals below 1024 never share */
	struct lb_nexthop_entry *c = bpf_map_lookup_elem(&lb_nexthop_cache, &slot);
	__u64 now = bpf_jiffies64();

	if (!c) { /* cannot happen: slot < LB_NH_CACHE_SLOTS, and a per-CPU array has every slot */
		*reason = LB_CNT_DROP_FIB;
		return 0;
	}
	if (c->real_id == real_id && c->in_ifindex == ctx->ingress_ifindex && c->want_src == !!want_src &&
	    now < c->expires)
		return &c->nh;

	/* fills c->nh only on success, so a failed lookup leaves the slot as it was */
	int rc = lb_fib_next_hop(ctx, real->family, real->addr, want_src ? BPF_FIB_LOOKUP_SRC : 0, &c->nh);

	if (rc) {
		*reason = rc;
		return 0;
	}
	c->real_id = real_id;
	c->in_ifindex = ctx->ingress_ifindex;
	c->want_src = !!want_src;
	c->expires = now + LB_NH_CACHE_JIFFIES;
	return &c->nh;
}

/* Write the Ethernet header at the front (keeping a VLAN tag when the packet had one) and send. */
static __always_inline int lb_send(struct xdp_md *ctx, const struct lb_next_hop *nh, __u32 l3_off,
				   __be16 l3_proto, __u32 *reason)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return -1;
	__builtin_memcpy(eth->h_dest, nh->dmac, 6);
	__builtin_memcpy(eth->h_source, nh->smac, 6);
	if (l3_off > sizeof(*eth)) {
		__be16 *inner = (void *)(eth + 1) + 2;

		if ((void *)(inner + 1) > data_end)
			return -1;
		eth->h_proto = bpf_htons(LB_ETH_P_8021Q);
		*inner = l3_proto;
	} else {
		eth->h_proto = l3_proto;
	}
	if (nh->ifindex == ctx->ingress_ifindex) {
		*reason = LB_CNT_TX;
		return XDP_TX;
	}
	*reason = LB_CNT_REDIRECT;
	return bpf_redirect(nh->ifindex, 0);
}

/* Move the L2 header (Ethernet [+ VLAN]) from `from` bytes into the packet to its front after
 * bpf_xdp_adjust_head() grew the head by `from` bytes. Only the VLAN TCI needs keeping: MACs and
 * ethertype are rewritten by lb_send(). */
static __always_inline int lb_keep_vlan(struct xdp_md *ctx, __u32 l3_off, __u32 from)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;

	if (l3_off <= sizeof(struct ethhdr))
		return 0;
	if (from > 64)
		return -1;
	__be16 *dst = data + sizeof(struct ethhdr);
	__be16 *src = data + from + sizeof(struct ethhdr);

	if ((void *)(src + 1) > data_end || (void *)(dst + 1) > data_end)
		return -1;
	*dst = *src;
	return 0;
}


/* The IPv6 outer header of lb_push_ipip (below): a subprogram, out of the IPv4 path's code. `w` packs the flow
 * hash (bits 0-31), the inner TOS (32-39) and the GUE port (40-55, network order; 0 = IP-in-IP). */
static __attribute__((noinline)) int lb_push_ip6_outer(struct xdp_md *ctx, const struct lb_packet *p,
							const struct lb_real *real, const void *src6, __u64 w)
{
	void *data, *data_end;
	__u32 hash = (__u32)w;
	__u8 inner_tos = (__u8)(w >> 32);
	__be16 gue_port = (__be16)(w >> 40);
	__u32 l3_off = p->l3_off;
	__u32 udp = gue_port ? LB_GUE_UDP_LEN : 0;
	__u8 inner_proto = gue_port ? IPPROTO_UDP : p->family == 4 ? LB_IPPROTO_IPIP : LB_IPPROTO_IPV6;
	__be16 udp_len = bpf_htons(p->l3_len + LB_GUE_UDP_LEN);
	__be16 sport = lb_gue_sport(hash);
	struct udphdr *uh;

	/* IPv6 outer header, also stored field by field (no stack copy): version 6, traffic class = the inner TOS,
	 * 20-bit flow label = per-flow entropy (RFC 6438) */
	__u32 vtf = (6u << 28) | ((__u32)inner_tos << 20) | (hash & 0xfffff);
	__be16 payload_len = bpf_htons(p->l3_len + udp);
	__u32 inner_vtf = 0;
	__u16 inner_nh_hl = 0;

	if (gue_port) {
		/* the UDP checksum needs two words of the inner IPv6 header (lb_gue6_csum), read before the push */
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		if (l3_off > 18)
			return -1;
		struct ipv6hdr *in6 = data + l3_off;

		if ((void *)(in6 + 1) > data_end)
			return -1;
		inner_vtf = *(__u32 *)in6;
		inner_nh_hl = *(__u16 *)&in6->nexthdr;
	}
	if (bpf_xdp_adjust_head(ctx, -(int)(LB_IPV6_HDR_LEN + udp)))
		return -1;
	if (lb_keep_vlan(ctx, l3_off, LB_IPV6_HDR_LEN + udp))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (l3_off > 18)
		return -1;
	struct ipv6hdr *ip6 = data + l3_off;

	if ((void *)(ip6 + 1) > data_end)
		return -1;
	*(__be32 *)ip6 = bpf_htonl(vtf);
	ip6->payload_len = payload_len;
	ip6->nexthdr = inner_proto;
	ip6->hop_limit = LB_DEFAULT_TTL;
	__builtin_memcpy(&ip6->saddr, src6, 16);
	__builtin_memcpy(&ip6->daddr, real->addr, 16);
	if (!gue_port)
		return 0;
	uh = (void *)(ip6 + 1);
	if ((void *)(uh + 1) > data_end)
		return -1;
	uh->source = sport;
	uh->dest = gue_port;
	uh->len = udp_len;
	uh->check = lb_gue6_csum(src6, real->addr, udp_len, sport, gue_port, inner_vtf, inner_nh_hl, p->proto);
	return 0;
}

/* Push the outer header: IP-in-IP, or with gue_port set (network order) outer IP + UDP to that port (dsr-gue,
 * lb_gue.h; the inner packet of the outer's family). The inner packet starts at l3_off; returns 0 or -1. */
static __always_inline int lb_push_ipip(struct xdp_md *ctx, const struct lb_packet *p,
					const struct lb_real *real, __be32 src4, const void *src6,
					__u32 hash, __u8 inner_tos, __be16 gue_port)
{
	void *data, *data_end;
	__u32 l3_off = p->l3_off;
	__u32 udp = gue_port ? LB_GUE_UDP_LEN : 0;
	__u8 inner_proto = gue_port ? IPPROTO_UDP : p->family == 4 ? LB_IPPROTO_IPIP : LB_IPPROTO_IPV6;
	__be16 udp_len = bpf_htons(p->l3_len + LB_GUE_UDP_LEN);
	__be16 sport = lb_gue_sport(hash);
	struct udphdr *uh;

	if (real->family == 4) {
		/* The checksum is summed from the field values, and the fields are stored straight into the packet: a
		 * header built on the stack and then read back as words (to sum or copy it) costs a store-forwarding
		 * stall per word, about 10 ns per packet here. Sums are of memory-order 16-bit words (lb_csum.h). */
		__be16 tot_len = bpf_htons(p->l3_len + LB_IPV4_HDR_LEN + udp);
		__be16 frag_off = bpf_htons(LB_IP_DF);
		__u16 ver_tos = 0x45 | ((__u16)inner_tos << 8);       /* bytes 0x45, tos in memory order */
		__u16 ttl_proto = LB_DEFAULT_TTL | ((__u16)inner_proto << 8);
		__be32 daddr = *(const __be32 *)real->addr;
		__u64 sum = (__u64)ver_tos + tot_len + frag_off + ttl_proto + src4 + daddr;

		if (bpf_xdp_adjust_head(ctx, -(int)(LB_IPV4_HDR_LEN + udp)))
			return -1;
		if (lb_keep_vlan(ctx, l3_off, LB_IPV4_HDR_LEN + udp))
			return -1;
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		if (l3_off > 18)
			return -1;
		struct iphdr *iph = data + l3_off;

		if ((void *)(iph + 1) > data_end)
			return -1;
		*(__u16 *)iph = ver_tos;
		iph->tot_len = tot_len;
		iph->id = 0;
		iph->frag_off = frag_off;
		*(__u16 *)&iph->ttl = ttl_proto;
		iph->check = lb_csum_fold(sum);
		iph->saddr = src4;
		iph->daddr = daddr;
		if (!gue_port)
			return 0;
		/* IPv4 outer UDP without checksum (RFC 768 allows 0; tunnels send it so, as Katran and Linux fou do) */
		uh = (void *)(iph + 1);
		if ((void *)(uh + 1) > data_end)
			return -1;
		uh->source = sport;
		uh->dest = gue_port;
		uh->len = udp_len;
		uh->check = 0;
		return 0;
	}

	return lb_push_ip6_outer(ctx, p, real, src6, hash | ((__u64)inner_tos << 32) | ((__u64)gue_port << 40));
}

/* One's-complement sum of an IPv4 header (hdr_len bytes, up to 60) in the packet; -1 when out of bounds. */
static __always_inline int lb_ipv4_hdr_sum(void *data, void *data_end, __u32 l3_off, __u32 hdr_len, __u64 *sum)
{
	if (l3_off > 18)
		return -1;
	return lb_csum_packet(data + l3_off, data_end, hdr_len, LB_IPV4_MAX_HDR_LEN / 4, sum);
}

/* Whether the client's IPv4 header checksum is right. Checked before any rewrite that recomputes the whole
 * header (the DSR option insert): recomputing over a corrupted header would launder the corruption. */
static __always_inline int lb_ipv4_csum_ok(struct xdp_md *ctx, __u32 l3_off, __u32 hdr_len)
{
	__u64 sum = 0;

	if (lb_ipv4_hdr_sum((void *)(long)ctx->data, (void *)(long)ctx->data_end, l3_off, hdr_len, &sum))
		return 0;
	return lb_csum_fold(sum) == 0;
}

/* Recompute an IPv4 header checksum in place (header length hdr_len, up to 60 bytes). */
static __always_inline int lb_ipv4_csum_inplace(void *data, void *data_end, __u32 l3_off, __u32 hdr_len)
{
	if (l3_off > 18)
		return -1;
	struct iphdr *iph = data + l3_off;
	__u64 sum = 0;

	if ((void *)(iph + 1) > data_end)
		return -1;
	iph->check = 0;
	if (lb_ipv4_hdr_sum(data, data_end, l3_off, hdr_len, &sum))
		return -1;
	iph->check = lb_csum_fold(sum);
	return 0;
}

/* dsr-ipopt: rewrite destination address (and port to target_port) in place, fixing the IPv4 and
 * L4 checksums; then, when `insert`, insert the 8-byte DSR option right after the fixed 20-byte
 * IPv4 header (existing options follow it). */
static __always_inline int lb_ipopt(struct xdp_md *ctx, const struct lb_packet *p, const struct lb_real *real,
				    __be16 vip_port, __be16 target_port, int insert)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 l3_off = p->l3_off;
	__be32 new_daddr;
	__be32 vip = p->dst[0];

	__builtin_memcpy(&new_daddr, real->addr, 4);
	if (l3_off > 18)
		return -1;
	struct iphdr *iph = data + l3_off;

	if ((void *)(iph + 1) > data_end)
		return -1;
	__u32 l4_off = p->l4_off;

	if (l4_off > 18 + LB_IPV4_MAX_HDR_LEN)
		return -1;
	if (p->proto == IPPROTO_TCP) {
		struct tcphdr *th = data + l4_off;

		if ((void *)(th + 1) > data_end)
			return -1;
		lb_csum_replace4(&th->check, iph->daddr, new_daddr);
		lb_csum_replace2(&th->check, th->dest, target_port);
		th->dest = target_port;
	} else {
		struct udphdr *uh = data + l4_off;

		if ((void *)(uh + 1) > data_end)
			return -1;
		if (uh->check) {
			lb_csum_replace4(&uh->check, iph->daddr, new_daddr);
			lb_csum_replace2(&uh->check, uh->dest, target_port);
			if (!uh->check)
				uh->check = 0xffff;
		}
		uh->dest = target_port;
	}
	if (!insert) {
		lb_csum_replace4(&iph->check, iph->daddr, new_daddr);
		iph->daddr = new_daddr;
		return 0;
	}

	/* the fixed header moves 8 bytes to the front; the option fills the gap behind it */
	struct iphdr base;

	__builtin_memcpy(&base, iph, sizeof(base));
	base.daddr = new_daddr;
	base.ihl += LB_DSR_OPT_LEN / 4;
	base.tot_len = bpf_htons(p->l3_len + LB_DSR_OPT_LEN);
	if (bpf_xdp_adjust_head(ctx, -(int)LB_DSR_OPT_LEN))
		return -1;
	if (lb_keep_vlan(ctx, l3_off, LB_DSR_OPT_LEN))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	iph = data + l3_off;
	__u32 *opt = (void *)(iph + 1);

	if ((void *)(opt + 2) > data_end)
		return -1;
	__builtin_memcpy(iph, &base, sizeof(base));
	opt[0] = bpf_htonl(((__u32)LB_DSR_OPT_TYPE << 24) | ((__u32)LB_DSR_OPT_LEN << 16) | bpf_ntohs(vip_port));
	opt[1] = vip;
	return lb_ipv4_csum_inplace(data, data_end, l3_off, base.ihl * 4);
}

#endif
