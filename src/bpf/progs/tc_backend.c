// SPDX-License-Identifier: GPL-2.0
/* TC programs of a backend node (role: backend). See docs/backend.md.
 *
 * ingress (backend_ingress), on the node's interface:
 *   - IP-in-IP whose inner destination is a VIP we serve (be_vips address entry): strip the outer header, so
 *     the inner packet reaches the local VIP (hosts here have no ipip module; the tunnel is undone in BPF).
 *   - the `ipopt` DSR option naming a VIP:port we serve (be_vips listener entry): remember the flow
 *     (client, this real, ports, protocol -> VIP:port) in be_conns, then strip the option.
 *   - everything else: untouched.
 * egress (backend_egress): replies of recorded ipopt flows leave with source VIP:port instead of this real's
 *   address and target port; ICMP errors about such a flow are translated the same way. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <stddef.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#ifdef BE_CAPTURE
/* tc_backend_capture.o for `gitlb capture` on a backend node: the same programs, each frame handed to user space as
 * it came and as it goes on, with the TC verdict and the be_stats counters it moved (lb_capture.h) */
#define LB_CAPTURE_TC
#include "lb_capture.h"
#endif
#include "backend_consts.h"
#include "backend_structs.h"
#include "backend_maps.h"
#include "backend_pkt.h"

/* The programs as the daemon runs them; in the capture build, the bodies its wrappers (at the end) call. */
#ifdef BE_CAPTURE
#define BE_PROGRAM(name) static __always_inline int name##_body
#else
#define BE_PROGRAM(name) SEC("tc") int name
#endif

/* ---------------------------------------------------------------- ingress: IP-in-IP ---------------------- */

/* Is `addr` (inner destination) a VIP we decapsulate for? A GUE tunnel (gue_port set: its UDP destination port,
 * network order) only at the port the address entry names. */
static __always_inline int be_vip_decap_allowed(const void *addr, __u8 family, __be16 gue_port)
{
  struct be_vip_key key = {};
  struct be_vip_value *v;

  if (family == 4)
    be_copy4(key.addr, addr);
  else
    be_copy16(key.addr, addr);
  key.family = family;
  v = bpf_map_lookup_elem(&be_vips, &key);
  return v && (v->flags & BE_VIP_F_IPIP) && (!gue_port || v->target_port == gue_port);
}

static __always_inline int be_tunnel_addr_has(const void *addr, __u8 family, __u8 flag)
{
  struct be_addr_key key = {};
  struct be_addr_value *v;

  if (family == 4)
    be_copy4(key.addr, addr);
  else
    be_copy16(key.addr, addr);
  key.family = family;
  v = bpf_map_lookup_elem(&be_tunnel_addrs, &key);
  return v && (v->flags & flag);
}

/* Checks the outer header of a tunnel whose inner destination we serve. Returns 0 (decapsulate) or the
 * be_stat reason to drop it: a damaged outer header (version, IPv4 checksum, a length the frame does not hold, an
 * inner header of the other version; GUE: a UDP length other than the outer payload's), an outer destination that
 * is not this node, a source that is no lb node. `udp` is 8 for GUE (a UDP header between the two), else 0. */
static __always_inline int be_tunnel_refusal(struct __sk_buff *skb, __u8 outer_family, __u8 inner_family, __u32 udp)
{
  __u32 frame_l3 = be_l3_bytes(skb);
  __u32 inner_min = udp + (inner_family == 4 ? sizeof(struct iphdr) : sizeof(struct ipv6hdr));
  __u32 outer_ip = outer_family == 4 ? sizeof(struct iphdr) : sizeof(struct ipv6hdr);
  __be16 udp_len = 0;
  __u8 inner_ver;

  if (bpf_skb_load_bytes(skb, BE_L3_OFF + outer_ip + udp, &inner_ver, 1) < 0 ||
      (udp && bpf_skb_load_bytes(skb, BE_L3_OFF + outer_ip + offsetof(struct udphdr, len), &udp_len, 2) < 0))
    return BE_STAT_DECAP_BAD_OUTER;
  if (outer_family == 4) {
    struct iphdr o;

    if (bpf_skb_load_bytes(skb, BE_L3_OFF, &o, sizeof(o)) < 0)
      return BE_STAT_DECAP_BAD_OUTER;
    if (o.version != 4 || be_ones_sum(&o, 10) != 0xffff || bpf_ntohs(o.tot_len) > frame_l3 ||
        bpf_ntohs(o.tot_len) < sizeof(o) + inner_min || (inner_ver >> 4) != inner_family ||
        (udp && bpf_ntohs(udp_len) != bpf_ntohs(o.tot_len) - sizeof(o)))
      return BE_STAT_DECAP_BAD_OUTER;
    if (!be_tunnel_addr_has(&o.daddr, 4, BE_ADDR_F_LOCAL) || !be_tunnel_addr_has(&o.saddr, 4, BE_ADDR_F_LB_SOURCE))
      return BE_STAT_DECAP_NOT_ALLOWED;
    return 0;
  }
  struct ipv6hdr o6;

  if (bpf_skb_load_bytes(skb, BE_L3_OFF, &o6, sizeof(o6)) < 0)
    return BE_STAT_DECAP_BAD_OUTER;
  if (o6.version != 6 || sizeof(o6) + bpf_ntohs(o6.payload_len) > frame_l3 ||
      bpf_ntohs(o6.payload_len) < inner_min || (inner_ver >> 4) != inner_family ||
      (udp && udp_len != o6.payload_len))
    return BE_STAT_DECAP_BAD_OUTER;
  if (!be_tunnel_addr_has(&o6.daddr, 6, BE_ADDR_F_LOCAL) || !be_tunnel_addr_has(&o6.saddr, 6, BE_ADDR_F_LB_SOURCE))
    return BE_STAT_DECAP_NOT_ALLOWED;
  return 0;
}

