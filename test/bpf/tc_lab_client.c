// SPDX-License-Identifier: GPL-2.0
/* TEST ONLY: plays the LB's part on a client's veth (TC egress) so the backend programs can be exercised with
 * real traffic without an LB: packets to a configured VIP:port are either encapsulated in IP-in-IP towards the
 * real (mode 1) or sent to real:target port carrying the ipopt DSR option (mode 2; like the LB: on TCP SYNs and
 * every UDP datagram, later TCP packets get the destination rewrite only), both IPv4 and IPv6.
 * Uses the backend's own option constants, so both sides agree on the layout by construction. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <stddef.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "backend_consts.h"
#include "backend_pkt.h"

struct lab_key {
  __u8 addr[16]; /* destination the client uses: the VIP */
  __be16 port;
  __u8 proto;
  __u8 family;
};

struct lab_value {
  __u8 real[16];
  __u8 outer_src[16]; /* ipip: outer source (the client itself here) */
  __be16 target_port; /* ipopt: destination port at the real */
  __u8 mode;          /* 1 = ipip, 2 = ipopt */
  __u8 pad;
};

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 64);
  __type(key, struct lab_key);
  __type(value, struct lab_value);
} lab_targets SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u64);
} lab_sent SEC(".maps");

static __always_inline void count_sent(void)
{
  __u32 k = 0;
  __u64 *v = bpf_map_lookup_elem(&lab_sent, &k);
  if (v)
    __sync_fetch_and_add(v, 1);
}

static __always_inline int encap4(struct __sk_buff *skb, const struct iphdr *inner, const struct lab_value *t)
{
  struct iphdr outer = {};
  outer.version = 4;
  outer.ihl = 5;
  outer.tot_len = bpf_htons(bpf_ntohs(inner->tot_len) + sizeof(outer));
  outer.frag_off = bpf_htons(0x4000);
  outer.ttl = 64;
  outer.protocol = BE_IPPROTO_IPIP;
  __builtin_memcpy(&outer.saddr, t->outer_src, 4);
  __builtin_memcpy(&outer.daddr, t->real, 4);
  outer.check = be_ip4_header_csum(&outer);
  if (bpf_skb_adjust_room(skb, sizeof(outer), BPF_ADJ_ROOM_MAC, BPF_F_ADJ_ROOM_ENCAP_L3_IPV4))
    return TC_ACT_SHOT;
  if (bpf_skb_store_bytes(skb, BE_L3_OFF, &outer, sizeof(outer), 0))
    return TC_ACT_SHOT;
  count_sent();
  return TC_ACT_OK;
}

static __always_inline int encap6(struct __sk_buff *skb, const struct ipv6hdr *inner, const struct lab_value *t)
{
  struct ipv6hdr outer = {};
  outer.version = 6;
  outer.payload_len = bpf_htons(bpf_ntohs(inner->payload_len) + sizeof(outer));
  outer.nexthdr = BE_IPPROTO_IPV6;
  outer.hop_limit = 64;
  __builtin_memcpy(&outer.saddr, t->outer_src, 16);
  __builtin_memcpy(&outer.daddr, t->real, 16);
  if (bpf_skb_adjust_room(skb, sizeof(outer), BPF_ADJ_ROOM_MAC, BPF_F_ADJ_ROOM_ENCAP_L3_IPV6))
    return TC_ACT_SHOT;
  if (bpf_skb_store_bytes(skb, BE_L3_OFF, &outer, sizeof(outer), 0))
    return TC_ACT_SHOT;
  count_sent();
  return TC_ACT_OK;
}

/* The LB's rule: the option rides on every UDP datagram and on TCP SYNs only (the backend remembers the flow). */
static __always_inline int wants_option(struct __sk_buff *skb, __u8 proto, __u32 l4)
{
  __u8 flags;
  if (proto != BE_IPPROTO_TCP)
    return 1;
  if (bpf_skb_load_bytes(skb, l4 + 13, &flags, 1))
    return 1;
  return (flags & 0x12) == 0x02; /* SYN without ACK */
}

/* Destination becomes real:target (checksums follow), then the option goes in after the base header. */
static __always_inline int ipopt4(struct __sk_buff *skb, struct iphdr *iph, const struct lab_key *k,
                                  const struct lab_value *t)
{
  __u32 l4 = BE_L3_OFF + sizeof(*iph);
  int csum = be_l4_csum_off(iph->protocol);
  __be32 real;
  __builtin_memcpy(&real, t->real, 4);
  if (csum < 0)
    return TC_ACT_OK;
  if (bpf_l4_csum_replace(skb, l4 + csum, iph->daddr, real, BPF_F_PSEUDO_HDR | 4) ||
      bpf_l4_csum_replace(skb, l4 + csum, k->port, t->target_port, 2) ||
      bpf_skb_store_bytes(skb, l4 + 2, &t->target_port, 2, 0))
    return TC_ACT_SHOT;
  if (!wants_option(skb, iph->protocol, l4)) {
    /* Like the LB: later TCP packets of the flow only get the destination rewrite. */
    if (bpf_l3_csum_replace(skb, BE_IP4_CSUM_OFF, iph->daddr, real, 4) ||
        bpf_skb_store_bytes(skb, BE_L3_OFF + offsetof(struct iphdr, daddr), &real, 4, 0))
      return TC_ACT_SHOT;
    count_sent();
    return TC_ACT_OK;
  }
  if (bpf_skb_adjust_room(skb, BE_DSR_OPT4_LEN, BPF_ADJ_ROOM_NET, 0))
    return TC_ACT_SHOT;
  struct {
    struct iphdr ip;
    __u8 type, len;
    __be16 port;
    __be32 addr;
  } h;
  __builtin_memcpy(&h.ip, iph, sizeof(h.ip));
  h.ip.ihl = 7;
  h.ip.tot_len = bpf_htons(bpf_ntohs(iph->tot_len) + BE_DSR_OPT4_LEN);
  h.ip.daddr = real;
  h.type = BE_DSR_OPT4_TYPE;
  h.len = BE_DSR_OPT4_LEN;
  h.port = k->port;
  __builtin_memcpy(&h.addr, k->addr, 4);
  /* 28-byte header checksum. */
  h.ip.check = 0;
  __u32 sum = 0;
  const __u16 *w = (const __u16 *)&h;
#pragma unroll
  for (int i = 0; i < 14; i++)
    sum += w[i];
  sum = (sum & 0xffff) + (sum >> 16);
  sum = (sum & 0xffff) + (sum >> 16);
  h.ip.check = (__u16)~sum;
  if (bpf_skb_store_bytes(skb, BE_L3_OFF, &h, sizeof(h), 0))
    return TC_ACT_SHOT;
  count_sent();
  return TC_ACT_OK;
}

