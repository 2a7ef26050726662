/* SPDX-License-Identifier: Apache-2.0 */
/* Health probes through the VIP path (healthCheck.via: vip; docs/health.md). The lb node's health checker
 * connects to REAL:port from a source port it reserved for one (service, real), so the kernel routes the probe
 * and resolves the next hop exactly as for a via: real probe. On TC egress of the lb node's interface,
 * vip_probe_egress recognises the reserved (real, port, source port) in probe_out and turns the probe into what
 * a client packet looks like when the XDP program forwards it: destination rewritten to the VIP, then either
 * sent as is to the real's MAC (dsr-l2) or inside an outer IPv4 header to the real (dsr-ipip). The real answers
 * from VIP:port straight to the lb node (DSR); vip_probe_ingress (TC ingress, after the XDP program passed the
 * packet: its destination is the node's own address) finds (VIP, port, source port) in probe_in and puts the
 * real's address back as the source, so the socket sees its own connection. A real that lost its VIP (l2) or
 * its decapsulation (ipip) never answers from the VIP, and the probe fails. ipopt: the probe stays addressed to
 * REAL:targetPort and its SYN carries the DSR option naming VIP:port; the backend answers from VIP:port only when it
 * trusted the option, and vip_probe_ingress gives the answer back the real's address and targetPort (an answer from
 * REAL:targetPort itself is dropped). gue: as ipip, with a UDP header to the cluster's GUE port between the outer
 * header and the probe (GUE variant 1, as xdp_lb writes it), so the backend's GUE decapsulation is what answers.
 * Every other packet passes untouched. IPv4 TCP; IPv6 TCP (probe6_out, probe6_in). */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <stddef.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "lb_gue.h"

#define PROBE_ENCAP_L2 1
#define PROBE_ENCAP_IPIP 2
#define PROBE_ENCAP_IPOPT 3
#define PROBE_ENCAP_GUE 4
#define DSR_OPT_TYPE 0x9a /* the LB's ipopt option (lb_consts.h LB_DSR_OPT_TYPE), Cilium's layout */
#define DSR_OPT_LEN 8

#define IP_OFF sizeof(struct ethhdr)
#define IP_CSUM_OFF (IP_OFF + offsetof(struct iphdr, check))
#define IP_SRC_OFF (IP_OFF + offsetof(struct iphdr, saddr))
#define IP_DST_OFF (IP_OFF + offsetof(struct iphdr, daddr))
#define TCP_CSUM_OFF (IP_OFF + sizeof(struct iphdr) + offsetof(struct tcphdr, check))
#define TCP_SPORT_OFF (IP_OFF + sizeof(struct iphdr) + offsetof(struct tcphdr, source))
#define IP_FRAG_MASK 0x3fff /* more fragments, fragment offset */
#define IP6_SRC_OFF (IP_OFF + offsetof(struct ipv6hdr, saddr))
#define IP6_DST_OFF (IP_OFF + offsetof(struct ipv6hdr, daddr))
#define TCP6_CSUM_OFF (IP_OFF + sizeof(struct ipv6hdr) + offsetof(struct tcphdr, check))
#define TCP6_SPORT_OFF (IP_OFF + sizeof(struct ipv6hdr) + offsetof(struct tcphdr, source))
#define DSR_EXT6_LEN 24 /* the LB's IPv6 ipopt destination-options header (lb_ipopt6.h), Cilium's dsr_opt_v6 */

struct probe_key {
	__be32 addr;  /* egress: the real; ingress: the VIP */
	__be16 port;  /* the service port probed */
	__be16 sport; /* the probe's reserved source port */
};

struct probe_out {
	__be32 vip;
	__be32 outer_src; /* ipip: outer source; 0 = the probe's own source address */
	__u32 encap;      /* PROBE_ENCAP_* */
	__be16 vip_port;  /* ipopt: the service port the option names (the probe goes to the real's targetPort) */
	__be16 gue_port;  /* gue: the UDP destination port of the tunnel (Cluster spec.gue.port) */
};

struct probe_in {
	__be32 real;
	__be16 real_port; /* ipopt: the port the probe connected to (the answer comes from vip_port); 0 = unchanged */
	__u16 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct probe_key);
	__type(value, struct probe_out);
} probe_out SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct probe_key);
	__type(value, struct probe_in);
} probe_in SEC(".maps");