/* Removes the outer header (outer_len bytes after the MAC header: the outer IP header, and for GUE its UDP header)
 * of a tunnelled packet whose inner header (IPv4 or IPv6, `inner_family`) starts at BE_L3_OFF + outer_len.
 * gue_port: the UDP destination port of a GUE tunnel (network order), 0 for IP-in-IP. */
static __always_inline int be_decap(struct __sk_buff *skb, __u32 outer_len, __u8 outer_family, __u8 inner_family,
                                    __be16 gue_port)
{
  __u8 daddr[16];
  __u32 inner_daddr_off = BE_L3_OFF + outer_len +
                          (inner_family == 4 ? offsetof(struct iphdr, daddr) : offsetof(struct ipv6hdr, daddr));

  if (bpf_skb_load_bytes(skb, inner_daddr_off, daddr, inner_family == 4 ? 4 : 16) < 0)
    return TC_ACT_OK;
  if (!be_vip_decap_allowed(daddr, inner_family, gue_port)) {
    /* a UDP datagram that is not GUE to a VIP served here is the node's own traffic: not counted */
    if (!gue_port)
      be_count(BE_STAT_IPIP_NOT_VIP);
    return TC_ACT_OK;
  }
  /* Ours to decapsulate: refused (dropped, so no other decapsulator gets it either) unless it is whole and
   * comes from an lb node to this node. */
  int refusal = be_tunnel_refusal(skb, outer_family, inner_family, gue_port ? sizeof(struct udphdr) : 0);
  if (refusal) {
    be_count(refusal);
    return TC_ACT_SHOT;
  }

  /* FIXED_GSO: for a GRO-merged tunnel packet the segment payload size stays what it was; only headers go. */
  __u64 flags = BPF_F_ADJ_ROOM_FIXED_GSO;
  if (inner_family != outer_family)
    flags |= inner_family == 4 ? BPF_F_ADJ_ROOM_DECAP_L3_IPV4 : BPF_F_ADJ_ROOM_DECAP_L3_IPV6;
  if (bpf_skb_adjust_room(skb, -(__s32)outer_len, BPF_ADJ_ROOM_MAC, flags) < 0) {
    be_count(BE_STAT_ADJUST_FAIL);
    return TC_ACT_SHOT;
  }
  if (inner_family != outer_family) {
    /* The stack dispatches on skb->protocol (set by the decap flag); keep the Ethernet header truthful too. */
    __be16 proto = bpf_htons(inner_family == 4 ? BE_ETH_P_IP : BE_ETH_P_IPV6);
    if (bpf_skb_store_bytes(skb, offsetof(struct ethhdr, h_proto), &proto, sizeof(proto), 0) < 0) {
      be_count(BE_STAT_ADJUST_FAIL);
      return TC_ACT_SHOT;
    }
  }

  if (gue_port)
    be_count(outer_family == 4 ? BE_STAT_DECAP_GUE4 : BE_STAT_DECAP_GUE6);
  else if (outer_family == 4)
    be_count(inner_family == 4 ? BE_STAT_DECAP_IPIP4 : BE_STAT_DECAP_6IN4);
  else
    be_count(inner_family == 6 ? BE_STAT_DECAP_IPIP6 : BE_STAT_DECAP_4IN6);
  return TC_ACT_OK;
}

/* GUE variant 1 (the UDP payload is an IP packet, its version nibble 4 or 6): decapsulated like IP-in-IP when the
 * inner destination is a VIP whose address entry names this UDP destination port (docs/backend.md, "GUE"). */
