/* Constants of the backend-node TC programs (tc_backend.c). See docs/backend.md. */
#ifndef GITLB_BACKEND_CONSTS_H
#define GITLB_BACKEND_CONSTS_H

#ifndef TC_ACT_OK
#define TC_ACT_OK 0
#endif
#ifndef TC_ACT_SHOT
#define TC_ACT_SHOT 2
#endif

#define BE_ETH_P_IP 0x0800
#define BE_ETH_P_IPV6 0x86DD

#define BE_IPPROTO_ICMP 1
#define BE_IPPROTO_ICMPV6 58
#define BE_IPPROTO_IPIP 4     /* IPv4 inside (IPv4 or IPv6) */
#define BE_IPPROTO_TCP 6
#define BE_IPPROTO_UDP 17
#define BE_IPPROTO_IPV6 41    /* IPv6 inside */
#define BE_IPPROTO_DSTOPTS 60 /* IPv6 destination options extension header */
#define BE_IPPROTO_FRAGMENT 44 /* IPv6 fragment extension header */
#define BE_IPPROTO_HOPOPTS 0   /* IPv6 hop-by-hop options extension header */
#define BE_IPPROTO_ROUTING 43  /* IPv6 routing extension header */
/* Extension headers walked before a fragment header is looked for (RFC 8200 4.1 puts hop-by-hop, destination
 * options and routing before it; more than this is not a packet any stack sends). */
#define BE_IPV6_EXT_MAX 4

/* ICMP errors that quote a packet (the only ICMP the egress program translates). */
#define BE_ICMP_DEST_UNREACH 3
#define BE_ICMP_TIME_EXCEEDED 11
#define BE_ICMP_PARAMETERPROB 12
#define BE_ICMP6_DEST_UNREACH 1
#define BE_ICMP6_PKT_TOOBIG 2
#define BE_ICMP6_TIME_EXCEED 3
#define BE_ICMP6_PARAMPROB 4

/* The `ipopt` DSR option, Cilium's layout (bpf/lib/nodeport.h, dsr_opt_v4 / dsr_opt_v6), shared with the
 * LB's XDP program. IPv4: an 8-byte option right after the 20-byte base header:
 *   type 0x9a (copy bit | number 26), len 8, port (be16), addr (be32).
 * IPv6: a 24-byte destination-options extension header right after the fixed header:
 *   next header, hdr ext len 2 (= 24/8 - 1), option type 0x1b, option len 20, addr (16), port (be16), pad (2). */
#define BE_DSR_OPT4_TYPE 0x9a
#define BE_DSR_OPT4_LEN 8
#define BE_DSR_OPT6_TYPE 0x1b
#define BE_DSR_OPT6_LEN 20     /* option data length, excluding type and length bytes */
#define BE_DSR_EXT6_LEN 24     /* whole extension header */
#define BE_DSR_EXT6_HDRLEN 2   /* the header's own length field: 8-octet units beyond the first */

/* Flags of a served VIP (be_vip_value.flags). */
#define BE_VIP_F_IPIP 0x01  /* decapsulate IP-in-IP whose inner destination is this address (and GUE at the
                             * address entry's target_port, when it is not 0) */
#define BE_VIP_F_IPOPT 0x02 /* accept the ipopt option naming this VIP:port and rewrite the replies */

/* Flags of a be_tunnel_addrs entry (be_addr_value.flags). */
#define BE_ADDR_F_LB_SOURCE 0x01 /* an lb node's address: tunnels from it are decapsulated */
#define BE_ADDR_F_LOCAL 0x02     /* one of this node's own addresses: tunnels to it are decapsulated */

/* bpf_skb_adjust_room() decap flags (kernel 6.3+); older uapi headers lack them. */
#ifndef BPF_F_ADJ_ROOM_DECAP_L3_IPV4
#define BPF_F_ADJ_ROOM_DECAP_L3_IPV4 (1ULL << 7)
#endif
#ifndef BPF_F_ADJ_ROOM_DECAP_L3_IPV6
#define BPF_F_ADJ_ROOM_DECAP_L3_IPV6 (1ULL << 8)
#endif

