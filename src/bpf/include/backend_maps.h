/* Maps of the backend-node TC programs. No `pinning` attribute on purpose: the loader pins them by name under
 * its own pin root (BpfObject.load pinRoot), so a restarted daemon adopts them, while test loads without a pin
 * root leave nothing behind in /sys/fs/bpf. */
#ifndef GITLB_BACKEND_MAPS_H
#define GITLB_BACKEND_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "backend_consts.h"
#include "backend_structs.h"

/* VIPs served here; written by the daemon from DesiredState (role backend). */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, BE_VIP_MAX_ENTRIES);
  __type(key, struct be_vip_key);
  __type(value, struct be_vip_value);
} be_vips SEC(".maps");

/* Tunnel endpoints: the lb nodes' addresses (allowed outer sources) and this node's own (allowed outer
 * destinations); written by the daemon from DesiredState (lbAddresses, addresses). */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, BE_ADDR_MAX_ENTRIES);
  __type(key, struct be_addr_key);
  __type(value, struct be_addr_value);
} be_tunnel_addrs SEC(".maps");

/* ipopt flows: written by ingress when the option arrives, read by egress for every reply. LRU, so a full map
 * evicts the least recently used flow instead of refusing a new one. */
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, BE_CONN_MAX_ENTRIES);
  __type(key, struct be_conn_key);
  __type(value, struct be_conn_value);
} be_conns SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, BE_STAT__MAX);
  __type(key, __u32);
  __type(value, __u64);
} be_stats SEC(".maps");

/* gitlb capture (tc_backend_capture.o, lb_capture.h): each counter moved is a bit of the frame's record */
#ifndef LB_CAP_REASON
#define LB_CAP_REASON(bit)
#endif

static __always_inline void be_count(__u32 idx)
{
  __u64 *v = bpf_map_lookup_elem(&be_stats, &idx);
  if (v)
    *v += 1;
  LB_CAP_REASON(idx);
}

#endif
