/* SPDX-License-Identifier: Apache-2.0 */
/* Constants of the LB data path: forwarding modes, flags, counter indexes, sizes.
 * The TS side (src/bpf/dataplane/codec.ts) mirrors every number here. */
#ifndef LB_CONSTS_H
#define LB_CONSTS_H

#define LB_AF_INET 4
#define LB_AF_INET6 6

/* lb_vip_value.mode */
#define LB_MODE_DSR_L2 1
#define LB_MODE_DSR_IPIP 2
#define LB_MODE_DSR_IPOPT 3
#define LB_MODE_SNAT 4
#define LB_MODE_DSR_GUE 5 /* IP in UDP (lb_gue.h); target_port holds the GUE destination port */

/* lb_vip_value.flags */
#define LB_VIP_F_HASH_SRC_PORT (1 << 0)
#define LB_VIP_F_SOURCE_RANGES (1 << 1) /* the service has sourceRanges: check lb_source_ranges (lb_source_ranges.h) */
#define LB_VIP_F_QUIC (1 << 2) /* UDP listener of a service with QUIC connection-ID routing (lb_quic.h) */

/* Ethernet / IP numbers not always in uapi headers */
#define LB_ETH_P_IP 0x0800
#define LB_ETH_P_IPV6 0x86DD
#define LB_ETH_P_8021Q 0x8100
#define LB_IPPROTO_IPIP 4
#define LB_IPPROTO_IPV6 41
#define LB_IPPROTO_FRAGMENT 44
#define LB_IP_MF 0x2000
#define LB_IP_OFFSET 0x1FFF
#define LB_IP_DF 0x4000

/* Encapsulation overheads and the Cilium-compatible DSR IPv4 option */
#define LB_IPV4_HDR_LEN 20
#define LB_IPV6_HDR_LEN 40
#define LB_DSR_OPT_TYPE 0x9a /* copy=1, class=0, number=26 */
#define LB_DSR_OPT_LEN 8
#define LB_IPV4_MAX_HDR_LEN 60

#define LB_DEFAULT_TTL 64

/* Default sizes; the loader overrides lb_conntrack max_entries. Rings are sized per service (lb_rings). */
#define LB_MAX_VIPS 4096
#define LB_MAX_SERVICES 1024
#define LB_MAX_REALS 65536
#define LB_CT_DEFAULT_ENTRIES 65536
#define LB_MAX_SRC4 8
/* Next-hop cache: slots per CPU (power of two) and how long a fib result is reused, in jiffies: the verifier
 * turns bpf_jiffies64() into one load, where a clock helper is a call on every forwarded packet. 100 jiffies
 * is 0.1 s at HZ=1000, 0.4 s at HZ=250 and 1 s at HZ=100, so neighbour changes (a real's MAC, a new route)
 * are seen within at most a second whatever the kernel's HZ. */
#define LB_NH_CACHE_SLOTS 1024
#define LB_NH_CACHE_JIFFIES 100

/* Global per-reason counters (index into lb_counters). Keep in sync with COUNTER_NAMES in codec.ts. */
enum lb_counter {
	LB_CNT_PASS_NOT_IP = 0,      /* not IPv4/IPv6 */
	LB_CNT_PASS_SHORT_HEADER,    /* L2/L3 header too short to know the destination */
	LB_CNT_PASS_NOT_VIP,         /* destination is not a VIP:port:protocol */
	LB_CNT_PASS_SNAT,            /* snat listener, no SNAT address of its family on the node: to the kernel */
	LB_CNT_DROP_MALFORMED_L3,    /* bad version/IHL/total length to a VIP address */
	LB_CNT_DROP_TRUNCATED_L3,    /* IP header or payload shorter than announced, to a VIP address */
	LB_CNT_DROP_TRUNCATED_L4,    /* TCP/UDP header cut short, to a VIP address */
	LB_CNT_DROP_MALFORMED_L4,    /* TCP data offset < 5 or beyond the packet; IPv6 UDP checksum 0 */
	LB_CNT_DROP_FRAGMENT,        /* IPv4 fragment or IPv6 fragment header, to a VIP address */
	LB_CNT_DROP_NO_SERVICE,      /* VIP points at a service id without a service entry */
	LB_CNT_DROP_NO_REAL,         /* empty service: ring has no real for the flow */
	LB_CNT_DROP_REAL_MISSING,    /* ring names a real slot that is free (lb_real_slots real id 0) */
	LB_CNT_DROP_FIB,             /* bpf_fib_lookup failed (no route) */
	LB_CNT_DROP_FIB_NO_NEIGH,    /* route found but no neighbour entry for the next hop */
	LB_CNT_DROP_IPOPT_NO_ROOM,   /* existing IPv4 options leave no room for the DSR option */
	LB_CNT_DROP_UNSUPPORTED,     /* mode/family combination not supported (ipopt with IPv6) */
	LB_CNT_DROP_ADJUST,          /* bpf_xdp_adjust_head/tail failed */
	LB_CNT_CT_HIT,
	LB_CNT_CT_MISS,
	LB_CNT_ICMP_SENT,            /* ICMP frag-needed / ICMPv6 packet-too-big sent to the client */
	LB_CNT_TX,                   /* forwarded with XDP_TX */
	LB_CNT_REDIRECT,             /* forwarded with bpf_redirect to another interface */
	LB_CNT_CT_RATE_LIMITED,      /* new flow over the rate guard: forwarded without a connection-table insert */
	LB_CNT_DROP_MARTIAN,         /* source 0/8, 127/8, 224/3, ::, ::1, ff00::/8 or fe80::/10, to a VIP or the SNAT address */
	LB_CNT_DROP_L2_NOT_UNICAST,  /* to a VIP via a broadcast/multicast MAC, or from a group MAC */
	LB_CNT_DROP_BAD_IP_CSUM,     /* IPv4 header checksum wrong where we would rewrite the whole header */
	LB_CNT_ICMP_ECHO_REPLY,      /* ICMP / ICMPv6 echo request to a VIP address answered */
	LB_CNT_DROP_SOURCE_RANGE,    /* source outside the sourceRanges of a service that has them */
	LB_CNT_MAX,
};

#endif