static __always_inline int be_ingress_gue(struct __sk_buff *skb, __u8 outer_family)
{
  __u32 outer_ip = outer_family == 4 ? sizeof(struct iphdr) : sizeof(struct ipv6hdr);
  struct {
    struct udphdr uh;
    __u8 ver;
  } g;

  if (bpf_skb_load_bytes(skb, BE_L3_OFF + outer_ip, &g, sizeof(struct udphdr) + 1) < 0)
    return TC_ACT_OK;
  __u8 inner_family = g.ver >> 4;

  if (inner_family != 4 && inner_family != 6)
    return TC_ACT_OK;
  return be_decap(skb, outer_ip + sizeof(struct udphdr), outer_family, inner_family, g.uh.dest);
}

/* ---------------------------------------------------------------- ingress: ipopt ------------------------- */

/* Checks the VIP:port an option names against be_vips. Returns 1 if the option is trusted (counted otherwise). */
static __always_inline int be_option_trusted(const __u8 *vip, __be16 vip_port, __u8 family, __u8 proto,
                                             const struct be_ports *ports)
{
  struct be_vip_key vkey = {};
  struct be_vip_value *v;

  be_copy16(vkey.addr, vip);
  vkey.port = vip_port;
  vkey.proto = proto;
  vkey.family = family;
  v = bpf_map_lookup_elem(&be_vips, &vkey);
  /* The option is trusted only for a listener we serve, arriving at the port the LB translates it to:
   * anything else could make this node answer with an arbitrary source address. */
  if (!v || !(v->flags & BE_VIP_F_IPOPT)) {
    be_count(BE_STAT_IPOPT_NOT_VIP);
    return 0;
  }
  if (v->target_port && v->target_port != ports->dst) {
    /* Or at the listener's previous targetPort, while lb nodes may still use it: they apply a revision after
     * us, or refuse it and revert, and must not lose the service meanwhile. Only that one port, and only within
     * the grace (renewed by use), so a port that was never this listener's stays refused. */
    __u64 now = bpf_ktime_get_ns();
    __u64 seen = v->prev_seen_ns;
    if (!v->prev_target_port || v->prev_target_port != ports->dst || now - seen >= BE_PREV_TARGET_GRACE_NS) {
      be_count(BE_STAT_IPOPT_NOT_VIP);
      return 0;
    }
    if (now - seen >= BE_PREV_TARGET_RENEW_NS)
      v->prev_seen_ns = now; /* a single aligned 8-byte store; a racing daemon write replaces the whole element */
    be_count(BE_STAT_IPOPT_PREV_TARGET);
  }
  return 1;
}

/* Records a trusted option's flow (client, this real, ports, protocol -> VIP:port) in be_conns. */
static __always_inline void be_record_flow(const __u8 *vip, __be16 vip_port, __u8 family, __u8 proto,
                                           const void *client, const void *local, const struct be_ports *ports)
{
  struct be_conn_key ckey = {};
  struct be_conn_value cval = {};
  if (family == 4) {
    be_copy4(ckey.client, client);
    be_copy4(ckey.local, local);
  } else {
    be_copy16(ckey.client, client);
    be_copy16(ckey.local, local);
  }
  ckey.client_port = ports->src;
  ckey.local_port = ports->dst;
  ckey.proto = proto;
  ckey.family = family;
  be_copy16(cval.vip, vip);
  cval.vip_port = vip_port;
  cval.last_seen_ns = bpf_ktime_get_ns();
  if (bpf_map_update_elem(&be_conns, &ckey, &cval, BPF_ANY) < 0)
    be_count(BE_STAT_CONN_UPDATE_FAIL);
}

