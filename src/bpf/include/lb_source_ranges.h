/* SPDX-License-Identifier: Apache-2.0 */
/* Source ranges (Service spec.sourceRanges, Kubernetes loadBalancerSourceRanges): the client prefixes allowed to
 * reach a service. One longest-prefix-match trie for every service, keyed by (service id, family, client prefix).
 * Only listeners whose lb_vip_value carries LB_VIP_F_SOURCE_RANGES look it up, so a service without ranges pays
 * one flag test on a value already loaded, nothing more. Checked on every packet to such a listener, before the
 * connection table: a client removed from the ranges loses its established flows too (as Kubernetes and Cilium
 * apply them). See docs/datapath.md "Source ranges". */
#ifndef LB_SOURCE_RANGES_H
#define LB_SOURCE_RANGES_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "lb_structs.h"

/* Twice the entries validation lets one lb node's services list (DATAPLANE_LIMITS.lbSourceRanges), so the old and
 * the new prefixes of any apply fit side by side: the plan adds before it removes. */
#define LB_MAX_SOURCE_RANGES 32768

/* The trie matches bits from the start of the data after prefixlen: service id and family (64 bits) always match
 * whole, so an entry is prefixlen = 64 + the client prefix length, and no service's entry can match another's
 * client. IPv4 addresses use addr[0..3], the rest zero. */
#define LB_SRC_RANGE_FIXED_BITS 64

struct lb_src_range_key {
	__u32 prefixlen;
	__u32 service_id;
	__u8 family; /* 4 or 6 */
	__u8 pad[3];
	__u8 addr[16];
};

/* (service, client prefix) -> 1. No preallocation: an entry costs memory only once a service lists it. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, LB_MAX_SOURCE_RANGES);
	__type(key, struct lb_src_range_key);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_source_ranges SEC(".maps");

/* Whether the packet's source lies in one of the service's prefixes: one trie lookup with the full address. The key
 * is written in 64-bit words from registers (see LB_KEY_ALIGN in xdp_lb.c). */
static __always_inline int lb_source_allowed(const struct lb_packet *p, __u32 service_id)
{
	struct lb_src_range_key k __attribute__((aligned(8)));
	__u64 *w = (__u64 *)&k;

	w[0] = (LB_SRC_RANGE_FIXED_BITS + 128) | ((__u64)service_id << 32);
	w[1] = p->family | ((__u64)p->src[0] << 32);
	w[2] = p->src[1] | ((__u64)p->src[2] << 32);
	*(__u32 *)&w[3] = p->src[3];
	return bpf_map_lookup_elem(&lb_source_ranges, &k) != 0;
}

#endif
