/* SPDX-License-Identifier: Apache-2.0 */
/* dsr-ipopt for IPv6 (docs/datapath.md "dsr-ipopt"): destination := the real, destination port := targetPort
 * (TCP/UDP checksum updated incrementally), and on the first packet of a flow (TCP SYN, every UDP datagram) a
 * 24-byte destination-options header carrying VIP:port is inserted right after the fixed header. Cilium's
 * `dsr_opt_v6` layout, which the backend's TC program reads and strips (backend_consts.h BE_DSR_*):
 *   0 next header  1 hdr ext len 2  2 option type 0x1b  3 option length 20  4..19 VIP  20..21 port  22..23 pad 0 */
#ifndef LB_IPOPT6_H
#define LB_IPOPT6_H

#include <linux/bpf.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "lb_consts.h"
#include "lb_structs.h"
#include "lb_csum.h"
#include "lb_encap.h"

#define LB_IPPROTO_DSTOPTS 60
#define LB_DSR_OPT6_TYPE 0x1b
#define LB_DSR_OPT6_LEN 20    /* option data, without type and length */
#define LB_DSR_EXT6_LEN 24    /* the whole extension header */
#define LB_DSR_EXT6_HDRLEN 2  /* its length field: 8-octet units beyond the first */

/* Rewrite an IPv6 packet to the real (and targetPort), inserting the option header when `insert`. The packet was
 * parsed with TCP/UDP directly after the fixed header (lb_parse), so the header goes there; the L4 pseudo-header
 * (upper-layer length, next header) does not change with it. Returns 0 or -1. */
static __attribute__((noinline)) int lb_ipopt6(struct xdp_md *ctx, const struct lb_packet *p, const struct lb_real *real,
				__be16 target_port, int insert)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 l3_off = p->l3_off;
	const __u32 *ra = (const __u32 *)real->addr;

	if (l3_off > 18)
		return -1;
	struct ipv6hdr *ip6 = data + l3_off;

	if ((void *)(ip6 + 1) > data_end)
		return -1;
	__u32 l4_off = l3_off + LB_IPV6_HDR_LEN;
	__u16 *csum;
	__be16 *dport;

	if (p->proto == IPPROTO_TCP) {
		struct tcphdr *th = data + l4_off;

		if ((void *)(th + 1) > data_end)
			return -1;
		csum = &th->check;
		dport = &th->dest;
	} else {
		struct udphdr *uh = data + l4_off;

		if ((void *)(uh + 1) > data_end)
			return -1;
		csum = &uh->check; /* never 0 here: an IPv6 UDP checksum of 0 was dropped as malformed */
		dport = &uh->dest;
	}
	/* RFC 1624 over the 16-byte address (one helper call instead of four unrolled updates) and the port */
	__s64 diff = bpf_csum_diff((__be32 *)p->dst, 16, (__be32 *)ra, 16, 0);
	__u64 sum = (__u16)~*csum;

	if (diff < 0)
		return -1;
	sum += (__u64)diff + (__u16)~*dport + target_port;
	*csum = lb_csum_fold(sum);
	if (p->proto == IPPROTO_UDP && *csum == 0)
		*csum = 0xffff;
	*dport = target_port;
	if (!insert) {
		__builtin_memcpy(&ip6->daddr, real->addr, 16);
		return 0;
	}

	/* the fixed header moves 24 bytes to the front; the option header fills the gap behind it */
	__u32 vtf = *(__u32 *)ip6;
	__u16 payload_len = bpf_ntohs(ip6->payload_len);
	__u8 hop_limit = ip6->hop_limit;

	if (bpf_xdp_adjust_head(ctx, -(int)LB_DSR_EXT6_LEN))
		return -1;
	if (lb_keep_vlan(ctx, l3_off, LB_DSR_EXT6_LEN))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (l3_off > 18)
		return -1;
	ip6 = data + l3_off;
	__u8 *ext = (void *)(ip6 + 1);

	if ((void *)(ext + LB_DSR_EXT6_LEN) > data_end)
		return -1;
	*(__u32 *)ip6 = vtf;
	ip6->payload_len = bpf_htons(payload_len + LB_DSR_EXT6_LEN);
	ip6->nexthdr = LB_IPPROTO_DSTOPTS;
	ip6->hop_limit = hop_limit;
	__builtin_memcpy(&ip6->saddr, p->src, 16);
	__builtin_memcpy(&ip6->daddr, real->addr, 16);
	ext[0] = p->proto;
	ext[1] = LB_DSR_EXT6_HDRLEN;
	ext[2] = LB_DSR_OPT6_TYPE;
	ext[3] = LB_DSR_OPT6_LEN;
	__builtin_memcpy(ext + 4, p->dst, 16);
	*(__be16 *)(ext + 20) = p->dport;
	ext[22] = 0;
	ext[23] = 0;
	return 0;
}

#endif