/* IPv4 with the DSR option as the first (and, when ihl == 7, only) option. */
static __always_inline int be_ingress_ipopt4(struct __sk_buff *skb)
{
  struct iphdr iph;
  struct {
    __u8 type;
    __u8 len;
    __be16 port;
    __be32 addr;
  } opt;
  struct be_ports ports;
  __u8 vip[16] = {};

  if (bpf_skb_load_bytes(skb, BE_L3_OFF, &iph, sizeof(iph)) < 0 ||
      bpf_skb_load_bytes(skb, BE_L3_OFF + sizeof(iph), &opt, sizeof(opt)) < 0)
    return TC_ACT_OK;
  if (iph.version != 4 || opt.type != BE_DSR_OPT4_TYPE || opt.len != BE_DSR_OPT4_LEN)
    return TC_ACT_OK;
  /* Only a whole packet (its total length within the frame, room for the ports) is trusted and rewritten; the
   * stack drops the rest as it arrived. */
  if (bpf_ntohs(iph.tot_len) > be_l3_bytes(skb) || bpf_ntohs(iph.tot_len) < iph.ihl * 4 + sizeof(struct be_ports))
    return TC_ACT_OK;
  if (be_l4_csum_off(iph.protocol) < 0)
    return TC_ACT_OK;
  if (bpf_skb_load_bytes(skb, BE_L3_OFF + iph.ihl * 4, &ports, sizeof(ports)) < 0)
    return TC_ACT_OK;
  be_copy4(vip, &opt.addr);
  /* An option we do not trust leaves the packet untouched, whatever its header checksum (the stack judges it). */
  if (!be_option_trusted(vip, opt.port, 4, iph.protocol, &ports))
    return TC_ACT_OK;
  /* The strip below recomputes the header checksum: a header that arrived corrupted is dropped here (the stack
   * would drop it too) instead of being laundered into a valid one, and nothing is recorded from it. Base header
   * + option = 14 words. */
  if (iph.ihl == 7) {
    __u16 sum = be_ones_sum(&iph, 10);
    __u32 s2 = (__u32)sum + be_ones_sum(&opt, 4);
    s2 = (s2 & 0xffff) + (s2 >> 16);
    if (s2 != 0xffff) {
      be_count(BE_STAT_BAD_IP_CSUM);
      return TC_ACT_SHOT;
    }
  }
  be_record_flow(vip, opt.port, 4, iph.protocol, &iph.saddr, &iph.daddr, &ports);
  be_count(BE_STAT_IPOPT4);

  /* Strip the option when it is the only one: the stack would skip it anyway, but a plain header keeps the
   * packet identical to what the client sent, apart from the LB's destination rewrite. */
  if (iph.ihl != 7)
    return TC_ACT_OK;
  if (bpf_skb_adjust_room(skb, -BE_DSR_OPT4_LEN, BPF_ADJ_ROOM_NET, BPF_F_ADJ_ROOM_FIXED_GSO) < 0) {
    be_count(BE_STAT_ADJUST_FAIL);
    return TC_ACT_SHOT;
  }
  iph.ihl = 5;
  iph.tot_len = bpf_htons(bpf_ntohs(iph.tot_len) - BE_DSR_OPT4_LEN);
  iph.check = 0;
  iph.check = be_ip4_header_csum(&iph);
  /* BPF_F_RECOMPUTE_CSUM keeps skb->csum right for devices that deliver CHECKSUM_COMPLETE. */
  if (bpf_skb_store_bytes(skb, BE_L3_OFF, &iph, sizeof(iph), BPF_F_RECOMPUTE_CSUM) < 0) {
    be_count(BE_STAT_ADJUST_FAIL);
    return TC_ACT_SHOT;
  }
  return TC_ACT_OK;
}

/* IPv6 whose first extension header is the 24-byte DSR destination-options header. */
static __always_inline int be_ingress_ipopt6(struct __sk_buff *skb)
{
  struct ipv6hdr ip6;
  struct {
    __u8 nexthdr;
    __u8 hdrlen;
    __u8 opt_type;
    __u8 opt_len;
    __u8 addr[16];
    __be16 port;
    __u16 pad;
  } ext;
  struct be_ports ports;

  if (bpf_skb_load_bytes(skb, BE_L3_OFF, &ip6, sizeof(ip6)) < 0 ||
      bpf_skb_load_bytes(skb, BE_L3_OFF + sizeof(ip6), &ext, sizeof(ext)) < 0)
    return TC_ACT_OK;
  if (ext.hdrlen != BE_DSR_EXT6_HDRLEN || ext.opt_type != BE_DSR_OPT6_TYPE || ext.opt_len != BE_DSR_OPT6_LEN)
    return TC_ACT_OK;
  if (ip6.version != 6 || sizeof(ip6) + bpf_ntohs(ip6.payload_len) > be_l3_bytes(skb) ||
      bpf_ntohs(ip6.payload_len) < BE_DSR_EXT6_LEN + sizeof(struct be_ports))
    return TC_ACT_OK;
  if (be_l4_csum_off(ext.nexthdr) < 0)
    return TC_ACT_OK;
  if (bpf_skb_load_bytes(skb, BE_L3_OFF + sizeof(ip6) + BE_DSR_EXT6_LEN, &ports, sizeof(ports)) < 0)
    return TC_ACT_OK;
  /* IPv6 UDP checksum 0 is invalid (RFC 8200 8.1): not recorded, not stripped; the stack drops it as it is */
  if (ext.nexthdr == BE_IPPROTO_UDP) {
    __sum16 check;

    if (bpf_skb_load_bytes(skb, BE_L3_OFF + sizeof(ip6) + BE_DSR_EXT6_LEN + offsetof(struct udphdr, check), &check,
                           sizeof(check)) < 0 || !check)
      return TC_ACT_OK;
  }

  if (!be_option_trusted(ext.addr, ext.port, 6, ext.nexthdr, &ports))
    return TC_ACT_OK;
  be_record_flow(ext.addr, ext.port, 6, ext.nexthdr, &ip6.saddr, &ip6.daddr, &ports);
  be_count(BE_STAT_IPOPT6);

  if (bpf_skb_adjust_room(skb, -BE_DSR_EXT6_LEN, BPF_ADJ_ROOM_NET, BPF_F_ADJ_ROOM_FIXED_GSO) < 0) {
    be_count(BE_STAT_ADJUST_FAIL);
    return TC_ACT_SHOT;
  }
  /* Only payload length and next header change; they sit in the first 8 bytes of the fixed header. */
  ip6.nexthdr = ext.nexthdr;
  ip6.payload_len = bpf_htons(bpf_ntohs(ip6.payload_len) - BE_DSR_EXT6_LEN);
  if (bpf_skb_store_bytes(skb, BE_L3_OFF, &ip6, 8, BPF_F_RECOMPUTE_CSUM) < 0) {
    be_count(BE_STAT_ADJUST_FAIL);
    return TC_ACT_SHOT;
  }
  return TC_ACT_OK;
}

