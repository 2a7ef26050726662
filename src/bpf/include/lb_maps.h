/* SPDX-License-Identifier: Apache-2.0 */
/* Every map of the LB program, pinned by name under the loader's pin root (see docs/datapath.md). */
#ifndef LB_MAPS_H
#define LB_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "lb_consts.h"
#include "lb_structs.h"

/* VIP:port:proto -> service, mode, flags (plus port-0 "address marker" entries). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LB_MAX_VIPS);
	__type(key, struct lb_vip_key);
	__type(value, struct lb_vip_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_vips SEC(".maps");

/* One Maglev ring per service, each its own array map. A ring is one stream of u32 words: word 0 the table size
 * M, words 1..M the real of each table entry as its real slot + 1 (0 = no real), then the membership bitmap
 * (lb_affinity.h). The stream is stored LB_RING_LANES words to an array element (word w in element
 * w / LB_RING_LANES, lane w % LB_RING_LANES): an array of u32 values would give every word an 8-byte slot (array
 * values are rounded up to 8 bytes), so a ring of packed blocks spans half the cache lines, and a new flow's random
 * entry read misses the cache less often (docs/datapath.md, "Ring layout"). The packet path reaches the real
 * through the array lb_real_slots, never through the hash lb_reals. Render computes rings in real ids (the same on
 * every node); the loader translates them to this node's slots when it fills an inner array (rings.ts).
 * BPF_F_INNER_MAP lets every inner array have its own size. The loader fills a new inner array and then points the
 * service's outer entry at it: one map update switches the whole table, so the packet path sees the old ring or
 * the new one, never a mix, and there is no shared ring space to run out of. */
#define LB_RING_LANES 16
struct lb_ring_block {
	__u32 lane[LB_RING_LANES];
};

struct lb_ring_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_INNER_MAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	/* by size: clang emits struct lb_ring_block only as a forward declaration in BTF, which libbpf cannot size */
	__uint(value_size, sizeof(struct lb_ring_block));
};

/* service id -> that service's ring (an lb_ring_inner). BPF_F_RDONLY_PROG: the program only reads it. The flags
 * also mark the layout of the rings: BPF_F_RDONLY_PROG rings of real slots (without it, an older version's rings
 * of real ids), BPF_F_NO_PREALLOC rings of packed blocks (without it, an older version's one word per element). A
 * pin of another layout is rebuilt at load (src/bpf/dataplane/migrate.ts), never read in this one. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(map_flags, BPF_F_RDONLY_PROG | BPF_F_NO_PREALLOC);
	__uint(max_entries, LB_MAX_SERVICES);
	__type(key, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__array(values, struct lb_ring_inner);
} lb_rings SEC(".maps");

/* Word w of a ring's stream (see lb_rings), or 0 when the ring has no such word. */
static __always_inline __u32 *lb_ring_word(void *ring, __u32 w)
{
	__u32 block = w / LB_RING_LANES;
	struct lb_ring_block *b = bpf_map_lookup_elem(ring, &block);

	return b ? &b->lane[w % LB_RING_LANES] : 0;
}

/* real id -> address */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LB_MAX_REALS);
	__type(key, __u32);
	__type(value, struct lb_real);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_reals SEC(".maps");

/* real slot -> real id and address (see struct lb_real_slot) */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LB_MAX_REALS);
	__type(key, __u32);
	__type(value, struct lb_real_slot);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_real_slots SEC(".maps");

/* connection table: 5-tuple -> real; size set at load from Cluster.spec.conntrack.maxEntries. One hash table
 * (a flow is found from any CPU) with a free/LRU list per CPU (BPF_F_NO_COMMON_LRU): inserts take no lock
 * shared between CPUs, and a CPU evicts only from its own share (max_entries / possible CPUs). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__uint(max_entries, LB_CT_DEFAULT_ENTRIES);
	__type(key, struct lb_flow_key);
	__type(value, struct lb_flow_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_conntrack SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_config SEC(".maps");

/* next-hop cache (not pinned: a restart simply starts cold) */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LB_NH_CACHE_SLOTS);
	__type(key, __u32);
	__type(value, struct lb_nexthop_entry);
} lb_nexthop_cache SEC(".maps");

/* new-flow rate guard window (not pinned: a restart starts a new window) */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_rate_window);
} lb_new_flow_rate SEC(".maps");

/* statistics (per CPU; readers sum) */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LB_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_counters SEC(".maps");

/* per-service traffic by the service's stats slot (lb_vip_value.stats_slot; zeroed before a slot is reused) */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LB_MAX_SERVICES);
	__type(key, __u32);
	__type(value, struct lb_traffic);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_service_stats SEC(".maps");

/* per-real traffic by the real's slot (the loader zeroes a slot before giving it to a real) */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LB_MAX_REALS);
	__type(key, __u32);
	__type(value, struct lb_real_traffic);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_real_stats SEC(".maps");

/* The real a service's Maglev ring gives a flow hash: four lookups (the service's ring, its size in word 0, the
 * entry's block, the real's slot in lb_real_slots), all but the first inlined array reads. Returns the real and sets
 * *real_id from its slot entry, or returns 0 with *reason = LB_CNT_DROP_NO_SERVICE (no ring), LB_CNT_DROP_NO_REAL
 * (empty entry or empty table) or LB_CNT_DROP_REAL_MISSING (the entry's slot is free: real id 0). */
static __always_inline struct lb_real *lb_ring_pick(__u32 service_id, __u32 hash, __u32 *real_id, __u32 *reason)
{
	void *ring = bpf_map_lookup_elem(&lb_rings, &service_id);
	__u32 slot = 0;

	if (!ring) {
		*reason = LB_CNT_DROP_NO_SERVICE;
		return 0;
	}
	__u32 *size = lb_ring_word(ring, 0);

	if (!size || *size == 0) {
		*reason = LB_CNT_DROP_NO_REAL;
		return 0;
	}
	__u32 *entry = lb_ring_word(ring, 1 + hash % *size);

	if (!entry || *entry == 0) {
		*reason = LB_CNT_DROP_NO_REAL;
		return 0;
	}
	slot = *entry - 1;
	struct lb_real_slot *rs = bpf_map_lookup_elem(&lb_real_slots, &slot);

	if (!rs || rs->real_id == 0) {
		*reason = LB_CNT_DROP_REAL_MISSING;
		return 0;
	}
	*real_id = rs->real_id;
	return &rs->real;
}

#endif
