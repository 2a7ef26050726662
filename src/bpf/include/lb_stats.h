/* SPDX-License-Identifier: Apache-2.0 */
/* Counting: global per-reason counters and per-service / per-real traffic (all per CPU). */
#ifndef LB_STATS_H
#define LB_STATS_H

#include "lb_maps.h"
#include "lb_parsing.h" /* LB_TCP_FLAG_*, struct lb_packet: lb_real_traffic_add */
#include "lb_capture_hooks.h"

static __always_inline void lb_count(__u32 reason)
{
	__u64 *c = bpf_map_lookup_elem(&lb_counters, &reason);

	if (c)
		*c += 1;
	LB_CAP_REASON(reason);
}

/* Traffic of a service or a real: per-CPU array slots (dense indexes the loader hands out), so one array
 * lookup and no atomics. */
static __always_inline void lb_traffic_add(void *map, __u32 slot, __u32 bytes, __u32 new_flow)
{
	struct lb_traffic *t = bpf_map_lookup_elem(map, &slot);

	if (t) {
		t->packets += 1;
		t->bytes += bytes;
		t->new_flows += new_flow;
	}
}

/* Traffic of a real, by its slot: the same one array lookup, and its TCP packets and SYNs counted apart (two adds,
 * no branch), so passive health can judge a real's TCP services whatever UDP it also serves. */
static __always_inline void lb_real_traffic_add(__u32 slot, const struct lb_packet *p, __u32 new_flow)
{
#ifdef LB_BENCH_NO_REAL_STATS
	/* bench/xdp/real-stats-run only: the same program without per-real counters, to price them */
	return;
#endif
	struct lb_real_traffic *t = bpf_map_lookup_elem(&lb_real_stats, &slot);

	if (t) {
		__u32 tcp = p->proto == IPPROTO_TCP;

		t->packets += 1;
		t->bytes += p->frame_len;
		t->new_flows += new_flow;
		t->tcp_packets += tcp;
		t->tcp_syns += tcp & ((p->tcp_flags & (LB_TCP_FLAG_SYN | LB_TCP_FLAG_ACK)) == LB_TCP_FLAG_SYN);
	}
}

/* The new-flow rate guard (like Katran's): true when this CPU has already inserted `limit` new flows into the
 * connection table in the current one-second window. Such flows are still forwarded by the ring, only not
 * remembered, so a SYN flood cannot evict the established flows. */
static __always_inline int lb_over_new_flow_rate(__u32 limit)
{
	__u32 zero = 0;
	struct lb_rate_window *w = bpf_map_lookup_elem(&lb_new_flow_rate, &zero);
	__u64 now;

	if (!w)
		return 0;
	now = bpf_ktime_get_coarse_ns();
	if (now - w->start_ns >= 1000000000ULL) {
		w->start_ns = now;
		w->count = 1;
		return 0;
	}
	w->count += 1;
	return w->count > limit;
}

#endif