static __always_inline int be_ingress_v4(struct __sk_buff *skb)
{
  void *data = (void *)(long)skb->data;
  void *data_end = (void *)(long)skb->data_end;
  struct iphdr *iph = data + BE_L3_OFF;

  if ((void *)(iph + 1) > data_end || iph->ihl < 5)
    return TC_ACT_OK;
  if (iph->frag_off & bpf_htons(BE_IP_FRAG_MASK)) {
    be_count(BE_STAT_FRAGMENT);
    return TC_ACT_OK;
  }
  if (iph->ihl == 5 && iph->protocol == BE_IPPROTO_IPIP)
    return be_decap(skb, sizeof(struct iphdr), 4, 4, 0);
  if (iph->ihl == 5 && iph->protocol == BE_IPPROTO_IPV6)
    return be_decap(skb, sizeof(struct iphdr), 4, 6, 0);
  if (iph->ihl == 5 && iph->protocol == BE_IPPROTO_UDP)
    return be_ingress_gue(skb, 4);
  if (iph->ihl >= 7)
    return be_ingress_ipopt4(skb);
  return TC_ACT_OK;
}

static __always_inline int be_ingress_v6(struct __sk_buff *skb)
{
  void *data = (void *)(long)skb->data;
  void *data_end = (void *)(long)skb->data_end;
  struct ipv6hdr *ip6 = data + BE_L3_OFF;

  if ((void *)(ip6 + 1) > data_end)
    return TC_ACT_OK;
  __u8 nexthdr = ip6->nexthdr;

  /* a fragment, also behind hop-by-hop / destination-options / routing headers (an ipopt request's own
   * option header included): passed for reassembly, counted, never decapsulated or stripped */
  if (be_ipv6_is_fragment(skb, nexthdr)) {
    be_count(BE_STAT_FRAGMENT);
    return TC_ACT_OK;
  }
  if (nexthdr == BE_IPPROTO_IPV6)
    return be_decap(skb, sizeof(struct ipv6hdr), 6, 6, 0);
  if (nexthdr == BE_IPPROTO_IPIP)
    return be_decap(skb, sizeof(struct ipv6hdr), 6, 4, 0);
  if (nexthdr == BE_IPPROTO_UDP)
    return be_ingress_gue(skb, 6);
  if (nexthdr == BE_IPPROTO_DSTOPTS)
    return be_ingress_ipopt6(skb);
  return TC_ACT_OK;
}

BE_PROGRAM(backend_ingress)(struct __sk_buff *skb)
{
  void *data = (void *)(long)skb->data;
  void *data_end = (void *)(long)skb->data_end;
  struct ethhdr *eth = data;

  be_count(BE_STAT_RX_PACKETS);
  if ((void *)(eth + 1) > data_end)
    return TC_ACT_OK;
  if (eth->h_proto == bpf_htons(BE_ETH_P_IP))
    return be_ingress_v4(skb);
  if (eth->h_proto == bpf_htons(BE_ETH_P_IPV6))
    return be_ingress_v6(skb);
  return TC_ACT_OK;
}

/* ---------------------------------------------------------------- egress: reply rewrite ------------------ */

static __always_inline struct be_conn_value *be_find_flow(__u8 family, __u8 proto, const void *client,
                                                          const void *local, __be16 client_port,
                                                          __be16 local_port)
{
  struct be_conn_key key = {};

  if (family == 4) {
    be_copy4(key.client, client);
    be_copy4(key.local, local);
  } else {
    be_copy16(key.client, client);
    be_copy16(key.local, local);
  }
  key.client_port = client_port;
  key.local_port = local_port;
  key.proto = proto;
  key.family = family;
  return bpf_map_lookup_elem(&be_conns, &key);
}

