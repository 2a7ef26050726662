/* SPDX-License-Identifier: Apache-2.0 */
/* Connection-state sync, the packet path's part (docs/datapath.md "Connection-state sync"): a new connection-table
 * entry and a new or reopened SNAT translation are published into the ring buffer lb_sync_events as the map's key and
 * value, byte for byte; the daemon (src/reconciler/flows/flow-sync.ts) reads the ring, batches the entries and sends
 * them to the other lb nodes. Only while lb_config.flags has LB_CFG_F_SYNC_PUBLISH (the daemon sets it while it has
 * sync peers): without it a new flow pays one branch. Publishing never waits: a full ring refuses the record, which
 * is counted (lb_sync_stats, per CPU) and makes the daemon fall back to a scan of the tables; forwarding goes on. */
#ifndef LB_SYNC_H
#define LB_SYNC_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "lb_structs.h"
#include "lb_maps.h"

/* lb_config.flags */
#define LB_CFG_F_SYNC_PUBLISH 1

/* lb_sync_event.kind */
#define LB_SYNC_EV_CT 1   /* key: struct lb_flow_key, value: struct lb_flow_value (lb_conntrack) */
#define LB_SYNC_EV_SNAT 2 /* key: struct lb_snat_rev_key, value: struct lb_snat_rev (lb_snat_rev) */

/* room for the larger map of each half (lb_flow_key 40 > lb_snat_rev_key 24; lb_snat_rev 64 > lb_flow_value) */
#define LB_SYNC_KEY_MAX 40
#define LB_SYNC_VALUE_MAX 64
/* the sizes of each kind's key and value (lb_snat.h's structs are not known here: lb_sync_publish checks them) */
#define LB_SYNC_CT_KEY 40
#define LB_SYNC_CT_VALUE sizeof(struct lb_flow_value)
#define LB_SYNC_SNAT_KEY 24
#define LB_SYNC_SNAT_VALUE 64
/* the ring's default size in bytes (a power of two of pages; the loader may set another, src/bpf/dataplane) */
#define LB_SYNC_RING_BYTES (4 << 20)

/* One record of lb_sync_events: key_len bytes of key, value_len bytes of value, the rest of each zero. */
struct lb_sync_event {
	__u8 kind;
	__u8 key_len;
	__u8 value_len;
	__u8 pad[5]; /* zero */
	__u8 key[LB_SYNC_KEY_MAX];
	__u8 value[LB_SYNC_VALUE_MAX];
} __attribute__((aligned(8))); /* ring records are 8-byte aligned: written in words */

/* A ring record has no BTF of its own (no map names its type): its layout is pinned here and in
 * src/bpf/dataplane/flow-events.ts (SYNC_EVENT_BYTES, the key and value offsets). */
_Static_assert(LB_SYNC_CT_VALUE <= LB_SYNC_VALUE_MAX && sizeof(struct lb_sync_event) == 112 && __builtin_offsetof(struct lb_sync_event, key) == 8 &&
		       __builtin_offsetof(struct lb_sync_event, value) == 48,
	       "lb_sync_event layout: update flow-events.ts with it");

/* lb_sync_stats (per CPU); names in src/bpf/dataplane/flow-events.ts SYNC_COUNTER_NAMES */
enum lb_sync_counter {
	LB_SYNC_CNT_LOST = 0, /* the ring was full: the record was not published (the daemon rescans) */
	LB_SYNC_CNT_MAX,
};

/* Not pinned: each loaded program has its own ring, which the daemon that loaded it reads. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, LB_SYNC_RING_BYTES);
} lb_sync_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LB_SYNC_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_sync_stats SEC(".maps");

/* Publishes one map entry of kind LB_SYNC_EV_* (its key and value as the map holds them). A subprogram, not inlined:
 * the packet path calls it from several places (a new flow, a new translation, a translation's state change) and
 * each inlined copy of the record writes would cost the program size. No wakeup: the daemon reads the ring on its
 * own schedule, so the packet path never pays for waking it. */
static __attribute__((noinline)) int lb_sync_put(__u32 kind, const void *key, const void *value)
{
	struct lb_sync_event *e = bpf_ringbuf_reserve(&lb_sync_events, sizeof(*e), 0);

	if (!e) {
		__u32 lost = LB_SYNC_CNT_LOST;
		__u64 *c = bpf_map_lookup_elem(&lb_sync_stats, &lost);

		if (c)
			*c += 1;
		return 0;
	}
	/* keys and values are 8-byte aligned (LB_KEY_ALIGN, map values): copied in words, not bytes */
	key = __builtin_assume_aligned(key, 8);
	value = __builtin_assume_aligned(value, 8);
	__builtin_memset(e->value, 0, sizeof(e->value));
	if (kind == LB_SYNC_EV_CT) {
		*(__u64 *)e = LB_SYNC_EV_CT | (LB_SYNC_CT_KEY << 8) | ((__u64)LB_SYNC_CT_VALUE << 16);
		__builtin_memcpy(e->key, key, LB_SYNC_CT_KEY);
		__builtin_memcpy(e->value, value, LB_SYNC_CT_VALUE);
	} else {
		*(__u64 *)e = LB_SYNC_EV_SNAT | (LB_SYNC_SNAT_KEY << 8) | ((__u64)LB_SYNC_SNAT_VALUE << 16);
		__builtin_memset(e->key + LB_SYNC_SNAT_KEY, 0, LB_SYNC_KEY_MAX - LB_SYNC_SNAT_KEY);
		__builtin_memcpy(e->key, key, LB_SYNC_SNAT_KEY);
		__builtin_memcpy(e->value, value, LB_SYNC_SNAT_VALUE);
	}
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}

/* Publishes *key and *value as an entry of kind LB_SYNC_EV_* when the node syncs and `written` (the map write
 * succeeded): a node without sync peers pays the flag test only. The sizes are checked against the record here;
 * key and value must be 8-byte aligned (a map value, or a stack variable declared LB_KEY_ALIGN). */
#define lb_sync_publish(cfg, written, kind, key, value)                                                            \
	do {                                                                                                        \
		_Static_assert((kind) == LB_SYNC_EV_CT ? sizeof(*(key)) == LB_SYNC_CT_KEY &&                        \
						 sizeof(*(value)) == LB_SYNC_CT_VALUE                      \
					       : sizeof(*(key)) == LB_SYNC_SNAT_KEY &&                      \
						 sizeof(*(value)) == LB_SYNC_SNAT_VALUE,                   \
			       "lb_sync_put copies other sizes for this kind");                                      \
		if (((cfg)->flags & LB_CFG_F_SYNC_PUBLISH) && (written))                                            \
			lb_sync_put(kind, key, value);                                                              \
	} while (0)

#endif
