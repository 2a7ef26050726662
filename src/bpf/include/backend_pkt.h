/* Packet helpers of the backend-node TC programs: header offsets, address copies, the IPv4 header checksum. */
#ifndef GITLB_BACKEND_PKT_H
#define GITLB_BACKEND_PKT_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <stddef.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "backend_consts.h"

#define BE_L3_OFF ETH_HLEN
#define BE_IP4_CSUM_OFF (BE_L3_OFF + offsetof(struct iphdr, check))
#define BE_IP4_SADDR_OFF (BE_L3_OFF + offsetof(struct iphdr, saddr))
#define BE_IP6_SADDR_OFF (BE_L3_OFF + offsetof(struct ipv6hdr, saddr))

/* The IPv4 "fragment offset or more fragments" bits. */
#define BE_IP_FRAG_MASK 0x3fff

/* The first 4 bytes of a TCP or UDP header: source and destination port, network order. */
struct be_ports {
  __be16 src;
  __be16 dst;
};

/* ICMPv4 and ICMPv6 share this 8-byte header shape (linux/icmp.h drags in libc headers). */
struct be_icmphdr {
  __u8 type;
  __u8 code;
  __sum16 checksum;
  __be32 rest;
};

/* Offset of the transport checksum within its header, or -1 for protocols we do not translate. */
static __always_inline int be_l4_csum_off(__u8 proto)
{
  if (proto == BE_IPPROTO_TCP)
    return offsetof(struct tcphdr, check);
  if (proto == BE_IPPROTO_UDP)
    return offsetof(struct udphdr, check);
  return -1;
}

/* UDP over IPv4 may carry no checksum (0): a rewrite must leave it 0, not invent one. */
static __always_inline __u64 be_l4_mangle_flags(__u8 proto)
{
  return proto == BE_IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
}

/* Whether an IPv6 packet whose fixed header names `nexthdr` is a fragment: a fragment header directly after the
 * fixed header, or after up to BE_IPV6_EXT_MAX hop-by-hop, destination-options or routing headers (all of the
 * generic shape: next header, then the length in 8-octet units beyond the first 8) that lie within the frame.
 * A chain that is longer, cut short, or leads elsewhere is not called a fragment. */
static __always_inline int be_ipv6_is_fragment(struct __sk_buff *skb, __u8 nexthdr)
{
  __u32 off = BE_L3_OFF + sizeof(struct ipv6hdr);

#pragma unroll
  for (int i = 0; i < BE_IPV6_EXT_MAX; i++) {
    if (nexthdr == BE_IPPROTO_FRAGMENT)
      return 1;
    if (nexthdr != BE_IPPROTO_HOPOPTS && nexthdr != BE_IPPROTO_DSTOPTS && nexthdr != BE_IPPROTO_ROUTING)
      return 0;
    __u8 ext[2];

    if (bpf_skb_load_bytes(skb, off, ext, sizeof(ext)) < 0)
      return 0;
    nexthdr = ext[0];
    off += ((__u32)ext[1] + 1) * 8;
  }
  return nexthdr == BE_IPPROTO_FRAGMENT;
}

/* Bytes of the skb after the Ethernet header: what an IP length may at most announce. */
static __always_inline __u32 be_l3_bytes(const struct __sk_buff *skb)
{
  return skb->len > BE_L3_OFF ? skb->len - BE_L3_OFF : 0;
}

static __always_inline void be_copy16(__u8 *dst, const void *src)
{
  __builtin_memcpy(dst, src, 16);
}

static __always_inline void be_copy4(__u8 *dst, const void *src)
{
  __builtin_memcpy(dst, src, 4);
}

static __always_inline int be_addr6_equal(const struct in6_addr *a, const struct in6_addr *b)
{
  return a->in6_u.u6_addr32[0] == b->in6_u.u6_addr32[0] && a->in6_u.u6_addr32[1] == b->in6_u.u6_addr32[1] &&
         a->in6_u.u6_addr32[2] == b->in6_u.u6_addr32[2] && a->in6_u.u6_addr32[3] == b->in6_u.u6_addr32[3];
}

/* Folded one's-complement sum of n 16-bit words (not negated): 0xffff over a header with a right checksum. */
static __always_inline __u16 be_ones_sum(const void *buf, int n)
{
  const __u16 *w = buf;
  __u32 sum = 0;
#pragma unroll
  for (int i = 0; i < n; i++)
    sum += w[i];
  sum = (sum & 0xffff) + (sum >> 16);
  sum = (sum & 0xffff) + (sum >> 16);
  return (__u16)sum;
}

/* One's-complement sum of a 20-byte IPv4 header (its checksum field must already be zero), folded and negated. */
static __always_inline __u16 be_ip4_header_csum(const struct iphdr *iph)
{
  return (__u16)~be_ones_sum(iph, 10);
}

#endif