/* Source address and port of an IPv4 reply become VIP:port; IP and transport checksums follow. */
static __always_inline int be_rewrite_reply4(struct __sk_buff *skb, __u32 l4_off, __u8 proto, __be32 old_saddr,
                                             __be16 old_sport, const struct be_conn_value *flow)
{
  __be32 new_saddr;
  __be16 new_sport = flow->vip_port;
  __u32 csum_off = l4_off + be_l4_csum_off(proto);
  __u64 mangle = be_l4_mangle_flags(proto);

  be_copy4((__u8 *)&new_saddr, flow->vip);
  if (bpf_l4_csum_replace(skb, csum_off, old_saddr, new_saddr, BPF_F_PSEUDO_HDR | mangle | sizeof(new_saddr)) < 0 ||
      bpf_l4_csum_replace(skb, csum_off, old_sport, new_sport, mangle | sizeof(new_sport)) < 0 ||
      bpf_l3_csum_replace(skb, BE_IP4_CSUM_OFF, old_saddr, new_saddr, sizeof(new_saddr)) < 0 ||
      bpf_skb_store_bytes(skb, BE_IP4_SADDR_OFF, &new_saddr, sizeof(new_saddr), 0) < 0 ||
      bpf_skb_store_bytes(skb, l4_off + offsetof(struct be_ports, src), &new_sport, sizeof(new_sport), 0) < 0) {
    be_count(BE_STAT_REWRITE_FAIL);
    return TC_ACT_SHOT;
  }
  be_count(BE_STAT_REPLY4_REWRITE);
  return TC_ACT_OK;
}

static __always_inline int be_rewrite_reply6(struct __sk_buff *skb, __u32 l4_off, __u8 proto,
                                             const struct in6_addr *old_saddr, __be16 old_sport,
                                             const struct be_conn_value *flow)
{
  struct in6_addr new_saddr;
  __be16 new_sport = flow->vip_port;
  __u32 csum_off = l4_off + be_l4_csum_off(proto);
  /* UDP over IPv6 must carry a checksum: a computed 0 is sent as 0xffff (RFC 8200 8.1), which
   * BPF_F_MARK_MANGLED_0 does (a received 0 never gets here: be_egress_v6 leaves such a reply as it is). */
  __u64 mangle = be_l4_mangle_flags(proto);

  be_copy16((__u8 *)&new_saddr, flow->vip);
  __s64 diff = bpf_csum_diff((__be32 *)old_saddr, 16, (__be32 *)&new_saddr, 16, 0);
  if (diff < 0 ||
      bpf_l4_csum_replace(skb, csum_off, 0, (__u32)diff, BPF_F_PSEUDO_HDR | mangle) < 0 ||
      bpf_l4_csum_replace(skb, csum_off, old_sport, new_sport, mangle | sizeof(new_sport)) < 0 ||
      bpf_skb_store_bytes(skb, BE_IP6_SADDR_OFF, &new_saddr, sizeof(new_saddr), 0) < 0 ||
      bpf_skb_store_bytes(skb, l4_off + offsetof(struct be_ports, src), &new_sport, sizeof(new_sport), 0) < 0) {
    be_count(BE_STAT_REWRITE_FAIL);
    return TC_ACT_SHOT;
  }
  be_count(BE_STAT_REPLY6_REWRITE);
  return TC_ACT_OK;
}

/* An ICMPv4 error sent by this node about a packet of an ipopt flow quotes the request as the node received
 * it (client -> real:target port). The client knows that flow as client -> VIP:port, so the quoted
 * destination, and the error's own source, become the VIP. Layout: outer IPv4 (ihl 5 expected from the
 * stack), ICMP header (8), quoted IPv4 header (ihl 5), first 8 bytes of the quoted transport header. */
