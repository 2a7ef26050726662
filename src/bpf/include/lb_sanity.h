/* SPDX-License-Identifier: Apache-2.0 */
/* Hostile-packet guards of the LB path, checked once a packet is known to be for a VIP (or the SNAT address):
 *   - link layer: a frame sent to a broadcast/multicast MAC, or claiming a group MAC as its source, is not
 *     load-balanced and never answered (RFC 1122 3.2.2; a reply would go to a group address);
 *   - martian sources (RFC 1122 3.2.1.3, RFC 4291 2.5): 0/8, 127/8, 224/3 (class D and E, incl. the limited
 *     broadcast), ::, ::1, ff00::/8, fe80::/10 — never forwarded, translated or answered;
 *   - trailer bytes after the IP packet (Ethernet padding or junk) are cut before forwarding, so an
 *     encapsulated packet is never larger than the IP length the MTU check saw.
 * Spec: docs/datapath.md, "Hostile packets". */
#ifndef LB_SANITY_H
#define LB_SANITY_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include "lb_consts.h"
#include "lb_structs.h"

static __always_inline int lb_martian_src(const struct lb_packet *p)
{
	const __u8 *s = (const __u8 *)p->src;

	if (p->family == 4)
		return s[0] == 0 || s[0] == 127 || s[0] >= 224;
	if (s[0] == 0xff || (s[0] == 0xfe && (s[1] & 0xc0) == 0x80))
		return 1;
	/* :: and ::1 */
	return p->src[0] == 0 && p->src[1] == 0 && p->src[2] == 0 && (p->src[3] == 0 || p->src[3] == bpf_htonl(1));
}

/* 0 when the packet may be load-balanced, else the LB_CNT_DROP_* reason. */
static __always_inline __u32 lb_hostile_reason(struct xdp_md *ctx, const struct lb_packet *p)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return LB_CNT_DROP_ADJUST;
	/* the I/G bit: set in every broadcast and multicast address */
	if ((eth->h_dest[0] & 1) || (eth->h_source[0] & 1))
		return LB_CNT_DROP_L2_NOT_UNICAST;
	if (lb_martian_src(p))
		return LB_CNT_DROP_MARTIAN;
	return 0;
}

/* Cut whatever follows the IP packet in the frame. Returns 0 or -1 (adjust failed). */
static __always_inline int lb_trim_to_ip(struct xdp_md *ctx, struct lb_packet *p)
{
	__u32 end = p->l3_off + p->l3_len;

	if (p->frame_len <= end)
		return 0;
	if (bpf_xdp_adjust_tail(ctx, -(int)(p->frame_len - end)))
		return -1;
	p->frame_len = end;
	return 0;
}

#endif