static __always_inline int ipopt6(struct __sk_buff *skb, struct ipv6hdr *ip6, const struct lab_key *k,
                                  const struct lab_value *t)
{
  __u32 l4 = BE_L3_OFF + sizeof(*ip6);
  int csum = be_l4_csum_off(ip6->nexthdr);
  if (csum < 0)
    return TC_ACT_OK;
  __s64 diff = bpf_csum_diff((__be32 *)&ip6->daddr, 16, (__be32 *)t->real, 16, 0);
  if (bpf_l4_csum_replace(skb, l4 + csum, 0, (__u32)diff, BPF_F_PSEUDO_HDR) ||
      bpf_l4_csum_replace(skb, l4 + csum, k->port, t->target_port, 2) ||
      bpf_skb_store_bytes(skb, l4 + 2, &t->target_port, 2, 0))
    return TC_ACT_SHOT;
  if (!wants_option(skb, ip6->nexthdr, l4)) {
    if (bpf_skb_store_bytes(skb, BE_L3_OFF + offsetof(struct ipv6hdr, daddr), t->real, 16, 0))
      return TC_ACT_SHOT;
    count_sent();
    return TC_ACT_OK;
  }
  if (bpf_skb_adjust_room(skb, BE_DSR_EXT6_LEN, BPF_ADJ_ROOM_NET, 0))
    return TC_ACT_SHOT;
  struct {
    struct ipv6hdr ip;
    __u8 nexthdr, hdrlen, opt_type, opt_len;
    __u8 addr[16];
    __be16 port;
    __u16 pad;
  } h;
  __builtin_memcpy(&h.ip, ip6, sizeof(h.ip));
  h.nexthdr = ip6->nexthdr;
  h.hdrlen = BE_DSR_EXT6_HDRLEN;
  h.opt_type = BE_DSR_OPT6_TYPE;
  h.opt_len = BE_DSR_OPT6_LEN;
  __builtin_memcpy(h.addr, k->addr, 16);
  h.port = k->port;
  h.pad = 0;
  h.ip.nexthdr = BE_IPPROTO_DSTOPTS;
  h.ip.payload_len = bpf_htons(bpf_ntohs(ip6->payload_len) + BE_DSR_EXT6_LEN);
  __builtin_memcpy(&h.ip.daddr, t->real, 16);
  if (bpf_skb_store_bytes(skb, BE_L3_OFF, &h, sizeof(h), 0))
    return TC_ACT_SHOT;
  count_sent();
  return TC_ACT_OK;
}

SEC("tc")
int lab_client_egress(struct __sk_buff *skb)
{
  struct lab_key k = {};
  struct be_ports ports;
  struct lab_value *t;
  __u16 proto = bpf_ntohs(skb->protocol);

  if (proto == BE_ETH_P_IP) {
    struct iphdr iph;
    if (bpf_skb_load_bytes(skb, BE_L3_OFF, &iph, sizeof(iph)) || iph.ihl != 5)
      return TC_ACT_OK;
    if (bpf_skb_load_bytes(skb, BE_L3_OFF + sizeof(iph), &ports, sizeof(ports)))
      return TC_ACT_OK;
    __builtin_memcpy(k.addr, &iph.daddr, 4);
    k.port = ports.dst;
    k.proto = iph.protocol;
    k.family = 4;
    t = bpf_map_lookup_elem(&lab_targets, &k);
    if (!t)
      return TC_ACT_OK;
    return t->mode == 1 ? encap4(skb, &iph, t) : ipopt4(skb, &iph, &k, t);
  }
  if (proto == BE_ETH_P_IPV6) {
    struct ipv6hdr ip6;
    if (bpf_skb_load_bytes(skb, BE_L3_OFF, &ip6, sizeof(ip6)))
      return TC_ACT_OK;
    if (bpf_skb_load_bytes(skb, BE_L3_OFF + sizeof(ip6), &ports, sizeof(ports)))
      return TC_ACT_OK;
    __builtin_memcpy(k.addr, &ip6.daddr, 16);
    k.port = ports.dst;
    k.proto = ip6.nexthdr;
    k.family = 6;
    t = bpf_map_lookup_elem(&lab_targets, &k);
    if (!t)
      return TC_ACT_OK;
    return t->mode == 1 ? encap6(skb, &ip6, t) : ipopt6(skb, &ip6, &k, t);
  }
  return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