/* IPv6 (l2, ipip): the same routes with 16-byte addresses, in maps of their own so the IPv4 layouts stay as they are */
struct probe6_key {
	__u8 addr[16]; /* egress: the real; ingress: the VIP */
	__be16 port;
	__be16 sport;
};

struct probe6_out {
	__u8 vip[16];
	__u8 outer_src[16]; /* ipip: outer source; all zero = the probe's own source address */
	__u32 encap;        /* PROBE_ENCAP_* */
	__be16 vip_port;    /* ipopt: the service port the option names */
	__be16 gue_port;    /* gue: the UDP destination port of the tunnel */
};

struct probe6_in {
	__u8 real[16];
	__be16 real_port; /* ipopt: the port the probe connected to; 0 = unchanged */
	__u16 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct probe6_key);
	__type(value, struct probe6_out);
} probe6_out SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct probe6_key);
	__type(value, struct probe6_in);
} probe6_in SEC(".maps");

static __always_inline __u16 csum_fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* The IPv4 TCP header pair at the front of an Ethernet frame (no options: probes and their answers carry none
 * the kernel would add on this path), or NULL. Only a whole packet is ours: version 4, not a fragment (a later
 * fragment's payload could look like a probe's ports; probes are sent with DF), total length from the two
 * headers up to the bytes present (so an outer header never announces what the frame does not hold). Anything
 * else passes as it came (docs/health.md, "Hostile packets"). */
static __always_inline struct iphdr *tcp4(struct __sk_buff *skb, struct tcphdr **tcp)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);

	if ((void *)(ip + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return 0;
	if (ip->version != 4 || ip->ihl != 5 || ip->protocol != IPPROTO_TCP)
		return 0;
	if (ip->frag_off & bpf_htons(IP_FRAG_MASK))
		return 0;
	__u32 len = bpf_ntohs(ip->tot_len);

	if (len < sizeof(struct iphdr) + sizeof(struct tcphdr) || len > skb->len - IP_OFF)
		return 0;
	*tcp = (void *)(ip + 1);
	if ((void *)(*tcp + 1) > data_end)
		return 0;
	return ip;
}

/* The IPv6 TCP header pair at the front of an Ethernet frame (TCP right after the fixed header), or NULL: version 6,
 * payload length from the TCP header up to the bytes present. */
static __always_inline struct ipv6hdr *tcp6(struct __sk_buff *skb, struct tcphdr **tcp)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6 = (void *)(eth + 1);

	if ((void *)(ip6 + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IPV6))
		return 0;
	if (ip6->version != 6 || ip6->nexthdr != IPPROTO_TCP)
		return 0;
	__u32 len = bpf_ntohs(ip6->payload_len);

	if (len < sizeof(struct tcphdr) || len > skb->len - IP_OFF - sizeof(struct ipv6hdr))
		return 0;
	*tcp = (void *)(ip6 + 1);
	if ((void *)(*tcp + 1) > data_end)
		return 0;
	return ip6;
}

/* Rewrites the 16-byte IPv6 address at `off` from `from` to `to`, fixing the TCP (pseudo-header) sum. */
static __always_inline int rewrite_addr6(struct __sk_buff *skb, __u32 off, const __u8 *from, const __u8 *to)
{
	__s64 diff = bpf_csum_diff((__be32 *)from, 16, (__be32 *)to, 16, 0);

	if (diff < 0 || bpf_l4_csum_replace(skb, TCP6_CSUM_OFF, 0, diff, BPF_F_PSEUDO_HDR))
		return -1;
	return bpf_skb_store_bytes(skb, off, to, 16, 0) ? -1 : 0;
}

/* ipopt over IPv6: the probe's SYN gets the destination-options header naming VIP:port right after the fixed header,
 * as xdp_lb writes it; the TCP checksum does not change (its pseudo-header has the TCP length and protocol). */
