/* SPDX-License-Identifier: Apache-2.0 */
/* Parsing: Ethernet (+ one 802.1Q tag), IPv4 (options allowed) / IPv6, TCP / UDP.
 * Every read is bounds-checked; the verdict says whether the packet is usable, plainly not ours,
 * or damaged (then the caller drops it if its destination is a VIP address). */
#ifndef LB_PARSING_H
#define LB_PARSING_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <linux/in.h>
#include <bpf/bpf_endian.h>
#include "lb_consts.h"
#include "lb_structs.h"

enum lb_parse_verdict {
	LB_PARSE_OK = 0,       /* headers complete: look the VIP up */
	LB_PARSE_PASS,         /* not for us (reason in *reason) */
	LB_PARSE_BAD_IF_VIP,   /* damaged: drop (reason) if dst is a VIP address, else pass */
};

struct lb_vlan_hdr {
	__be16 tci;
	__be16 proto;
};

#define LB_TCP_FLAG_FIN 0x01
#define LB_TCP_FLAG_SYN 0x02
#define LB_TCP_FLAG_RST 0x04
#define LB_TCP_FLAG_ACK 0x10

static __always_inline int lb_parse_l4(void *data, void *data_end, struct lb_packet *p, __u32 *reason)
{
	__u32 l4_len = p->l3_len - p->ihl_bytes;
	__u32 l4_off = p->l4_off;

	if (p->proto != IPPROTO_TCP && p->proto != IPPROTO_UDP) {
		*reason = LB_CNT_PASS_NOT_VIP;
		return LB_PARSE_PASS;
	}
	if (l4_off > 18 + LB_IPV4_MAX_HDR_LEN) { /* cannot happen (IHL <= 15); bounds the offset for the verifier */
		*reason = LB_CNT_PASS_SHORT_HEADER;
		return LB_PARSE_PASS;
	}
	/* the first 8 bytes hold the ports for both protocols (and are the whole UDP header) */
	__be16 *ports = data + l4_off;

	if ((void *)(ports + 4) > data_end || l4_len < 8) {
		*reason = LB_CNT_DROP_TRUNCATED_L4;
		return LB_PARSE_BAD_IF_VIP;
	}
	p->sport = ports[0];
	p->dport = ports[1];
	if (p->proto == IPPROTO_UDP) {
		/* UDP over IPv6 must carry a checksum (RFC 8200 8.1): a 0 is damage the real would drop, and no
		 * frame we send may carry it */
		if (p->family == 6 && !ports[3]) {
			*reason = LB_CNT_DROP_MALFORMED_L4;
			return LB_PARSE_BAD_IF_VIP;
		}
		return LB_PARSE_OK;
	}

	struct tcphdr *th = (void *)ports;

	barrier_var(th);
	if ((void *)(th + 1) > data_end || l4_len < sizeof(*th)) {
		*reason = LB_CNT_DROP_TRUNCATED_L4;
		return LB_PARSE_BAD_IF_VIP;
	}
	p->tcp_flags = ((__u8 *)th)[13];
	if (th->doff < 5 || (__u32)th->doff * 4 > l4_len) {
		/* ports are known, so the caller can check the full VIP key */
		*reason = LB_CNT_DROP_MALFORMED_L4;
		return LB_PARSE_BAD_IF_VIP;
	}
	return LB_PARSE_OK;
}

static __always_inline int lb_parse_ipv4(void *data, void *data_end, struct lb_packet *p, __u32 *reason)
{
	struct iphdr *iph = data + p->l3_off;

	if ((void *)(iph + 1) > data_end) {
		*reason = LB_CNT_PASS_SHORT_HEADER;
		return LB_PARSE_PASS;
	}
	p->family = 4;
	p->src[0] = iph->saddr;
	p->dst[0] = iph->daddr;
	p->proto = iph->protocol;
	if (iph->version != 4 || iph->ihl < 5) {
		*reason = LB_CNT_DROP_MALFORMED_L3;
		return LB_PARSE_BAD_IF_VIP;
	}
	p->ihl_bytes = iph->ihl * 4;
	p->l3_len = bpf_ntohs(iph->tot_len);
	p->l4_off = p->l3_off + p->ihl_bytes;
	if (p->l3_len < p->ihl_bytes) {
		*reason = LB_CNT_DROP_MALFORMED_L3;
		return LB_PARSE_BAD_IF_VIP;
	}
	if (p->l3_off + p->l3_len > p->frame_len) {
		*reason = LB_CNT_DROP_TRUNCATED_L3;
		return LB_PARSE_BAD_IF_VIP;
	}
	if (iph->frag_off & bpf_htons(LB_IP_MF | LB_IP_OFFSET)) {
		*reason = LB_CNT_DROP_FRAGMENT;
		return LB_PARSE_BAD_IF_VIP;
	}
	return lb_parse_l4(data, data_end, p, reason);
}

static __always_inline int lb_parse_ipv6(void *data, void *data_end, struct lb_packet *p, __u32 *reason)
{
	struct ipv6hdr *ip6 = data + p->l3_off;

	if ((void *)(ip6 + 1) > data_end) {
		*reason = LB_CNT_PASS_SHORT_HEADER;
		return LB_PARSE_PASS;
	}
	p->family = 6;
	__builtin_memcpy(p->src, &ip6->saddr, 16);
	__builtin_memcpy(p->dst, &ip6->daddr, 16);
	p->proto = ip6->nexthdr;
	p->ihl_bytes = LB_IPV6_HDR_LEN;
	p->l3_len = LB_IPV6_HDR_LEN + bpf_ntohs(ip6->payload_len);
	p->l4_off = p->l3_off + LB_IPV6_HDR_LEN;
	if (ip6->version != 6) {
		*reason = LB_CNT_DROP_MALFORMED_L3;
		return LB_PARSE_BAD_IF_VIP;
	}
	if (p->l3_off + p->l3_len > p->frame_len) {
		*reason = LB_CNT_DROP_TRUNCATED_L3;
		return LB_PARSE_BAD_IF_VIP;
	}
	if (p->proto == LB_IPPROTO_FRAGMENT) {
		*reason = LB_CNT_DROP_FRAGMENT;
		return LB_PARSE_BAD_IF_VIP;
	}
	return lb_parse_l4(data, data_end, p, reason);
}

static __always_inline int lb_parse(struct xdp_md *ctx, struct lb_packet *p, __u32 *reason)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__be16 proto;

	p->frame_len = data_end - data;
	if ((void *)(eth + 1) > data_end) {
		*reason = LB_CNT_PASS_SHORT_HEADER;
		return LB_PARSE_PASS;
	}
	proto = eth->h_proto;
	p->l3_off = sizeof(*eth);
	if (proto == bpf_htons(LB_ETH_P_8021Q)) {
		struct lb_vlan_hdr *vh = (void *)(eth + 1);

		if ((void *)(vh + 1) > data_end) {
			*reason = LB_CNT_PASS_SHORT_HEADER;
			return LB_PARSE_PASS;
		}
		proto = vh->proto;
		p->l3_off += sizeof(*vh);
	}
	if (proto == bpf_htons(LB_ETH_P_IP))
		return lb_parse_ipv4(data, data_end, p, reason);
	if (proto == bpf_htons(LB_ETH_P_IPV6))
		return lb_parse_ipv6(data, data_end, p, reason);
	*reason = LB_CNT_PASS_NOT_IP;
	return LB_PARSE_PASS;
}

#endif
