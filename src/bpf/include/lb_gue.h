/* SPDX-License-Identifier: Apache-2.0 */
/* dsr-gue (docs/datapath.md "dsr-gue"): the client's IP packet inside outer IP + UDP, GUE variant 1 (the UDP
 * payload is the inner IP packet itself, no GUE header; its version nibble says 4 or 6), as Katran sends it.
 * The outer UDP source port comes from the flow hash, so receive-side scaling on the backends (which hashes the
 * outer 4-tuple) spreads flows over queues; the destination port is the cluster's GUE port, carried in the
 * listener's lb_vip_value.target_port. lb_push_ipip (lb_encap.h) writes the headers with these helpers. */
#ifndef LB_GUE_H
#define LB_GUE_H

#include <linux/types.h>
#include <linux/in.h>
#include <bpf/bpf_endian.h>
#include "lb_csum.h"

#define LB_GUE_UDP_LEN 8
/* outer source ports: the dynamic range 49152..65535, 14 bits of the flow hash */
#define LB_GUE_SPORT_BASE 0xc000
#define LB_GUE_SPORT_MASK 0x3fff

static __always_inline __be16 lb_gue_sport(__u32 hash)
{
	return bpf_htons(LB_GUE_SPORT_BASE | (hash & LB_GUE_SPORT_MASK));
}

/* The outer UDP checksum of IPv6-in-UDP-over-IPv6 without summing the payload (RFC 6936 wants one over IPv6; a
 * sum over up to an MTU of packet is too long for this path). The inner TCP/UDP checksum, when right, makes the
 * inner L4 segment sum to minus its pseudo-header, so the inner packet sums to its fixed header minus that
 * pseudo-header: the first word pair (version, class, flow label) plus (next header, hop limit) minus next header
 * (addresses and payload length cancel). Memory-order words (lb_csum.h). An inner L4 checksum that arrived wrong
 * leaves the outer one wrong by as much: nothing is laundered. */
static __always_inline __u16 lb_gue6_csum(const void *outer_src, const void *outer_dst, __be16 udp_len, __be16 sport,
					  __be16 dport, __u32 inner_vtf, __u16 inner_nh_hl, __u8 inner_nh)
{
	__u64 sum = lb_csum_words(outer_src, 4) + lb_csum_words(outer_dst, 4);

	sum += (__u32)udp_len * 2 + bpf_htons(IPPROTO_UDP) + sport + dport;
	sum += inner_vtf + inner_nh_hl + (__u16)~bpf_htons((__u16)inner_nh);
	__u16 check = lb_csum_fold(sum);

	return check ? check : 0xffff; /* a computed 0 is sent as all ones (RFC 768, RFC 8200 8.1) */
}

#endif
