/* SPDX-License-Identifier: Apache-2.0 */
/* Path-MTU answers built in place from the client's packet: ICMP "fragmentation needed" (IPv4)
 * and ICMPv6 "packet too big", sourced from the VIP and sent back out with XDP_TX.
 * Quote: the client's IP header + the first 8 bytes of its TCP/UDP header (enough for the
 * client's stack to find the socket: ports and TCP sequence number). */
#ifndef LB_ICMP_H
#define LB_ICMP_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "lb_consts.h"
#include "lb_structs.h"
#include "lb_csum.h"

/* Own ICMP header layouts: <linux/icmp.h> drags in libc socket headers unusable for -target bpf. */
struct lb_icmphdr {
	__u8 type;
	__u8 code;
	__u16 checksum;
	__be16 unused;
	__be16 mtu;
};

struct lb_icmp6hdr {
	__u8 type;
	__u8 code;
	__u16 checksum;
	__be32 mtu;
};

#define LB_ICMP_DEST_UNREACH 3
#define LB_ICMP_FRAG_NEEDED 4
#define LB_ICMPV6_PKT_TOOBIG 2
#define LB_IPPROTO_ICMP 1
#define LB_IPPROTO_ICMPV6 58
#define LB_ICMP_ECHO_REQUEST 8
#define LB_ICMP_ECHO_REPLY 0
#define LB_ICMPV6_ECHO_REQUEST 128
#define LB_ICMPV6_ECHO_REPLY 129
#define LB_ICMP_ECHO_HDR_LEN 8

#define LB_ICMP_QUOTE_L4 8
#define LB_ICMP6_QUOTE (LB_IPV6_HDR_LEN + LB_ICMP_QUOTE_L4)

struct lb_l2_saved {
	__u8 client_mac[6];
	__u8 our_mac[6];
	__be16 vlan_tci;
};

static __always_inline int lb_save_l2(void *data, void *data_end, __u32 l3_off, struct lb_l2_saved *s)
{
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) + 4 > data_end)
		return -1;
	__builtin_memcpy(s->client_mac, eth->h_source, 6);
	__builtin_memcpy(s->our_mac, eth->h_dest, 6);
	s->vlan_tci = l3_off > sizeof(*eth) ? *(__be16 *)(eth + 1) : 0;
	return 0;
}

/* Write the reply's L2 header at the front (same VLAN as the request). */
static __always_inline int lb_write_reply_l2(void *data, void *data_end, __u32 l3_off,
					     const struct lb_l2_saved *s, __be16 l3_proto)
{
	struct ethhdr *eth = data;
	__be16 *vlan = (void *)(eth + 1);

	if ((void *)(vlan + 2) > data_end)
		return -1;
	__builtin_memcpy(eth->h_dest, s->client_mac, 6);
	__builtin_memcpy(eth->h_source, s->our_mac, 6);
	if (l3_off > sizeof(*eth)) {
		eth->h_proto = bpf_htons(LB_ETH_P_8021Q);
		vlan[0] = s->vlan_tci;
		vlan[1] = l3_proto;
	} else {
		eth->h_proto = l3_proto;
	}
	return 0;
}

/* Turn the client's frame into the frame of a reply in place: grow the front by `grow` bytes (the reply's
 * IP + ICMP headers), cut the tail so `keep` bytes of the client's packet remain after them (the quote),
 * and write the reply's L2 header. The caller re-reads ctx->data / data_end and fills in L3 and ICMP. */
static __always_inline int lb_icmp_reply_frame(struct xdp_md *ctx, __u32 l3_off, __u32 grow, __u32 keep,
					       __be16 l3_proto)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct lb_l2_saved l2;

	if (lb_save_l2(data, data_end, l3_off, &l2))
		return -1;
	if (bpf_xdp_adjust_head(ctx, -(int)grow))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	int cut = (int)(l3_off + grow + keep) - (int)(data_end - data);

	if (cut < 0 && bpf_xdp_adjust_tail(ctx, cut))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	return lb_write_reply_l2(data, data_end, l3_off, &l2, l3_proto);
}

static __always_inline int lb_icmp4_frag_needed(struct xdp_md *ctx, const struct lb_packet *p, __u16 mtu)
{
	__u32 l3_off = p->l3_off;
	__u32 quote = p->ihl_bytes + LB_ICMP_QUOTE_L4;
	__u32 grow = sizeof(struct iphdr) + sizeof(struct lb_icmphdr);

	if (lb_icmp_reply_frame(ctx, l3_off, grow, quote, bpf_htons(LB_ETH_P_IP)))
		return -1;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;

	if (l3_off > 18)
		return -1;

	struct iphdr ip = {
		.version = 4,
		.ihl = 5,
		.tot_len = bpf_htons(grow + quote),
		.ttl = LB_DEFAULT_TTL,
		.protocol = LB_IPPROTO_ICMP,
		.saddr = p->dst[0],
		.daddr = p->src[0],
	};
	ip.check = lb_csum_fold(lb_csum_words(&ip, 5));

	struct iphdr *iph = data + l3_off;
	struct lb_icmphdr *icmp = (void *)(iph + 1);

	if ((void *)(icmp + 1) > data_end)
		return -1;
	__builtin_memcpy(iph, &ip, sizeof(ip));
	icmp->type = LB_ICMP_DEST_UNREACH;
	icmp->code = LB_ICMP_FRAG_NEEDED;
	icmp->checksum = 0;
	icmp->unused = 0;
	icmp->mtu = bpf_htons(mtu);

	__u64 sum = 0;

	if (quote > LB_IPV4_MAX_HDR_LEN + LB_ICMP_QUOTE_L4)
		return -1;
	if (lb_csum_packet(icmp, data_end, sizeof(*icmp) + quote, 20, &sum))
		return -1;
	icmp->checksum = lb_csum_fold(sum);
	return 0;
}

