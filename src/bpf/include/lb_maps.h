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

/* service id -> active ring region and table size */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LB_MAX_SERVICES);
	__type(key, __u32);
	__type(value, struct lb_service);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_services SEC(".maps");

/* All Maglev rings, two regions (active + standby) per service: index ring_base + slot -> real id. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LB_RING_CAPACITY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_ring SEC(".maps");

/* real id -> address */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LB_MAX_REALS);
	__type(key, __u32);
	__type(value, struct lb_real);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_reals SEC(".maps");

/* connection table: 5-tuple -> real; size set at load from Cluster.spec.conntrack.maxEntries */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
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

/* statistics (per CPU; readers sum) */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LB_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, LB_MAX_SERVICES);
	__type(key, __u32);
	__type(value, struct lb_traffic);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_service_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, LB_MAX_REALS);
	__type(key, __u32);
	__type(value, struct lb_traffic);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_real_stats SEC(".maps");

#endif