/* Indexes of the per-CPU counters (be_stats). Names in src/bpf/backend/codec.ts follow this order. */
enum be_stat {
  BE_STAT_RX_PACKETS = 0,      /* ingress packets seen */
  BE_STAT_DECAP_IPIP4 = 1,     /* IPv4-in-IPv4 decapsulated */
  BE_STAT_DECAP_IPIP6 = 2,     /* IPv6-in-IPv6 decapsulated */
  BE_STAT_DECAP_4IN6 = 3,      /* IPv4-in-IPv6 decapsulated */
  BE_STAT_DECAP_6IN4 = 4,      /* IPv6-in-IPv4 decapsulated */
  BE_STAT_IPIP_NOT_VIP = 5,    /* tunnelled packet whose inner destination we do not serve: passed untouched */
  BE_STAT_IPOPT4 = 6,          /* IPv4 packets with the DSR option, flow recorded */
  BE_STAT_IPOPT6 = 7,          /* IPv6 packets with the DSR option, flow recorded */
  BE_STAT_IPOPT_NOT_VIP = 8,   /* DSR option naming a VIP:port we do not serve (or wrong local port): untouched */
  BE_STAT_CONN_UPDATE_FAIL = 9,/* could not write the connection map */
  BE_STAT_ADJUST_FAIL = 10,    /* bpf_skb_adjust_room failed: packet dropped */
  BE_STAT_TX_PACKETS = 11,     /* egress packets seen */
  BE_STAT_REPLY4_REWRITE = 12, /* IPv4 replies rewritten to VIP:port */
  BE_STAT_REPLY6_REWRITE = 13, /* IPv6 replies rewritten to VIP:port */
  BE_STAT_ICMP4_REWRITE = 14,  /* ICMP errors about an ipopt flow rewritten */
  BE_STAT_ICMP6_REWRITE = 15,
  BE_STAT_REWRITE_FAIL = 16,   /* a checksum or store helper failed: packet dropped */
  BE_STAT_FRAGMENT = 17,       /* IP fragments (IPv4 MF/offset, IPv6 fragment header): passed untouched */
  BE_STAT_BAD_IP_CSUM = 18,    /* ipopt packet whose IPv4 header checksum is wrong: dropped, never re-checksummed */
  BE_STAT_DECAP_BAD_OUTER = 19,/* tunnel to a served VIP with a bad outer header (version, checksum, length): dropped */
  BE_STAT_DECAP_NOT_ALLOWED = 20, /* tunnel to a served VIP not from an lb node, or not to this node: dropped */
  BE_STAT_IPOPT_PREV_TARGET = 21, /* of ipopt4/ipopt6: option accepted at the listener's previous targetPort */
  BE_STAT_DECAP_GUE4 = 22,     /* GUE (IP in UDP) over IPv4 decapsulated */
  BE_STAT_DECAP_GUE6 = 23,     /* GUE over IPv6 decapsulated */
  BE_STAT__MAX = 24,
};

/* How long a listener's previous targetPort stays trusted after the change, and after the last option that
 * arrived at it (docs/backend.md, "targetPort changes"). An lb node that still rewrites to the old port keeps it
 * alive; once none does, it lapses. Long enough to cover a fetch interval, probation and a revert. */
#define BE_PREV_TARGET_GRACE_NS (300ULL * 1000000000ULL)
/* prev_seen_ns is renewed at most this often, so a SYN flood at the old port does not write the entry per packet. */
#define BE_PREV_TARGET_RENEW_NS (1000000000ULL)

#define BE_CONN_MAX_ENTRIES 65536
#define BE_VIP_MAX_ENTRIES 4096
#define BE_ADDR_MAX_ENTRIES 1024

#endif
