/* SPDX-License-Identifier: Apache-2.0 */
/* The flow hash: Bob Jenkins' lookup3 hashword() over the flow's 32-bit words, seeded.
 * Specified exactly in docs/datapath.md and re-implemented in src/bpf/dataplane/flow-hash.ts. */
#ifndef LB_HASHING_H
#define LB_HASHING_H

#include <linux/types.h>
#include <bpf/bpf_endian.h>
#include "lb_structs.h"

#define LB_ROL32(x, k) (((x) << (k)) | ((x) >> (32 - (k))))

#define LB_MIX(a, b, c)                          \
	do {                                     \
		a -= c; a ^= LB_ROL32(c, 4);  c += b; \
		b -= a; b ^= LB_ROL32(a, 6);  a += c; \
		c -= b; c ^= LB_ROL32(b, 8);  b += a; \
		a -= c; a ^= LB_ROL32(c, 16); c += b; \
		b -= a; b ^= LB_ROL32(a, 19); a += c; \
		c -= b; c ^= LB_ROL32(b, 4);  b += a; \
	} while (0)

#define LB_FINAL(a, b, c)                        \
	do {                                     \
		c ^= b; c -= LB_ROL32(b, 14);        \
		a ^= c; a -= LB_ROL32(c, 11);        \
		b ^= a; b -= LB_ROL32(a, 25);        \
		c ^= b; c -= LB_ROL32(b, 16);        \
		a ^= c; a -= LB_ROL32(c, 4);         \
		b ^= a; b -= LB_ROL32(a, 14);        \
		c ^= b; c -= LB_ROL32(b, 24);        \
	} while (0)

/* Words (host values of big-endian fields):
 *   IPv4: src, dst, ports, proto                      (4 words)
 *   IPv6: src[0..3], dst[0..3], ports, proto          (10 words)
 * ports = (sport << 16) | dport, sport = 0 when the VIP does not hash the source port. */
/* IPv6: a subprogram (BPF-to-BPF call), one copy out of the IPv4 path's code. */
static __attribute__((noinline)) __u32 lb_flow_hash6(const struct lb_packet *p, __u32 ports, __u32 seed)
{
	__u32 a, b, c;

	a = b = c = 0xdeadbeef + (10 << 2) + seed;
	a += bpf_ntohl(p->src[0]);
	b += bpf_ntohl(p->src[1]);
	c += bpf_ntohl(p->src[2]);
	LB_MIX(a, b, c);
	a += bpf_ntohl(p->src[3]);
	b += bpf_ntohl(p->dst[0]);
	c += bpf_ntohl(p->dst[1]);
	LB_MIX(a, b, c);
	a += bpf_ntohl(p->dst[2]);
	b += bpf_ntohl(p->dst[3]);
	c += ports;
	LB_MIX(a, b, c);
	a += p->proto;
	LB_FINAL(a, b, c);
	return c;
}

static __always_inline __u32 lb_flow_hash(const struct lb_packet *p, int use_sport, __u32 seed)
{
	__u32 ports = ((use_sport ? (__u32)bpf_ntohs(p->sport) : 0) << 16) | bpf_ntohs(p->dport);
	__u32 a, b, c;

	if (p->family != 4)
		return lb_flow_hash6(p, ports, seed);
	a = b = c = 0xdeadbeef + (4 << 2) + seed;
	a += bpf_ntohl(p->src[0]);
	b += bpf_ntohl(p->dst[0]);
	c += ports;
	LB_MIX(a, b, c);
	a += p->proto;
	LB_FINAL(a, b, c);
	return c;
}

#endif