static __always_inline int insert_option6(struct __sk_buff *skb, const struct ipv6hdr *ip6, const struct tcphdr *tcp,
					  const __u8 *vip, __be16 vip_port)
{
	if (!tcp->syn || tcp->ack)
		return TC_ACT_OK;
	struct ipv6hdr h = *ip6;
	__u8 ext[DSR_EXT6_LEN] = { IPPROTO_TCP, DSR_EXT6_LEN / 8 - 1, 0x1b, 20 };

	__builtin_memcpy(ext + 4, vip, 16);
	*(__be16 *)(ext + 20) = vip_port;
	h.nexthdr = 60;
	h.payload_len = bpf_htons(bpf_ntohs(ip6->payload_len) + DSR_EXT6_LEN);
	if (bpf_skb_adjust_room(skb, DSR_EXT6_LEN, BPF_ADJ_ROOM_NET, 0))
		return TC_ACT_SHOT;
	if (bpf_skb_store_bytes(skb, IP_OFF, &h, sizeof(h), 0) ||
	    bpf_skb_store_bytes(skb, IP_OFF + sizeof(h), ext, sizeof(ext), 0))
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

static __always_inline int vip_probe_egress6(struct __sk_buff *skb)
{
	struct tcphdr *tcp;
	struct ipv6hdr *ip6 = tcp6(skb, &tcp);

	if (!ip6)
		return TC_ACT_OK;
	struct probe6_key key = { .port = tcp->dest, .sport = tcp->source };

	__builtin_memcpy(key.addr, &ip6->daddr, 16);
	struct probe6_out *r = bpf_map_lookup_elem(&probe6_out, &key);

	if (!r)
		return TC_ACT_OK;
	__u8 real[16], src[16], vip[16], outer_src[16];
	__u32 vtc = bpf_ntohl(*(__be32 *)ip6);
	__u32 inner_vtf = *(__u32 *)ip6;                 /* gue: the outer UDP checksum's words of the probe's header */
	__u16 inner_nh_hl = *(__u16 *)&ip6->nexthdr;
	__u16 len = bpf_ntohs(ip6->payload_len);
	__u32 encap = r->encap;
	__be16 gue_port = r->gue_port, gue_sport = lb_gue_sport(bpf_ntohs(tcp->source));

	__builtin_memcpy(real, &ip6->daddr, 16);
	__builtin_memcpy(src, &ip6->saddr, 16);
	__builtin_memcpy(vip, r->vip, 16);
	__builtin_memcpy(outer_src, r->outer_src, 16);
	if (encap == PROBE_ENCAP_IPOPT)
		return insert_option6(skb, ip6, tcp, vip, r->vip_port);
	if (rewrite_addr6(skb, IP6_DST_OFF, real, vip))
		return TC_ACT_SHOT;
	if (encap == PROBE_ENCAP_L2)
		return TC_ACT_OK;
	if (encap != PROBE_ENCAP_IPIP && (encap != PROBE_ENCAP_GUE || !gue_port))
		return TC_ACT_SHOT; /* never let a probe we cannot steer reach the VIP's owner */

	/* IPv6 in IPv6: version 6, the probe's traffic class, flow label 0, hop limit 64, next header 41; gue: next
	 * header 17 and the UDP header to the GUE port after it, its checksum as xdp_lb computes it (lb_gue6_csum:
	 * without summing the probe, right once the probe's own TCP checksum is, which the stack completes) */
	struct {
		struct ipv6hdr ip6;
		struct udphdr udp;
	} outer = {};
	__u64 any = *(__u64 *)outer_src | *(__u64 *)(outer_src + 8);
	__u32 udp = encap == PROBE_ENCAP_GUE ? sizeof(struct udphdr) : 0;
	__be16 udp_len = bpf_htons(len + sizeof(struct ipv6hdr) + sizeof(struct udphdr));

	*(__be32 *)&outer.ip6 = bpf_htonl((6u << 28) | (vtc & 0x0ff00000));
	outer.ip6.payload_len = bpf_htons(len + sizeof(struct ipv6hdr) + udp);
	outer.ip6.nexthdr = udp ? IPPROTO_UDP : IPPROTO_IPV6;
	outer.ip6.hop_limit = 64;
	__builtin_memcpy(&outer.ip6.saddr, any ? outer_src : src, 16);
	__builtin_memcpy(&outer.ip6.daddr, real, 16);
	if (udp) {
		outer.udp.source = gue_sport;
		outer.udp.dest = gue_port;
		outer.udp.len = udp_len;
		outer.udp.check = lb_gue6_csum(&outer.ip6.saddr, real, udp_len, gue_sport, gue_port, inner_vtf, inner_nh_hl,
					       IPPROTO_TCP);
	}
	__u64 flags = BPF_F_ADJ_ROOM_ENCAP_L3_IPV6 | (udp ? BPF_F_ADJ_ROOM_ENCAP_L4_UDP : 0);

	if (bpf_skb_adjust_room(skb, sizeof(struct ipv6hdr) + udp, BPF_ADJ_ROOM_MAC, flags))
		return TC_ACT_SHOT;
	if (bpf_skb_store_bytes(skb, IP_OFF, &outer, sizeof(struct ipv6hdr) + udp, 0))
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

static __always_inline int vip_probe_ingress6(struct __sk_buff *skb)
{
	struct tcphdr *tcp;
	struct ipv6hdr *ip6 = tcp6(skb, &tcp);

	if (!ip6)
		return TC_ACT_OK;
	struct probe6_key key = { .port = tcp->source, .sport = tcp->dest };

	__builtin_memcpy(key.addr, &ip6->saddr, 16);
	struct probe6_in *r = bpf_map_lookup_elem(&probe6_in, &key);

	if (!r) {
		/* ipopt: an answer straight from the real's address and targetPort skipped the backend's rewrite */
		struct probe6_out *o = bpf_map_lookup_elem(&probe6_out, &key);

		return o && o->encap == PROBE_ENCAP_IPOPT ? TC_ACT_SHOT : TC_ACT_OK;
	}
	__u8 vip[16], real[16];
	__be16 from_port = tcp->source, to_port = r->real_port;

	__builtin_memcpy(vip, &ip6->saddr, 16);
	__builtin_memcpy(real, r->real, 16);
	if (rewrite_addr6(skb, IP6_SRC_OFF, vip, real))
		return TC_ACT_SHOT;
	if (!to_port || to_port == from_port)
		return TC_ACT_OK;
	if (bpf_l4_csum_replace(skb, TCP6_CSUM_OFF, from_port, to_port, sizeof(to_port)) ||
	    bpf_skb_store_bytes(skb, TCP6_SPORT_OFF, &to_port, sizeof(to_port), 0))
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

/* Rewrites the 4-byte address at `off` from `from` to `to`, fixing the IPv4 and the TCP (pseudo-header) sums. */
static __always_inline int rewrite_addr(struct __sk_buff *skb, __u32 off, __be32 from, __be32 to)
{
	if (bpf_l4_csum_replace(skb, TCP_CSUM_OFF, from, to, BPF_F_PSEUDO_HDR | sizeof(to)))
		return -1;
	if (bpf_l3_csum_replace(skb, IP_CSUM_OFF, from, to, sizeof(to)))
		return -1;
	return bpf_skb_store_bytes(skb, off, &to, sizeof(to), 0) ? -1 : 0;
}

/* ipopt: the probe's SYN gets the option naming VIP:port right after its 20-byte header, as xdp_lb writes it for a
 * client's SYN; the destination stays the real's address and targetPort (what the LB rewrites a client's to). The
 * TCP checksum does not change (the pseudo-header has no IP options). Later segments need nothing: the backend
 * recorded the flow from the SYN. */
static __always_inline int insert_option(struct __sk_buff *skb, const struct iphdr *ip, const struct tcphdr *tcp,
					 __be32 vip, __be16 vip_port)
{
	if (!tcp->syn || tcp->ack)
		return TC_ACT_OK;
	struct iphdr h = *ip;

	/* the header checksum is computed anew below: a header that is not whole and right never leaves laundered */
	if (csum_fold(bpf_csum_diff(0, 0, (__be32 *)&h, sizeof(h), 0)) != 0)
		return TC_ACT_SHOT;
	__u32 opt[2] = { bpf_htonl(((__u32)DSR_OPT_TYPE << 24) | ((__u32)DSR_OPT_LEN << 16) | bpf_ntohs(vip_port)), vip };

	h.ihl = 7;
	h.tot_len = bpf_htons(bpf_ntohs(ip->tot_len) + DSR_OPT_LEN);
	h.check = 0;
	h.check = csum_fold(bpf_csum_diff(0, 0, (__be32 *)&h, sizeof(h), bpf_csum_diff(0, 0, opt, sizeof(opt), 0)));
	if (bpf_skb_adjust_room(skb, DSR_OPT_LEN, BPF_ADJ_ROOM_NET, 0))
		return TC_ACT_SHOT;
	if (bpf_skb_store_bytes(skb, IP_OFF, &h, sizeof(h), 0) ||
	    bpf_skb_store_bytes(skb, IP_OFF + sizeof(h), opt, sizeof(opt), 0))
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

SEC("tc")
int vip_probe_egress(struct __sk_buff *skb)
{
	struct tcphdr *tcp;
	struct iphdr *ip = tcp4(skb, &tcp);

	if (!ip)
		return vip_probe_egress6(skb);
	struct probe_key key = { .addr = ip->daddr, .port = tcp->dest, .sport = tcp->source };
	struct probe_out *r = bpf_map_lookup_elem(&probe_out, &key);

	if (!r)
		return TC_ACT_OK;
	__be32 real = ip->daddr, src = ip->saddr, vip = r->vip, outer_src = r->outer_src;
	__u32 encap = r->encap;
	__u8 tos = ip->tos;
	__u16 len = bpf_ntohs(ip->tot_len);
	__be16 gue_port = r->gue_port, gue_sport = lb_gue_sport(bpf_ntohs(tcp->source));

	if (encap == PROBE_ENCAP_IPOPT)
		return insert_option(skb, ip, tcp, vip, r->vip_port);

	/* the MACs already lead to the real's next hop: the kernel routed the probe to the real's address */
	if (rewrite_addr(skb, IP_DST_OFF, real, vip))
		return TC_ACT_SHOT;
	if (encap == PROBE_ENCAP_L2)
		return TC_ACT_OK;
	if (encap != PROBE_ENCAP_IPIP && (encap != PROBE_ENCAP_GUE || !gue_port))
		return TC_ACT_SHOT; /* never let a probe we cannot steer reach the VIP's owner */

	/* gue: the UDP header to the GUE port after the outer header, source port from the probe's (the lb's flow
	 * hash stands there for RSS), checksum 0 as xdp_lb and Linux fou send it over IPv4 */
	__u32 udp = encap == PROBE_ENCAP_GUE ? sizeof(struct udphdr) : 0;
	struct {
		struct iphdr ip;
		struct udphdr udp;
	} outer = {
		.ip = {
			.version = 4,
			.ihl = 5,
			.tos = tos,
			.tot_len = bpf_htons(len + sizeof(struct iphdr) + udp),
			.ttl = 64,
			.protocol = udp ? IPPROTO_UDP : IPPROTO_IPIP,
			.saddr = outer_src ? outer_src : src,
			.daddr = real,
		},
		.udp = {
			.source = gue_sport,
			.dest = gue_port,
			.len = bpf_htons(len + sizeof(struct udphdr)),
		},
	};
	__u64 flags = BPF_F_ADJ_ROOM_ENCAP_L3_IPV4 | (udp ? BPF_F_ADJ_ROOM_ENCAP_L4_UDP : 0);

	outer.ip.check = csum_fold(bpf_csum_diff(0, 0, (__be32 *)&outer.ip, sizeof(outer.ip), 0));
	if (bpf_skb_adjust_room(skb, sizeof(struct iphdr) + udp, BPF_ADJ_ROOM_MAC, flags))
		return TC_ACT_SHOT;
	if (bpf_skb_store_bytes(skb, IP_OFF, &outer, sizeof(struct iphdr) + udp, 0))
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

SEC("tc")
int vip_probe_ingress(struct __sk_buff *skb)
{
	struct tcphdr *tcp;
	struct iphdr *ip = tcp4(skb, &tcp);

	if (!ip)
		return vip_probe_ingress6(skb);
	struct probe_key key = { .addr = ip->saddr, .port = tcp->source, .sport = tcp->dest };
	struct probe_in *r = bpf_map_lookup_elem(&probe_in, &key);

	if (!r) {
		/* ipopt: an answer straight from the real's address and targetPort skipped the backend's rewrite to
		 * VIP:port, which clients would never accept: the probe must not take it either */
		struct probe_out *o = bpf_map_lookup_elem(&probe_out, &key);

		return o && o->encap == PROBE_ENCAP_IPOPT ? TC_ACT_SHOT : TC_ACT_OK;
	}
	__be16 from_port = tcp->source, to_port = r->real_port;

	if (rewrite_addr(skb, IP_SRC_OFF, ip->saddr, r->real))
		return TC_ACT_SHOT;
	if (!to_port || to_port == from_port)
		return TC_ACT_OK;
	/* ipopt: the answer comes from the service port, the probe's socket knows the targetPort */
	if (bpf_l4_csum_replace(skb, TCP_CSUM_OFF, from_port, to_port, sizeof(to_port)) ||
	    bpf_skb_store_bytes(skb, TCP_SPORT_OFF, &to_port, sizeof(to_port), 0))
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
