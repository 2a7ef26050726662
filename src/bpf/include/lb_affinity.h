/* SPDX-License-Identifier: Apache-2.0 */
/* Session affinity (Service spec.sessionAffinity.clientIP, docs/datapath.md "Session affinity"): a client's new
 * connection to a service goes to the real its previous connection to that service went to, when that connection
 * began less than the service's timeout ago and the service's current ring still names the real; otherwise the
 * ring picks, and the pick is remembered.
 *
 * Cost: only a new flow of an affinity service (lb_vip_value.affinity_s != 0) reads lb_affinity: the connection-table
 * hit path, and every service without affinity, never reach this header's code.
 *
 * Design rule (docs/datapath.md): a new connection never reuses state that points at a real the current table no
 * longer names. A remembered real is trusted only while (1) the ring the service uses now has the real's slot set in
 * its membership bitmap (the words after the ring entries, written with the ring and switched with it in one
 * update, src/bpf/dataplane/rings.ts) and (2) lb_real_slots still gives that slot the remembered real id. */
#ifndef LB_AFFINITY_H
#define LB_AFFINITY_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "lb_consts.h"
#include "lb_structs.h"
#include "lb_maps.h"

/* lb_affinity key: the client address within one service (service ids are the same on every node) */
struct lb_affinity_key {
	__u8 client[16];
	__u32 service_id;
	__u8 family;
	__u8 pad[3];
};

struct lb_affinity_value {
	__u64 last_ns;   /* bpf_ktime_get_coarse_ns() of the client's last new connection to the service */
	__u32 real_id;
	__u32 real_slot; /* trusted only while the ring's bitmap has it and lb_real_slots[real_slot] names real_id */
};

/* per-reason affinity counters (lb_affinity_stats); names in src/bpf/dataplane/codec.ts AFFINITY_COUNTER_NAMES */
enum lb_affinity_counter {
	LB_AFF_CNT_HIT = 0,   /* new flow sent to the client's remembered real */
	LB_AFF_CNT_MISS,      /* new flow of a client with no entry: the ring picks */
	LB_AFF_CNT_EXPIRED,   /* the entry is older than the service's timeout: the ring picks */
	LB_AFF_CNT_REAL_GONE, /* the remembered real is not in the service's current table: the ring picks */
	LB_AFF_CNT_MAX,
};

/* Size set at load from Cluster.spec.conntrack.maxEntries, resized with the connection table (resize.ts). LRU
 * with a list per CPU, as lb_conntrack: a flood of new clients evicts the oldest clients, never fails an insert. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__uint(max_entries, LB_CT_DEFAULT_ENTRIES);
	__type(key, struct lb_affinity_key);
	__type(value, struct lb_affinity_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_affinity SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LB_AFF_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_affinity_stats SEC(".maps");

static __always_inline void lb_affinity_count(__u32 reason)
{
	__u64 *c = bpf_map_lookup_elem(&lb_affinity_stats, &reason);

	if (c)
		*c += 1;
}

static __always_inline void lb_affinity_key_of(const struct lb_packet *p, __u32 service_id, struct lb_affinity_key *k)
{
	__u64 *w = (__u64 *)k->client;

	w[0] = p->src[0] | ((__u64)p->src[1] << 32);
	w[1] = p->src[2] | ((__u64)p->src[3] << 32);
	/* service_id, family, pad 0 as one 64-bit word (little-endian target, as lb_flow_key_of) */
	*(__u64 *)&k->service_id = service_id | ((__u64)p->family << 32);
}

/* Whether the ring a service uses now names real slot `slot`: bit slot%32 of word slot/32 of the bitmap that
 * follows the ring's entries (stream word 1 + M + slot/32, lb_maps.h; absent beyond the highest slot the ring
 * names: the padding of the last block is 0). */
