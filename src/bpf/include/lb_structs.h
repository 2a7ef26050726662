/* SPDX-License-Identifier: Apache-2.0 */
/* Map keys and values (checked against BTF from src/bpf/dataplane/codec.ts) and the parsed packet. */
#ifndef LB_STRUCTS_H
#define LB_STRUCTS_H

#include <linux/types.h>

/* Addresses are 16 bytes; IPv4 uses the first 4 (network order), the rest zero. */

/* lb_vips key: one listener. A key with port 0 and proto 0 marks a VIP address
 * (value.service_id 0) so malformed packets to a VIP can be told from transit traffic. */
struct lb_vip_key {
	__u8 addr[16];
	__be16 port;
	__u8 proto;
	__u8 family; /* 4 or 6 */
};

struct lb_vip_value {
	__u32 service_id;
	__be16 target_port;
	__u8 mode;  /* LB_MODE_* */
	__u8 flags; /* LB_VIP_F_* */
	__u32 stats_slot; /* the service's dense index (< LB_MAX_SERVICES) in lb_service_stats, same in all its listeners */
	__u32 affinity_s; /* session affinity timeout in seconds (lb_affinity.h); 0 = none. Same in all its listeners */
};

struct lb_real {
	__u8 addr[16];
	__u8 family;
	__u8 flags;
	__u16 slot;      /* dense index the loader gives the real (< LB_MAX_REALS): lb_real_slots, lb_real_stats */
};

/* lb_real_slots[slot]: the real again, by its dense slot, so a connection-table hit (which stores the slot)
 * finds it with an array lookup; real_id 0 = free slot. */
struct lb_real_slot {
	__u32 real_id;
	struct lb_real real;
};

/* lb_conntrack key: the 5-tuple as seen on the wire (dst = VIP). */
struct lb_flow_key {
	__u8 src[16];
	__u8 dst[16];
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 family;
	__u16 pad;
};

struct lb_flow_value {
	__u32 real_id;
	__u32 service_id;
	__u32 real_slot; /* lb_real.slot when inserted; trusted only while lb_real_slots[real_slot] names real_id */
	__u32 last_seen; /* coarse last packet: CLOCK_MONOTONIC >> 30 (units of 1.07 s), written on insert and on a hit
			  * when it changed (at most once per unit); 0 = not seen here (an entry a peer sent) */
	__u64 chosen_ns; /* recency mark: CLOCK_MONOTONIC (bpf_ktime_get_coarse_ns: to the last tick) when the real was chosen (a SYN or a new
			  * flow re-reads the table and resets it); 0 = unknown. Connection-state sync sends it as an age
			  * and keeps the newest choice of a flow (docs/datapath.md "Connection-state sync") */
};

/* lb_config[0]: node-wide settings written by apply(). */
struct lb_config {
	__u32 hash_seed;
	__u32 mtu;
	__u32 src4_count;      /* number of IPv4 outer sources; 0 = kernel-chosen (BPF_FIB_LOOKUP_SRC) */
	__u32 src6_set;        /* 1 when src6 holds the IPv6 outer source; 0 = kernel-chosen */
	__be32 src4[8];        /* LB_MAX_SRC4 */
	__u8 src6[16];
	__u32 new_flow_rate;   /* new-flow rate guard: connection-table inserts per second per CPU; 0 = off */
	__u32 flags;           /* LB_CFG_F_* (lb_sync.h); not planned: the flow sync owns them, settings writes keep them */
};

/* lb_new_flow_rate[0] (per CPU): the rate guard's current one-second window */
struct lb_rate_window {
	__u64 start_ns;
	__u64 count;
};

/* Where a packet leaves for a real or a client: a bpf_fib_lookup result. */
struct lb_next_hop {
	__u32 ifindex;
	__be32 src4;        /* kernel-chosen source when asked for */
	__u32 src6[4];
	__u8 dmac[6];
	__u8 smac[6];
};

/* lb_nexthop_cache slot (per CPU, direct-mapped by real slot): a bpf_fib_lookup result kept briefly. */
struct lb_nexthop_entry {
	__u64 expires;      /* bpf_jiffies64() deadline */
	__u32 real_id;      /* tag: which real this slot holds */
	__u32 in_ifindex;   /* tag: the lookup's input interface */
	struct lb_next_hop nh;
	__u8 want_src;      /* tag: the lookup asked for the source address */
	__u8 pad[3];
};

/* per-CPU traffic of a service */
struct lb_traffic {
	__u64 packets;
	__u64 bytes;
	__u64 new_flows;
};

/* per-CPU traffic of a real: lb_traffic's three fields, then its TCP part apart, which passive health judges
 * (docs/health.md "Passive signals"): a UDP flow may be one packet with nothing behind it, and in the totals it
 * would look like an unanswered SYN */
struct lb_real_traffic {
	__u64 packets;
	__u64 bytes;
	__u64 new_flows;
	__u64 tcp_packets; /* TCP packets sent to the real, SYNs included */
	__u64 tcp_syns;    /* among them SYNs (ACK clear): new connections and their retransmissions, in every mode */
};

/* What parsing learned about a packet; offsets are from ctx->data. */
struct lb_packet {
	__u32 l3_off;
	__u32 l4_off;
	__u32 l3_len;    /* IPv4 total length or 40 + IPv6 payload length */
	__u32 frame_len;
	__u8 family;
	__u8 proto;
	__u8 tcp_flags;
	__u8 ihl_bytes;  /* IPv4 header length incl. options; 40 for IPv6 */
	__be16 sport;
	__be16 dport;
	__u32 src[4];
	__u32 dst[4];
};

#endif