static __always_inline int be_rewrite_icmp4(struct __sk_buff *skb, const struct iphdr *outer, __u32 icmp_off)
{
  struct be_icmphdr icmp;
  struct iphdr in;
  struct be_ports ports;
  __u32 in_off = icmp_off + sizeof(struct be_icmphdr);
  __u32 in_l4_off = in_off + sizeof(struct iphdr);
  __u32 icmp_csum_off = icmp_off + offsetof(struct be_icmphdr, checksum);

  if (bpf_skb_load_bytes(skb, icmp_off, &icmp, sizeof(icmp)) < 0)
    return TC_ACT_OK;
  if (icmp.type != BE_ICMP_DEST_UNREACH && icmp.type != BE_ICMP_TIME_EXCEEDED && icmp.type != BE_ICMP_PARAMETERPROB)
    return TC_ACT_OK;
  if (bpf_skb_load_bytes(skb, in_off, &in, sizeof(in)) < 0 || in.ihl != 5 || be_l4_csum_off(in.protocol) < 0)
    return TC_ACT_OK;
  if (bpf_skb_load_bytes(skb, in_l4_off, &ports, sizeof(ports)) < 0)
    return TC_ACT_OK;
  /* The quoted packet went client -> us: its source is the flow's client, its destination this real. */
  struct be_conn_value *flow = be_find_flow(4, in.protocol, &in.saddr, &in.daddr, ports.src, ports.dst);
  if (!flow)
    return TC_ACT_OK;

  __be32 vip;
  __be16 vip_port = flow->vip_port;
  be_copy4((__u8 *)&vip, flow->vip);

  /* Quoted header: destination and its checksum; the ICMP checksum covers both changes (no pseudo header). */
  __be16 old_in_check = in.check;
  __be32 old_in_daddr = in.daddr;
  in.daddr = vip;
  in.check = 0;
  in.check = be_ip4_header_csum(&in);
  if (bpf_l4_csum_replace(skb, icmp_csum_off, old_in_daddr, vip, sizeof(vip)) < 0 ||
      bpf_l4_csum_replace(skb, icmp_csum_off, old_in_check, in.check, sizeof(in.check)) < 0 ||
      bpf_l4_csum_replace(skb, icmp_csum_off, ports.dst, vip_port, sizeof(vip_port)) < 0 ||
      bpf_skb_store_bytes(skb, in_off, &in, sizeof(in), 0) < 0 ||
      bpf_skb_store_bytes(skb, in_l4_off + offsetof(struct be_ports, dst), &vip_port, sizeof(vip_port), 0) < 0)
    goto fail;

  /* The error itself comes from the VIP when this real sent it (a router on the way keeps its own address). */
  if (outer->saddr == old_in_daddr) {
    if (bpf_l3_csum_replace(skb, BE_IP4_CSUM_OFF, outer->saddr, vip, sizeof(vip)) < 0 ||
        bpf_skb_store_bytes(skb, BE_IP4_SADDR_OFF, &vip, sizeof(vip), 0) < 0)
      goto fail;
  }
  be_count(BE_STAT_ICMP4_REWRITE);
  return TC_ACT_OK;
fail:
  be_count(BE_STAT_REWRITE_FAIL);
  return TC_ACT_SHOT;
}

/* ICMPv6 errors: same translation; the ICMPv6 checksum has a pseudo header, so the outer source change
 * counts too. Quoted packet: fixed IPv6 header then the transport header (no extension headers). */
static __always_inline int be_rewrite_icmp6(struct __sk_buff *skb, const struct ipv6hdr *outer, __u32 icmp_off)
{
  struct be_icmphdr icmp;
  struct ipv6hdr in;
  struct be_ports ports;
  __u32 in_off = icmp_off + sizeof(struct be_icmphdr);
  __u32 in_l4_off = in_off + sizeof(struct ipv6hdr);
  __u32 csum_off = icmp_off + offsetof(struct be_icmphdr, checksum);

  if (bpf_skb_load_bytes(skb, icmp_off, &icmp, sizeof(icmp)) < 0)
    return TC_ACT_OK;
  if (icmp.type != BE_ICMP6_DEST_UNREACH && icmp.type != BE_ICMP6_PKT_TOOBIG &&
      icmp.type != BE_ICMP6_TIME_EXCEED && icmp.type != BE_ICMP6_PARAMPROB)
    return TC_ACT_OK;
  if (bpf_skb_load_bytes(skb, in_off, &in, sizeof(in)) < 0 || be_l4_csum_off(in.nexthdr) < 0)
    return TC_ACT_OK;
  if (bpf_skb_load_bytes(skb, in_l4_off, &ports, sizeof(ports)) < 0)
    return TC_ACT_OK;
  struct be_conn_value *flow = be_find_flow(6, in.nexthdr, &in.saddr, &in.daddr, ports.src, ports.dst);
  if (!flow)
    return TC_ACT_OK;

  struct in6_addr vip;
  __be16 vip_port = flow->vip_port;
  be_copy16((__u8 *)&vip, flow->vip);

  __s64 diff = bpf_csum_diff((__be32 *)&in.daddr, 16, (__be32 *)&vip, 16, 0);
  if (diff < 0 || bpf_l4_csum_replace(skb, csum_off, 0, (__u32)diff, 0) < 0 ||
      bpf_l4_csum_replace(skb, csum_off, ports.dst, vip_port, sizeof(vip_port)) < 0 ||
      bpf_skb_store_bytes(skb, in_off + offsetof(struct ipv6hdr, daddr), &vip, sizeof(vip), 0) < 0 ||
      bpf_skb_store_bytes(skb, in_l4_off + offsetof(struct be_ports, dst), &vip_port, sizeof(vip_port), 0) < 0)
    goto fail;

  if (be_addr6_equal(&outer->saddr, &in.daddr)) {
    diff = bpf_csum_diff((__be32 *)&outer->saddr, 16, (__be32 *)&vip, 16, 0);
    if (diff < 0 || bpf_l4_csum_replace(skb, csum_off, 0, (__u32)diff, BPF_F_PSEUDO_HDR) < 0 ||
        bpf_skb_store_bytes(skb, BE_IP6_SADDR_OFF, &vip, sizeof(vip), 0) < 0)
      goto fail;
  }
  be_count(BE_STAT_ICMP6_REWRITE);
  return TC_ACT_OK;
fail:
  be_count(BE_STAT_REWRITE_FAIL);
  return TC_ACT_SHOT;
}