static __always_inline int lb_ring_names_slot(__u32 service_id, __u32 slot)
{
	void *ring = bpf_map_lookup_elem(&lb_rings, &service_id);

	if (!ring)
		return 0;
	__u32 *size = lb_ring_word(ring, 0);

	if (!size)
		return 0;
	__u32 *word = lb_ring_word(ring, 1 + *size + (slot >> 5));

	return word && ((*word >> (slot & 31)) & 1);
}

/* The client's remembered real for this service when it may take a new flow now: its last new connection began
 * less than timeout_s ago and the current table names it (its last-seen time is then refreshed). Fills *k and
 * *now for lb_affinity_remember. Returns real id << 32 | real slot + 1, or 0. The DSR path calls it as a BPF
 * subprogram (lb_affinity_find, a call only on new flows of affinity services); the SNAT forward path, a subprogram
 * itself, inlines it (a nested call would take its chain over the kernel's 512-byte stack bound). */
static __always_inline __u64 lb_affinity_find_inline(const struct lb_packet *p, __u32 service_id, __u32 timeout_s,
							 struct lb_affinity_key *k, __u64 *now)
{
	lb_affinity_key_of(p, service_id, k);
	*now = bpf_ktime_get_coarse_ns();
	struct lb_affinity_value *v = bpf_map_lookup_elem(&lb_affinity, k);

	if (!v) {
		lb_affinity_count(LB_AFF_CNT_MISS);
		return 0;
	}
	if (*now - v->last_ns >= (__u64)timeout_s * 1000000000ULL) {
		lb_affinity_count(LB_AFF_CNT_EXPIRED);
		return 0;
	}
	__u32 slot = v->real_slot;
	__u32 real_id = v->real_id;
	struct lb_real_slot *rs = bpf_map_lookup_elem(&lb_real_slots, &slot);

	if (!rs || !real_id || rs->real_id != real_id || !lb_ring_names_slot(service_id, slot)) {
		lb_affinity_count(LB_AFF_CNT_REAL_GONE);
		return 0;
	}
	v->last_ns = *now;
	lb_affinity_count(LB_AFF_CNT_HIT);
	return ((__u64)real_id << 32) | (slot + 1);
}

static __attribute__((noinline)) __u64 lb_affinity_find(const struct lb_packet *p, __u32 service_id, __u32 timeout_s,
							 struct lb_affinity_key *k, __u64 *now)
{
	return lb_affinity_find_inline(p, service_id, timeout_s, k, now);
}

/* lb_affinity_find for the packet's client: the real (and *real_id), or 0. `inl`: the SNAT path (itself a
 * subprogram) inlines the lookup, so its call chain stays one frame deep under the kernel's stack bound. */
static __always_inline struct lb_real *lb_affinity_lookup(const struct lb_packet *p, __u32 service_id, __u32 timeout_s,
							  struct lb_affinity_key *k, __u64 *now, __u32 *real_id, int inl)
{
	__u64 found = inl ? lb_affinity_find_inline(p, service_id, timeout_s, k, now)
			  : lb_affinity_find(p, service_id, timeout_s, k, now);

	if (!found)
		return 0;
	__u32 slot = (__u32)found - 1;
	struct lb_real_slot *rs = bpf_map_lookup_elem(&lb_real_slots, &slot);

	/* the slot's real again (a subprogram cannot return a map value): still the remembered one */
	if (!rs || rs->real_id != (__u32)(found >> 32))
		return 0;
	*real_id = rs->real_id;
	return &rs->real;
}

/* Remembers the real the ring gave the client's new flow (a subprogram too: one copy for both paths). */
static __always_inline void lb_affinity_remember_inline(const struct lb_affinity_key *k, __u32 real_id,
							__u32 real_slot, __u64 now)
{
	struct lb_affinity_value v = { .last_ns = now, .real_id = real_id, .real_slot = real_slot };

	bpf_map_update_elem(&lb_affinity, k, &v, BPF_ANY);
}

static __attribute__((noinline)) void lb_affinity_remember(const struct lb_affinity_key *k, __u32 real_id,
							   __u32 real_slot, __u64 now)
{
	lb_affinity_remember_inline(k, real_id, real_slot, now);
}

#endif