static __always_inline int lb_icmp6_too_big(struct xdp_md *ctx, const struct lb_packet *p, __u32 mtu)
{
	__u32 l3_off = p->l3_off;
	__u32 grow = sizeof(struct ipv6hdr) + sizeof(struct lb_icmp6hdr);
	__u32 body = sizeof(struct lb_icmp6hdr) + LB_ICMP6_QUOTE;

	if (lb_icmp_reply_frame(ctx, l3_off, grow, LB_ICMP6_QUOTE, bpf_htons(LB_ETH_P_IPV6)))
		return -1;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;

	if (l3_off > 18)
		return -1;

	struct ipv6hdr ip6 = {
		.version = 6,
		.payload_len = bpf_htons(body),
		.nexthdr = LB_IPPROTO_ICMPV6,
		.hop_limit = LB_DEFAULT_TTL,
	};
	__builtin_memcpy(&ip6.saddr, p->dst, 16);
	__builtin_memcpy(&ip6.daddr, p->src, 16);

	struct ipv6hdr *iph = data + l3_off;
	struct lb_icmp6hdr *icmp = (void *)(iph + 1);

	if ((void *)(icmp + 1) > data_end)
		return -1;
	__builtin_memcpy(iph, &ip6, sizeof(ip6));
	icmp->type = LB_ICMPV6_PKT_TOOBIG;
	icmp->code = 0;
	icmp->checksum = 0;
	icmp->mtu = bpf_htonl(mtu);

	/* pseudo-header: addresses, upper-layer length, next header */
	__u64 sum = lb_csum_words(p->dst, 4) + lb_csum_words(p->src, 4);

	sum += bpf_htonl(body) + bpf_htonl(LB_IPPROTO_ICMPV6);
	if (lb_csum_packet(icmp, data_end, body, 20, &sum))
		return -1;
	icmp->checksum = lb_csum_fold(sum);
	return 0;
}

/* 1 when the packet is an ICMP echo request (ICMPv6 for IPv6) with its whole 8-byte header, else 0. */
static __always_inline int lb_is_echo_request(struct xdp_md *ctx, const struct lb_packet *p)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 l4_off = p->l4_off;

	if (p->proto != (p->family == 4 ? LB_IPPROTO_ICMP : LB_IPPROTO_ICMPV6))
		return 0;
	/* IPv4 options (record route, timestamps) would want filling in: such a request stays the kernel's */
	if (p->family == 4 && p->ihl_bytes != 20)
		return 0;
	if (l4_off > 18 + LB_IPV4_MAX_HDR_LEN || p->l3_len < p->ihl_bytes + LB_ICMP_ECHO_HDR_LEN)
		return 0;
	__u8 *icmp = data + l4_off;

	if ((void *)(icmp + LB_ICMP_ECHO_HDR_LEN) > data_end)
		return 0;
	return icmp[0] == (p->family == 4 ? LB_ICMP_ECHO_REQUEST : LB_ICMPV6_ECHO_REQUEST) && icmp[1] == 0;
}

/* Answer an echo request in place (the caller checked it is one, to a VIP address, trimmed to its IP length):
 * MACs and addresses swapped, TTL / hop limit 64, type to echo reply. Every checksum is updated incrementally
 * (RFC 1624): swapping addresses changes no sum, so only the TTL word (IPv4 header) and the type (ICMP) count,
 * and a checksum that arrived wrong leaves wrong. Identifier, sequence and data go back as they came. */
static __always_inline int lb_icmp_echo_reply(struct xdp_md *ctx, const struct lb_packet *p)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u32 l3_off = p->l3_off;
	__u32 l4_off = p->l4_off;
	__u8 mac[6];

	if ((void *)(eth + 1) > data_end || l3_off > 18 || l4_off > 18 + LB_IPV4_MAX_HDR_LEN)
		return -1;
	__builtin_memcpy(mac, eth->h_source, 6);
	__builtin_memcpy(eth->h_source, eth->h_dest, 6);
	__builtin_memcpy(eth->h_dest, mac, 6);

	__u16 *type_code = data + l4_off;

	if ((void *)(type_code + 2) > data_end)
		return -1;
	__u16 old_tc = *type_code;

	((__u8 *)type_code)[0] = p->family == 4 ? LB_ICMP_ECHO_REPLY : LB_ICMPV6_ECHO_REPLY;
	lb_csum_replace2(&type_code[1], old_tc, *type_code);

	if (p->family == 4) {
		struct iphdr *iph = data + l3_off;

		if ((void *)(iph + 1) > data_end)
			return -1;
		__u16 old_ttl = *(__u16 *)&iph->ttl; /* the ttl/protocol word, as summed */

		iph->ttl = LB_DEFAULT_TTL;
		lb_csum_replace2(&iph->check, old_ttl, *(__u16 *)&iph->ttl);
		__be32 a = iph->saddr;

		iph->saddr = iph->daddr;
		iph->daddr = a;
		return 0;
	}
	struct ipv6hdr *ip6 = data + l3_off;

	if ((void *)(ip6 + 1) > data_end)
		return -1;
	struct in6_addr a = ip6->saddr;

	ip6->saddr = ip6->daddr;
	ip6->daddr = a;
	ip6->hop_limit = LB_DEFAULT_TTL;
	return 0;
}

#endif