static __always_inline int be_egress_v4(struct __sk_buff *skb)
{
  struct iphdr iph;
  struct be_ports ports;

  if (bpf_skb_load_bytes(skb, BE_L3_OFF, &iph, sizeof(iph)) < 0 || iph.ihl < 5)
    return TC_ACT_OK;
  /* Only a whole IPv4 packet is translated (the stack sends nothing else; this keeps a damaged one as it is). A GSO
   * packet's total length never exceeds the skb (BIG TCP writes 0). */
  if (iph.version != 4 || bpf_ntohs(iph.tot_len) > be_l3_bytes(skb))
    return TC_ACT_OK;
  if (iph.frag_off & bpf_htons(BE_IP_FRAG_MASK))
    return TC_ACT_OK;
  __u32 l4_off = BE_L3_OFF + iph.ihl * 4;
  if (iph.protocol == BE_IPPROTO_ICMP)
    return iph.ihl == 5 ? be_rewrite_icmp4(skb, &iph, l4_off) : TC_ACT_OK;
  if (be_l4_csum_off(iph.protocol) < 0)
    return TC_ACT_OK;
  if (bpf_skb_load_bytes(skb, l4_off, &ports, sizeof(ports)) < 0)
    return TC_ACT_OK;
  /* A reply goes real -> client: its destination is the flow's client, its source this real. */
  struct be_conn_value *flow = be_find_flow(4, iph.protocol, &iph.daddr, &iph.saddr, ports.dst, ports.src);
  if (!flow)
    return TC_ACT_OK;
  return be_rewrite_reply4(skb, l4_off, iph.protocol, iph.saddr, ports.src, flow);
}

static __always_inline int be_egress_v6(struct __sk_buff *skb)
{
  struct ipv6hdr ip6;
  struct be_ports ports;
  __u32 l4_off = BE_L3_OFF + sizeof(struct ipv6hdr);

  if (bpf_skb_load_bytes(skb, BE_L3_OFF, &ip6, sizeof(ip6)) < 0)
    return TC_ACT_OK;
  if (ip6.version != 6 || sizeof(ip6) + bpf_ntohs(ip6.payload_len) > be_l3_bytes(skb))
    return TC_ACT_OK;
  if (ip6.nexthdr == BE_IPPROTO_ICMPV6)
    return be_rewrite_icmp6(skb, &ip6, l4_off);
  if (be_l4_csum_off(ip6.nexthdr) < 0)
    return TC_ACT_OK;
  if (bpf_skb_load_bytes(skb, l4_off, &ports, sizeof(ports)) < 0)
    return TC_ACT_OK;
  struct be_conn_value *flow = be_find_flow(6, ip6.nexthdr, &ip6.daddr, &ip6.saddr, ports.dst, ports.src);
  if (!flow)
    return TC_ACT_OK;
  /* A UDP checksum of 0 is invalid over IPv6 (RFC 8200 8.1): such a reply is damaged and leaves as it is. Rewritten
   * it would leave from the VIP still carrying 0 (an incremental update cannot give it a checksum). */
  if (ip6.nexthdr == BE_IPPROTO_UDP) {
    __sum16 check;

    if (bpf_skb_load_bytes(skb, l4_off + offsetof(struct udphdr, check), &check, sizeof(check)) < 0 || !check)
      return TC_ACT_OK;
  }
  return be_rewrite_reply6(skb, l4_off, ip6.nexthdr, &ip6.saddr, ports.src, flow);
}

BE_PROGRAM(backend_egress)(struct __sk_buff *skb)
{
  void *data = (void *)(long)skb->data;
  void *data_end = (void *)(long)skb->data_end;
  struct ethhdr *eth = data;

  be_count(BE_STAT_TX_PACKETS);
  if ((void *)(eth + 1) > data_end)
    return TC_ACT_OK;
  if (eth->h_proto == bpf_htons(BE_ETH_P_IP))
    return be_egress_v4(skb);
  if (eth->h_proto == bpf_htons(BE_ETH_P_IPV6))
    return be_egress_v6(skb);
  return TC_ACT_OK;
}

#ifdef BE_CAPTURE
SEC("tc")
int backend_ingress(struct __sk_buff *skb)
{
  lb_cap_enter(skb);
  lb_cap_all(skb);
  int verdict = backend_ingress_body(skb);

  lb_cap_exit(skb, verdict, LB_CAP_HOOK_TC_INGRESS);
  return verdict;
}

SEC("tc")
int backend_egress(struct __sk_buff *skb)
{
  lb_cap_enter(skb);
  lb_cap_all(skb);
  int verdict = backend_egress_body(skb);

  lb_cap_exit(skb, verdict, LB_CAP_HOOK_TC_EGRESS);
  return verdict;
}
#endif

char _license[] SEC("license") = "GPL";
