/* SPDX-License-Identifier: Apache-2.0 */
/* SNAT (full NAT) on the LB node, for `snat` listeners and the UDP side of `hybrid`.
 *
 *   forward  client:cport -> VIP:vport        becomes  snatAddress:sport -> real:targetPort
 *   reverse  real:targetPort -> snatAddress:sport  becomes  VIP:vport -> client:cport
 *   ICMP     an error from the real (or a router) about a NATed flow, sent to snatAddress, goes back to
 *            the client with the quoted (inner) header translated too
 *
 * Two maps hold a translation: lb_snat_fwd (the client's 5-tuple -> real and SNAT port) and lb_snat_rev
 * ((real, real port, SNAT port, proto) -> client, VIP and the flow's timestamps). The reverse entry is the
 * owner of a SNAT port: it is allocated with BPF_NOEXIST, so two flows can never share a port towards the
 * same real endpoint; a forward entry is only trusted when its reverse entry still names the same client
 * flow. Entries expire per protocol (TCP established / TCP closing after FIN or RST / UDP) against
 * the coarse monotonic clock (lb_snat_now); an expired port is reclaimed by the next allocation that probes it, and
 * src/bpf/dataplane/snat.ts sweeps the rest. When no port or no table slot is left the packet is dropped
 * and counted by reason: never a wrong translation. Spec: docs/datapath.md, section SNAT. */
#ifndef LB_SNAT_H
#define LB_SNAT_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "lb_consts.h"
#include "lb_structs.h"
#include "lb_maps.h"
#include "lb_stats.h"
#include "lb_parsing.h"
#include "lb_csum.h"
#include "lb_hashing.h"
#include "lb_encap.h"
#include "lb_icmp.h"
#include "lb_sanity.h"
#include "lb_affinity.h"
#include "lb_sync.h"

#define LB_SNAT_EEXIST 17
/* ports tried per new flow, from a start derived from the flow hash */
#define LB_SNAT_PROBES 8
#define LB_SNAT_DEFAULT_ENTRIES 65536

/* lb_snat_rev.state */
#define LB_SNAT_ST_OPEN 0
#define LB_SNAT_ST_CLOSING 1 /* FIN or RST seen in either direction: the short timeout applies */

/* ICMP error types translated back to the client */
#define LB_ICMP_TIME_EXCEEDED 11
#define LB_ICMP_PARAMETERPROB 12
#define LB_ICMPV6_DEST_UNREACH 1
#define LB_ICMPV6_TIME_EXCEED 3
#define LB_ICMPV6_PARAMPROB 4

/* lb_snat_config[0], written by src/bpf/dataplane/snat.ts */
struct lb_snat_config {
	__u8 addr6[16];
	__be32 addr4;
	__u8 has4;
	__u8 has6;
	__u16 port_min; /* host order, inclusive */
	__u16 port_max;
	__u16 pad16;
	__u32 pad32;
	__u64 tcp_established_ns;
	__u64 tcp_closing_ns;
	__u64 udp_ns;
};

/* lb_snat_fwd value; the key is the client's struct lb_flow_key (dst = VIP) */
struct lb_snat_fwd {
	__u32 real_id;
	__be16 snat_port;
	__be16 real_port;
};

/* lb_snat_rev key: what a reply from the real carries (its source, and our SNAT port as destination) */
struct lb_snat_rev_key {
	__u8 real[16];
	__be16 real_port;
	__be16 snat_port;
	__u8 proto;
	__u8 family;
	__u16 pad;
};

struct lb_snat_rev {
	__u8 client[16];
	__u8 vip[16];
	__be16 client_port;
	__be16 vip_port;
	__u32 real_id;
	__u8 state;
	__u8 owner; /* 0: this node's translation; n: another lb node's (connection-state sync), address lb_snat_owners[n] */
	__u8 pad[6];
	__u64 created_ns;
	__u64 last_seen_ns;
};

/* lb_snat_owners[n]: the SNAT addresses of the other lb nodes whose translations this node carries (written by
 * src/bpf/dataplane/flow-state.ts; owner 0 is this node, so slot 0 names no address: its `served` is the number of
 * lb_snat_served entries, the gate that spares every other packet the hash lookup while no address is served) */
#define LB_SNAT_MAX_OWNERS 256
struct lb_snat_owner {
	__u8 addr6[16];
	__be32 addr4;
	__u32 served;
};

/* lb_snat_served[address]: another lb node's SNAT address this node has taken over (that node was lost;
 * src/reconciler/flows/snat-takeover.ts): replies to it are translated here with that owner's translations. */
struct lb_snat_served_key {
	__u8 addr[16];
	__u8 family;
	__u8 pad[3];
};

/* per-reason SNAT counters (lb_snat_stats); names in src/bpf/dataplane/snat.ts SNAT_COUNTER_NAMES */
enum lb_snat_counter {
	LB_SNAT_CNT_NEW = 0,             /* new translation created */
	LB_SNAT_CNT_HIT,                 /* forward packet of a known translation */
	LB_SNAT_CNT_REPLY,               /* reply from a real translated back to the client */
	LB_SNAT_CNT_ICMP,                /* ICMP error about a NATed flow translated back to the client */
	LB_SNAT_CNT_PASS_LOCAL,          /* to the SNAT address but no translation: the node's own traffic */
	LB_SNAT_CNT_PASS_EXPIRED,        /* reply to an expired translation: not translated, passed */
	LB_SNAT_CNT_RECLAIMED,           /* an expired translation's port given to a new flow */
	LB_SNAT_CNT_DROP_PORTS,          /* no free SNAT port within the probes: dropped */
	LB_SNAT_CNT_DROP_TABLE_FULL,     /* NAT table full: dropped */
	LB_SNAT_CNT_DROP_FAMILY,         /* real of the other address family (no NAT46/64): dropped */
	LB_SNAT_CNT_PASS_FRAGMENT,       /* IP fragment to the SNAT address: never translated, passed to the kernel */
	LB_SNAT_CNT_REPICKED,            /* TCP SYN on a translation whose real the table no longer gives: replaced */
	LB_SNAT_CNT_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_snat_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_snat_config SEC(".maps");

/* Plain (not LRU) hash maps: eviction must never silently break a live flow; a full table drops new flows. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LB_SNAT_DEFAULT_ENTRIES);
	__type(key, struct lb_flow_key);
	__type(value, struct lb_snat_fwd);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_snat_fwd SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LB_SNAT_DEFAULT_ENTRIES);
	__type(key, struct lb_snat_rev_key);
	__type(value, struct lb_snat_rev);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_snat_rev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LB_SNAT_MAX_OWNERS);
	__type(key, __u32);
	__type(value, struct lb_snat_owner);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_snat_owners SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LB_SNAT_MAX_OWNERS);
	__type(key, struct lb_snat_served_key);
	__type(value, __u32); /* owner slot */
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_snat_served SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LB_SNAT_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_snat_stats SEC(".maps");

static __always_inline void lb_snat_count(__u32 reason)
{
	__u64 *c = bpf_map_lookup_elem(&lb_snat_stats, &reason);

	if (c)
		*c += 1;
	LB_CAP_REASON(LB_CAP_SNAT_BASE + reason);
}

static __always_inline int lb_snat_drop(__u32 snat_reason)
{
	lb_snat_count(snat_reason);
	return XDP_DROP;
}

/* to the SNAT address but not a translated flow: the node's own traffic, for the kernel */
static __always_inline int lb_snat_pass_local(void)
{
	lb_snat_count(LB_SNAT_CNT_PASS_LOCAL);
	return XDP_PASS;
}

static __always_inline int lb_snat_pass_fragment(void)
{
	lb_snat_count(LB_SNAT_CNT_PASS_FRAGMENT);
	return XDP_PASS;
}

static __always_inline int lb_snat_drop_lb(__u32 lb_reason)
{
	lb_count(lb_reason);
	return XDP_DROP;
}

static __always_inline int lb_snat_addr_eq(const void *a, const void *b, __u8 family)
{
	const __u32 *x = a, *y = b;

	if (family == 4)
		return x[0] == y[0];
	return x[0] == y[0] && x[1] == y[1] && x[2] == y[2] && x[3] == y[3];
}

/* The node's SNAT address of `family` as 4 words (IPv4 in the first), or 0 when none is configured. */
static __always_inline int lb_snat_addr_of(const struct lb_snat_config *cfg, __u8 family, __u32 *out)
{
	if (family == 4) {
		if (!cfg->has4)
			return 0;
		out[0] = cfg->addr4;
		return 1;
	}
	if (!cfg->has6)
		return 0;
	__builtin_memcpy(out, cfg->addr6, 16);
	return 1;
}

/* The translations' clock: CLOCK_MONOTONIC as of the last tick (bpf_ktime_get_coarse_ns, a few ms behind at most),
 * not bpf_ktime_get_ns: the precise clock cost about 20 ns per packet on both paths here (bench/xdp/snat-variants),
 * and the timeouts it measures are 10 s and more. Marks written by the daemon (connection-state sync) come from the
 * precise clock and may lie up to a tick ahead of it: lb_snat_expired and lb_snat_touch only ever move forward. */
static __always_inline __u64 lb_snat_now(void)
{
	return bpf_ktime_get_coarse_ns();
}

static __always_inline int lb_snat_expired(const struct lb_snat_rev *rv, __u8 proto,
					   const struct lb_snat_config *cfg, __u64 now)
{
	__u64 timeout = proto == IPPROTO_UDP ? cfg->udp_ns
			: rv->state == LB_SNAT_ST_CLOSING ? cfg->tcp_closing_ns : cfg->tcp_established_ns;

	return now > rv->last_seen_ns && now - rv->last_seen_ns > timeout;
}

/* A packet of the flow was seen: refresh, and enter the closing state on FIN/RST. A SYN reaches this only when
 * the table still gives the flow the translation's real (lb_snat_forward), so reopening is a new connection to
 * a real of the current table, or a retransmitted SYN. Returns 1 when the state changed (closing, or reopened):
 * the other lb nodes' copies must follow it (lb_snat_publish). */
static __always_inline int lb_snat_touch(struct lb_snat_rev *rv, const struct lb_packet *p, __u64 now)
{
	__u8 state;

	/* written once per clock tick at most, not per packet: both directions of a flow touch this entry, often on
	 * different CPUs, and a store per packet would move its cache line between them; forward only (a synced mark
	 * may be ahead of this clock by a tick) */
	if (now > rv->last_seen_ns)
		rv->last_seen_ns = now;
	if (p->proto != IPPROTO_TCP)
		return 0;
	if (p->tcp_flags & (LB_TCP_FLAG_FIN | LB_TCP_FLAG_RST))
		state = LB_SNAT_ST_CLOSING;
	else if ((p->tcp_flags & (LB_TCP_FLAG_SYN | LB_TCP_FLAG_ACK)) == LB_TCP_FLAG_SYN)
		state = LB_SNAT_ST_OPEN;
	else
		return 0;
	if (rv->state == state)
		return 0;
	rv->state = state;
	return 1;
}

/* A new translation, or one whose state changed (closing, reopened), goes to the other lb nodes (lb_sync.h): its
 * reverse entry, key and value. */
static __always_inline void lb_snat_publish(const struct lb_snat_rev_key *rk, const struct lb_snat_rev *rv)
{
	__u32 zero = 0;
	struct lb_config *cfg = bpf_map_lookup_elem(&lb_config, &zero);

	if (cfg)
		lb_sync_publish(cfg, 1, LB_SYNC_EV_SNAT, rk, rv);
}

/* Keys are written in 64-bit words from registers (as xdp_lb.c's lb_flow_key_of): the kernel hashes a key in 32-bit
 * words and copies it in 64-bit ones, and a load spanning several narrower stores cannot be store-forwarded (a
 * stall per word). The keys live in per-CPU scratch (8-byte aligned fields), where the compiler cannot merge
 * narrow stores for us. Little-endian target (xdp_lb.c checks). */
static __always_inline void lb_snat_put16(void *to, const void *from)
{
	const __u32 *f = from;
	__u64 *w = to;

	w[0] = f[0] | ((__u64)f[1] << 32);
	w[1] = f[2] | ((__u64)f[3] << 32);
}

static __always_inline void lb_snat_fwd_key_of(struct lb_flow_key *k, const void *client, const void *vip,
					       __be16 cport, __be16 vport, __u8 proto, __u8 family)
{
	lb_snat_put16(k->src, client);
	lb_snat_put16(k->dst, vip);
	/* sport, dport (as on the wire), proto, family, pad 0 */
	*(__u64 *)&k->sport = (__u64)cport | ((__u64)vport << 16) | ((__u64)proto << 32) | ((__u64)family << 40);
}

/* real, then real_port, snat_port (as on the wire), proto, family, pad 0 */
static __always_inline void lb_snat_rev_key_of(struct lb_snat_rev_key *k, const void *real, __be16 real_port,
					       __be16 snat_port, __u8 proto, __u8 family)
{
	lb_snat_put16(k->real, real);
	*(__u64 *)&k->real_port = (__u64)real_port | ((__u64)snat_port << 16) | ((__u64)proto << 32) |
				  ((__u64)family << 40);
}

/* the SNAT port of a key being probed (lb_snat_alloc): the whole tail word again */
static __always_inline void lb_snat_rev_key_port(struct lb_snat_rev_key *k, __be16 snat_port)
{
	*(__u64 *)&k->real_port = (__u64)k->real_port | ((__u64)snat_port << 16) | ((__u64)k->proto << 32) |
				  ((__u64)k->family << 40);
}

/* Delete the forward entry of the flow a reverse entry belonged to, if it still points at that entry
 * (the client may since have been given a new translation, which must stay). */
static __always_inline void lb_snat_forget(const struct lb_snat_rev_key *rk, const struct lb_snat_rev *rv,
					   struct lb_flow_key *fk /* the caller's per-CPU scratch, not the stack */)
{
	lb_snat_fwd_key_of(fk, rv->client, rv->vip, rv->client_port, rv->vip_port, rk->proto, rk->family);
	struct lb_snat_fwd *fv = bpf_map_lookup_elem(&lb_snat_fwd, fk);

	if (fv && fv->snat_port == rk->snat_port && fv->real_port == rk->real_port && fv->real_id == rv->real_id)
		bpf_map_delete_elem(&lb_snat_fwd, fk);
}

/* Claims a SNAT port for rk (real, real port, proto, family filled in): up to LB_SNAT_PROBES ports of the
 * range from a hash-derived start. A port is free when no reverse entry holds it towards
 * this real endpoint, or when the entry holding it has expired. Returns 0 (rk->snat_port set) or the
 * LB_SNAT_CNT_DROP_* reason. */
static __always_inline int lb_snat_alloc(struct lb_snat_rev_key *rk, const struct lb_snat_rev *nv,
					 const struct lb_snat_config *cfg, __u32 hash, __u64 now,
					 struct lb_flow_key *forget_fk)
{
	__u32 min = cfg->port_min, max = cfg->port_max;
	int full = 0;

	if (min == 0 || max < min)
		return LB_SNAT_CNT_DROP_PORTS;
	__u32 range = max - min + 1;
	__u32 start = hash % range;

	/* small ranges are probed one port after the other (all of them); larger ones at triangular offsets
	 * (0, 1, 3, 6, ...), which keeps runs of taken ports from growing into long clusters */
	int linear = range <= LB_SNAT_PROBES;

	for (__u32 i = 0; i < LB_SNAT_PROBES; i++) {
		if (i >= range)
			break;
		__u32 off = (start + (linear ? i : i * (i + 1) / 2)) % range;

		lb_snat_rev_key_port(rk, bpf_htons((__u16)(min + off)));
		long rc = bpf_map_update_elem(&lb_snat_rev, rk, nv, BPF_NOEXIST);

		if (rc == 0)
			return 0;
		if (rc != -LB_SNAT_EEXIST)
			full = 1; /* no room for a new key; an expired one can still be taken over */
		struct lb_snat_rev *old = bpf_map_lookup_elem(&lb_snat_rev, rk);

		if (old && lb_snat_expired(old, rk->proto, cfg, now)) {
			lb_snat_forget(rk, old, forget_fk);
			if (bpf_map_update_elem(&lb_snat_rev, rk, nv, BPF_EXIST) == 0) {
				lb_snat_count(LB_SNAT_CNT_RECLAIMED);
				return 0;
			}
		}
	}
	return full ? LB_SNAT_CNT_DROP_TABLE_FULL : LB_SNAT_CNT_DROP_PORTS;
}

/* Rewrite source and destination (address and port) of a TCP/UDP packet in place, with incremental
 * updates of the IPv4 header checksum and the L4 checksum (pseudo-header + ports). */
static __always_inline int lb_snat_rewrite(struct xdp_md *ctx, const struct lb_packet *p, const __u32 *src,
					   __be16 sport, const __u32 *dst, __be16 dport)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 l3_off = p->l3_off;
	__u32 l4_off = p->l4_off;
	__u16 *csum = 0;
	__be16 *ports;

	if (l3_off > 18 || l4_off > 18 + LB_IPV4_MAX_HDR_LEN)
		return -1;
	ports = data + l4_off;
	if ((void *)(ports + 4) > data_end)
		return -1;
	if (p->proto == IPPROTO_TCP) {
		struct tcphdr *th = (void *)ports;

		if ((void *)(th + 1) > data_end)
			return -1;
		csum = &th->check;
	} else if (ports[3] || p->family == 6) {
		csum = &ports[3]; /* UDP: 0 means "no checksum" (IPv4 only) */
	}

	if (p->family == 4) {
		struct iphdr *iph = data + l3_off;

		if ((void *)(iph + 1) > data_end)
			return -1;
		lb_csum_replace4(&iph->check, iph->saddr, src[0]);
		lb_csum_replace4(&iph->check, iph->daddr, dst[0]);
		if (csum) {
			lb_csum_replace4(csum, iph->saddr, src[0]);
			lb_csum_replace4(csum, iph->daddr, dst[0]);
		}
		iph->saddr = src[0];
		iph->daddr = dst[0];
	} else {
		struct ipv6hdr *ip6 = data + l3_off;

		if ((void *)(ip6 + 1) > data_end)
			return -1;
		lb_word_t *s = (void *)&ip6->saddr;
		lb_word_t *d = (void *)&ip6->daddr;

#pragma unroll
		for (int i = 0; i < 4; i++) {
			if (csum) {
				lb_csum_replace4(csum, s[i], src[i]);
				lb_csum_replace4(csum, d[i], dst[i]);
			}
			s[i] = src[i];
			d[i] = dst[i];
		}
	}
	if (csum) {
		lb_csum_replace2(csum, ports[0], sport);
		lb_csum_replace2(csum, ports[1], dport);
		if (p->proto == IPPROTO_UDP && *csum == 0)
			*csum = 0xffff;
	}
	ports[0] = sport;
	ports[1] = dport;
	return 0;
}

/* Next hops towards clients, kept per CPU like the reals' (lb_next_hop in lb_encap.h): bpf_fib_lookup was about a
 * third of a translated reply's cost (bench/xdp/snat-variants). Direct-mapped by a hash of the client address and
 * tagged with the whole address, its family and the input interface, so a slot shared by two clients only costs a
 * lookup, never a wrong next hop. Freshness is the reals' cache's: a result is used for LB_NH_CACHE_JIFFIES at most,
 * so a changed neighbour MAC or route is followed within that time (0.4 s at HZ=250), and a failed lookup is never
 * kept (the packet is dropped and counted as before, and the next one asks the kernel again). */
#define LB_SNAT_CLIENT_NH_SLOTS 1024 /* a power of two */

struct lb_snat_client_nh {
	__u64 expires;    /* bpf_jiffies64() deadline */
	__u32 client[4];  /* tag: the client (IPv4: first word, the rest 0) */
	__u32 in_ifindex; /* tag: the lookup's input interface */
	__u32 family;     /* tag */
	struct lb_next_hop nh;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LB_SNAT_CLIENT_NH_SLOTS);
	__type(key, __u32);
	__type(value, struct lb_snat_client_nh);
} lb_snat_client_nh SEC(".maps");

/* The slot of a client: its address words folded, the upper half folded onto the lower (an IPv4 address's last
 * byte, its most varied, sits in the top bits of the word), then Fibonacci hashing to the slot bits. */
static __always_inline __u32 lb_snat_client_slot(const __u32 *client)
{
	__u32 h = client[0] ^ client[1] ^ client[2] ^ client[3];

	h ^= h >> 16;
	return (h * 0x9e3779b1u) >> (32 - 10);
}

_Static_assert(LB_SNAT_CLIENT_NH_SLOTS == 1 << 10, "lb_snat_client_slot yields 10 bits");

/* The next hop towards a client (4 words, IPv4 in the first, the others 0), or 0 with *reason set (an LB_CNT_DROP_*
 * reason). The result points into this CPU's cache slot (XDP runs with migration disabled). */
static __always_inline const struct lb_next_hop *lb_snat_client_next_hop(struct xdp_md *ctx, __u8 family,
									  const __u32 *client, __u32 *reason)
{
	__u32 slot = lb_snat_client_slot(client);
	struct lb_snat_client_nh *c = bpf_map_lookup_elem(&lb_snat_client_nh, &slot);
	__u64 now = bpf_jiffies64();

	if (!c) { /* cannot happen: slot < LB_SNAT_CLIENT_NH_SLOTS */
		*reason = LB_CNT_DROP_FIB;
		return 0;
	}
	if (c->client[0] == client[0] && c->client[1] == client[1] && c->client[2] == client[2] &&
	    c->client[3] == client[3] && c->family == family && c->in_ifindex == ctx->ingress_ifindex && now < c->expires)
		return &c->nh;
	/* fills c->nh only on success: a failed lookup leaves the slot (and its tags) as they were */
	int rc = lb_fib_next_hop(ctx, family, client, 0, &c->nh);

	if (rc) {
		*reason = rc;
		return 0;
	}
	__builtin_memcpy(c->client, client, 16);
	c->family = family;
	c->in_ifindex = ctx->ingress_ifindex;
	c->expires = now + LB_NH_CACHE_JIFFIES;
	return &c->nh;
}

static __always_inline int lb_snat_send(struct xdp_md *ctx, const struct lb_next_hop *nh, const struct lb_packet *p)
{
	__u32 reason = 0;
	int rc = lb_send(ctx, nh, p->l3_off, p->family == 4 ? bpf_htons(LB_ETH_P_IP) : bpf_htons(LB_ETH_P_IPV6),
			 &reason);

	if (rc < 0)
		return lb_snat_drop_lb(LB_CNT_DROP_ADJUST);
	lb_count(reason);
	return rc;
}

/* The real the service's table gives the packet's flow now (the DSR path's choice on a miss), and the node's
 * hash seed for the port probe. Returns 0 (real, real id and seed set) or the LB_CNT_DROP_* reason. */
static __always_inline __u32 lb_snat_pick(const struct lb_packet *p, __u32 service_id, int use_sport,
					  __u32 affinity_s, struct lb_real **real, __u32 *real_id, __u32 *seed,
					  struct lb_affinity_key *ak)
{
	__u32 zero = 0, reason = 0;
	struct lb_config *lcfg = bpf_map_lookup_elem(&lb_config, &zero);

	if (!lcfg)
		return LB_CNT_DROP_NO_SERVICE;
	*seed = lcfg->hash_seed;
	/* session affinity (lb_affinity.h): the client's remembered real while the table still names it */
	__u64 now = 0;

	if (affinity_s) {
		*real = lb_affinity_lookup(p, service_id, affinity_s, ak, &now, real_id, 1);
		if (*real)
			return 0;
	}
	*real = lb_ring_pick(service_id, lb_flow_hash(p, use_sport, *seed), real_id, &reason);
	if (*real && affinity_s)
		lb_affinity_remember_inline(ak, *real_id, (*real)->slot, now);
	return *real ? 0 : reason;
}

/* Per-CPU scratch of lb_snat_forward: its keys and new entries (not pinned; nothing outlives a packet). */
struct lb_snat_scratch {
	struct lb_flow_key fk __attribute__((aligned(8)));
	struct lb_flow_key forget_fk __attribute__((aligned(8))); /* lb_snat_forget's key */
	struct lb_snat_rev_key rk __attribute__((aligned(8))); /* published whole (lb_sync.h): word-aligned */
	struct lb_snat_rev nv;
	struct lb_snat_fwd nf;
	__u32 snat_addr[4], real_addr[4];
	struct lb_affinity_key ak __attribute__((aligned(8))); /* the client's session-affinity key (lb_affinity.h) */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_snat_scratch);
} lb_snat_scratch SEC(".maps");

/* Forward path of a snat listener (xdp_lb.c; a BPF-to-BPF subprogram, one copy out of the DSR path's code; `vip`
 * is the listener's entry as xdp_lb read it). Service traffic is already counted (in the
 * service's lb_service_stats slot, stats_slot).
 *
 * Which packets may reuse a translation (docs/datapath.md, SNAT "New connections"): every packet of an
 * established flow keeps its translation, whatever the table says now (its real is still a real of the node);
 * a TCP SYN (ACK clear) opens a connection and goes where the table sends it, as on the DSR path: the
 * translation is kept only when its real is the one the table gives the flow (a retransmitted SYN reaches the
 * same real from the same SNAT port), otherwise it is replaced; a UDP flow is new once its translation expired. */
static __attribute__((noinline)) int lb_snat_forward(struct xdp_md *ctx, const struct lb_packet *p,
						     const struct lb_vip_value *vip)
{
	__u32 service_id = vip->service_id;
	__u32 stats_slot = vip->stats_slot;
	__be16 target_port = vip->target_port;
	int use_sport = vip->flags & LB_VIP_F_HASH_SRC_PORT;
	__u32 affinity_s = vip->affinity_s;
	__u32 zero = 0;
	/* the keys, the new entries and the addresses live in this CPU's scratch (lb_snat_scratch), not on the
	 * stack: with xdp_lb's own frame, the call chain's stack must stay within the kernel's 512 bytes */
	struct lb_snat_scratch *scr = bpf_map_lookup_elem(&lb_snat_scratch, &zero);

	if (!scr)
		return lb_snat_drop_lb(LB_CNT_DROP_ADJUST);
	struct lb_snat_config *cfg = bpf_map_lookup_elem(&lb_snat_config, &zero);
	__u32 *snat_addr = scr->snat_addr;

	__builtin_memset(snat_addr, 0, 16);

	/* no SNAT address of this family on the node: the kernel gets the packet, as before XDP SNAT */
	if (!cfg || !lb_snat_addr_of(cfg, p->family, snat_addr)) {
		lb_count(LB_CNT_PASS_SNAT);
		return XDP_PASS;
	}
	__u64 now = lb_snat_now();
	struct lb_flow_key *fk = &scr->fk;
	struct lb_snat_rev_key *rk = &scr->rk;

	__builtin_memset(rk, 0, sizeof(*rk));
	struct lb_real *real = 0;
	__u32 real_id = 0;
	int new_flow = 0;
	struct lb_snat_rev *rv = 0;

	lb_snat_fwd_key_of(fk, p->src, p->dst, p->sport, p->dport, p->proto, p->family);

	/* 1. a known translation, trusted only while its reverse entry still names this client flow */
	struct lb_snat_fwd *fv = bpf_map_lookup_elem(&lb_snat_fwd, fk);

	if (fv) {
		real_id = fv->real_id;
		real = bpf_map_lookup_elem(&lb_reals, &real_id);
		if (real) {
			lb_snat_rev_key_of(rk, real->addr, fv->real_port, fv->snat_port, p->proto, p->family);
			rv = bpf_map_lookup_elem(&lb_snat_rev, rk);
			if (rv && rv->real_id == real_id && rv->client_port == p->sport && rv->vip_port == p->dport &&
			    lb_snat_addr_eq(rv->client, p->src, p->family) && lb_snat_addr_eq(rv->vip, p->dst, p->family)) {
				if (lb_snat_expired(rv, p->proto, cfg, now)) {
					bpf_map_delete_elem(&lb_snat_rev, rk);
					real = 0;
				}
			} else {
				real = 0;
			}
		}
		if (!real)
			bpf_map_delete_elem(&lb_snat_fwd, fk);
	}

	/* 2. the table's choice, read for a new flow and for a TCP SYN (ACK clear) only: a translation hit of an
	 * established flow never pays for it */
	int syn = p->proto == IPPROTO_TCP && (p->tcp_flags & (LB_TCP_FLAG_SYN | LB_TCP_FLAG_ACK)) == LB_TCP_FLAG_SYN;
	struct lb_real *pick = 0;
	__u32 pick_id = 0, seed = 0;

	if (!real || syn) {
		__u32 reason = lb_snat_pick(p, service_id, use_sport, affinity_s, &pick, &pick_id, &seed, &scr->ak);

		if (reason)
			return lb_snat_drop_lb(reason);
		/* a new connection on a known 5-tuple whose real the table no longer gives it: replaced */
		if (real && (real_id != pick_id || rk->real_port != target_port)) {
			bpf_map_delete_elem(&lb_snat_rev, rk);
			bpf_map_delete_elem(&lb_snat_fwd, fk);
			lb_snat_count(LB_SNAT_CNT_REPICKED);
			real = 0;
		}
	}

	if (real && rv) {
		if (lb_snat_touch(rv, p, now))
			lb_snat_publish(rk, rv);
		lb_snat_count(LB_SNAT_CNT_HIT);
		/* another lb node's translation (the flow moved here): it keeps that node's address, whose replies go there */
		if (rv->owner) {
			__u32 owner = rv->owner;
			struct lb_snat_owner *o = bpf_map_lookup_elem(&lb_snat_owners, &owner);

			if (!o)
				return lb_snat_drop_lb(LB_CNT_DROP_ADJUST);
			if (p->family == 4)
				snat_addr[0] = o->addr4;
			else
				__builtin_memcpy(snat_addr, o->addr6, 16);
		}
	} else {
		/* 3. new translation to the real the table picked, then a port is claimed */
		real = pick;
		real_id = pick_id;
		if (!real)
			return lb_snat_drop_lb(LB_CNT_DROP_NO_REAL);
		if (real->family != p->family)
			return lb_snat_drop(LB_SNAT_CNT_DROP_FAMILY);

		struct lb_snat_rev *nv = &scr->nv;

		__builtin_memset(nv, 0, sizeof(*nv));
		nv->client_port = p->sport;
		nv->vip_port = p->dport;
		nv->real_id = real_id;
		nv->created_ns = now;
		nv->last_seen_ns = now;
		__builtin_memcpy(nv->client, p->src, 16);
		__builtin_memcpy(nv->vip, p->dst, 16);
		if (p->proto == IPPROTO_TCP && (p->tcp_flags & (LB_TCP_FLAG_FIN | LB_TCP_FLAG_RST)))
			nv->state = LB_SNAT_ST_CLOSING;
		lb_snat_rev_key_of(rk, real->addr, target_port, 0, p->proto, p->family);

		int rc = lb_snat_alloc(rk, nv, cfg, lb_flow_hash(p, 1, seed), now, &scr->forget_fk);

		if (rc)
			return lb_snat_drop(rc);
		struct lb_snat_fwd *nf = &scr->nf;

		nf->real_id = real_id;
		nf->snat_port = rk->snat_port;
		nf->real_port = target_port;

		if (bpf_map_update_elem(&lb_snat_fwd, fk, nf, BPF_ANY)) {
			bpf_map_delete_elem(&lb_snat_rev, rk);
			return lb_snat_drop(LB_SNAT_CNT_DROP_TABLE_FULL);
		}
		lb_snat_count(LB_SNAT_CNT_NEW);
		lb_snat_publish(rk, nv);
		new_flow = 1;
		/* xdp_lb.c counted the service's packet on entry; whether it starts a connection is known only here */
		struct lb_traffic *st = bpf_map_lookup_elem(&lb_service_stats, &stats_slot);

		if (st)
			st->new_flows += 1;
	}
	lb_real_traffic_add(real->slot, p, new_flow);
	LB_CAP_REAL(real_id);

	__u32 nh_reason = 0;
	const struct lb_next_hop *nh = lb_next_hop(ctx, real, real_id, 0, &nh_reason);

	if (!nh)
		return lb_snat_drop_lb(nh_reason);
	__u32 *real_addr = scr->real_addr;

	__builtin_memcpy(real_addr, real->addr, 16);
	if (lb_snat_rewrite(ctx, p, snat_addr, rk->snat_port, real_addr, rk->real_port))
		return lb_snat_drop_lb(LB_CNT_DROP_ADJUST);
	return lb_snat_send(ctx, nh, p);
}

/* Per-CPU scratch of lb_snat_reply and lb_snat_icmp (not pinned; nothing outlives a packet). */
struct lb_snat_icmp_scratch {
	__u32 isrc[4], idst[4], client[4], vip[4], osrc[4], odst[4];
	struct lb_flow_key forget_fk __attribute__((aligned(8))); /* lb_snat_forget's key */
	struct lb_snat_rev_key rk __attribute__((aligned(8))); /* published whole (lb_sync.h): word-aligned */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_snat_icmp_scratch);
} lb_snat_icmp_scratch SEC(".maps");

/* A reply from a real to snatAddress:port (owner 0), or to a lost node's address this node serves (owner n). */
static __attribute__((noinline)) int lb_snat_reply(struct xdp_md *ctx, struct lb_packet *p,
					 const struct lb_snat_config *cfg, __u32 owner)
{
	__u32 zero = 0;
	struct lb_snat_icmp_scratch *scr = bpf_map_lookup_elem(&lb_snat_icmp_scratch, &zero);

	if (!scr)
		return lb_snat_drop_lb(LB_CNT_DROP_ADJUST);
	/* the key, the addresses and the next hop live in this CPU's scratch (the call chain's 512-byte bound) */
	struct lb_snat_rev_key *rk = &scr->rk;

	lb_snat_rev_key_of(rk, p->src, p->sport, p->dport, p->proto, p->family);
	struct lb_snat_rev *rv = bpf_map_lookup_elem(&lb_snat_rev, rk);

	/* another lb node's translation holds this (real, port): its replies go to that node's address, not ours */
	if (!rv || rv->owner != owner)
		return lb_snat_pass_local();
	__u64 now = lb_snat_now();

	if (lb_snat_expired(rv, p->proto, cfg, now)) {
		lb_snat_forget(rk, rv, &scr->forget_fk);
		bpf_map_delete_elem(&lb_snat_rev, rk);
		lb_snat_count(LB_SNAT_CNT_PASS_EXPIRED);
		return XDP_PASS;
	}
	if (lb_snat_touch(rv, p, now))
		lb_snat_publish(rk, rv);
	LB_CAP_REAL(rv->real_id); /* gitlb capture: a reply from this real */
	__u32 *client = scr->client, *vip = scr->vip;
	__be16 cport = rv->client_port, vport = rv->vip_port;

	__builtin_memcpy(client, rv->client, 16);
	__builtin_memcpy(vip, rv->vip, 16);
	/* translated: it leaves with exactly its IP length (a passed frame stays byte for byte as received) */
	if (lb_trim_to_ip(ctx, p))
		return lb_snat_drop_lb(LB_CNT_DROP_ADJUST);

	__u32 nh_reason = 0;
	const struct lb_next_hop *nh = lb_snat_client_next_hop(ctx, p->family, client, &nh_reason);

	if (!nh)
		return lb_snat_drop_lb(nh_reason);
	if (lb_snat_rewrite(ctx, p, vip, vport, client, cport))
		return lb_snat_drop_lb(LB_CNT_DROP_ADJUST);
	lb_snat_count(LB_SNAT_CNT_REPLY);
	return lb_snat_send(ctx, nh, p);
}


/* An ICMP / ICMPv6 error sent to snatAddress. The quoted packet is one we sent:
 * snatAddress:snat_port -> real:real_port. Translated back: the outer destination becomes the client (the
 * outer source, when it is the real itself, the VIP), and the quote becomes client:cport -> VIP:vport, with
 * the quoted IPv4 and L4 checksums, the ICMP checksum and the outer IPv4 checksum updated incrementally. */
static __attribute__((noinline)) int lb_snat_icmp(struct xdp_md *ctx, struct lb_packet *p,
					const struct lb_snat_config *cfg, const __u32 *snat_addr, __u32 owner)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 l3_off = p->l3_off;
	__u32 l4_off = p->l4_off;
	__u32 inner_l4;
	__u8 inner_proto;

	if (l3_off > 18 || l4_off > 18 + LB_IPV4_MAX_HDR_LEN)
		return lb_snat_pass_local();
	/* The quote ends where the IP packet ends, not where the frame does: bytes after it (an Ethernet trailer)
	 * are not part of the error and must neither complete a short quote nor enter a checksum. parse checked
	 * that the IP packet lies within the frame. */
	if (p->l3_len > 0xffff)
		return lb_snat_pass_local();
	void *ip_end = data + l3_off + p->l3_len;

	if (ip_end > data_end)
		return lb_snat_pass_local();
	__u8 *icmp = data + l4_off;

	if ((void *)(icmp + 8) > data_end)
		return lb_snat_pass_local();
	__u8 type = icmp[0];

	if (p->family == 4) {
		if (type != LB_ICMP_DEST_UNREACH && type != LB_ICMP_TIME_EXCEEDED && type != LB_ICMP_PARAMETERPROB)
			return lb_snat_pass_local();
		struct iphdr *in4 = (void *)(icmp + 8);

		if ((void *)(in4 + 1) > data_end || (void *)(in4 + 1) > ip_end || in4->version != 4 || in4->ihl < 5)
			return lb_snat_pass_local();
		inner_proto = in4->protocol;
		inner_l4 = l4_off + 8 + in4->ihl * 4;
	} else {
		if (type != LB_ICMPV6_DEST_UNREACH && type != LB_ICMPV6_PKT_TOOBIG && type != LB_ICMPV6_TIME_EXCEED &&
		    type != LB_ICMPV6_PARAMPROB)
			return lb_snat_pass_local();
		struct ipv6hdr *in6 = (void *)(icmp + 8);

		if ((void *)(in6 + 1) > data_end || (void *)(in6 + 1) > ip_end)
			return lb_snat_pass_local();
		inner_proto = in6->nexthdr;
		inner_l4 = l4_off + 8 + LB_IPV6_HDR_LEN;
	}
	if (inner_proto != IPPROTO_TCP && inner_proto != IPPROTO_UDP)
		return lb_snat_pass_local();
	if (inner_l4 > 18 + LB_IPV4_MAX_HDR_LEN + 8 + LB_IPV4_MAX_HDR_LEN)
		return lb_snat_pass_local();
	__be16 *iports = data + inner_l4;

	if ((void *)(iports + 4) > data_end || (void *)(iports + 4) > ip_end)
		return lb_snat_pass_local();

	/* the quoted packet: src = snat address:snat port, dst = real:real port */
	__u32 zero = 0;
	struct lb_snat_icmp_scratch *scr = bpf_map_lookup_elem(&lb_snat_icmp_scratch, &zero);

	if (!scr)
		return lb_snat_drop_lb(LB_CNT_DROP_ADJUST);
	/* addresses and keys live in this CPU's scratch, not on the stack (the call chain's 512-byte bound) */
	__builtin_memset(scr, 0, sizeof(*scr));
	__u32 *isrc = scr->isrc, *idst = scr->idst;

	if (p->family == 4) {
		struct iphdr *in4 = (void *)(icmp + 8);

		if ((void *)(in4 + 1) > data_end)
			return lb_snat_pass_local();
		isrc[0] = in4->saddr;
		idst[0] = in4->daddr;
	} else {
		struct ipv6hdr *in6 = (void *)(icmp + 8);

		if ((void *)(in6 + 1) > data_end)
			return lb_snat_pass_local();
		__builtin_memcpy(isrc, &in6->saddr, 16);
		__builtin_memcpy(idst, &in6->daddr, 16);
	}
	if (!lb_snat_addr_eq(isrc, snat_addr, p->family))
		return lb_snat_pass_local();
	struct lb_snat_rev_key *rk = &scr->rk;

	lb_snat_rev_key_of(rk, idst, iports[1], iports[0], inner_proto, p->family);

	struct lb_snat_rev *rv = bpf_map_lookup_elem(&lb_snat_rev, rk);

	if (!rv || rv->owner != owner)
		return lb_snat_pass_local();
	if (lb_snat_expired(rv, inner_proto, cfg, lb_snat_now())) {
		lb_snat_count(LB_SNAT_CNT_PASS_EXPIRED);
		return XDP_PASS;
	}
	LB_CAP_REAL(rv->real_id); /* gitlb capture: an error about a flow of this real */
	__u32 *client = scr->client, *vip = scr->vip, *osrc = scr->osrc, *odst = scr->odst;
	__be16 cport = rv->client_port, vport = rv->vip_port;

	__builtin_memcpy(client, rv->client, 16);
	__builtin_memcpy(vip, rv->vip, 16);
	__builtin_memcpy(osrc, p->src, 16);
	__builtin_memcpy(odst, client, 16);
	if (lb_snat_addr_eq(osrc, idst, p->family)) /* sent by the real itself: the client must see the VIP */
		__builtin_memcpy(osrc, vip, 16);
	/* translated: it leaves with exactly its IP length (trailer bytes never reached the quote: bounded above) */
	if (lb_trim_to_ip(ctx, p))
		return lb_snat_drop_lb(LB_CNT_DROP_ADJUST);

	__u32 nh_reason = 0;
	const struct lb_next_hop *nh = lb_snat_client_next_hop(ctx, p->family, client, &nh_reason);

	if (!nh)
		return lb_snat_drop_lb(nh_reason);

	/* re-derive pointers for the verifier after the helper call */
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	ip_end = data + l3_off + (p->l3_len & 0xffff);
	icmp = data + (l4_off & 0x7f);
	iports = data + (inner_l4 & 0xff);
	if ((void *)(icmp + 8) > data_end || (void *)(iports + 4) > data_end)
		return lb_snat_drop_lb(LB_CNT_DROP_ADJUST);
	__u16 *icsum = (__u16 *)(icmp + 2);
	__u16 old_ports[2] = { iports[0], iports[1] };

	/* quoted L4 checksum: UDP's is in the 8 quoted bytes; TCP's only when the quote is long enough */
	__u16 *l4csum = 0;

	if (inner_proto == IPPROTO_UDP) {
		if (iports[3] || p->family == 6)
			l4csum = &iports[3];
	} else if ((void *)(iports + 9) <= data_end && (void *)(iports + 9) <= ip_end) {
		l4csum = &iports[8];
	}
	if (l4csum) {
		__u16 before = *l4csum;

		for (int i = 0; i < 4; i++) {
			if (p->family == 4 && i > 0)
				break;
			lb_csum_replace4(l4csum, isrc[i], client[i]);
			lb_csum_replace4(l4csum, idst[i], vip[i]);
		}
		lb_csum_replace2(l4csum, old_ports[0], cport);
		lb_csum_replace2(l4csum, old_ports[1], vport);
		if (inner_proto == IPPROTO_UDP && *l4csum == 0)
			*l4csum = 0xffff;
		lb_csum_replace2(icsum, before, *l4csum);
	}
	lb_csum_replace2(icsum, old_ports[0], cport);
	lb_csum_replace2(icsum, old_ports[1], vport);
	iports[0] = cport;
	iports[1] = vport;

	if (p->family == 4) {
		struct iphdr *in4 = (void *)(icmp + 8);
		struct iphdr *oh = data + l3_off;

		if ((void *)(in4 + 1) > data_end || (void *)(oh + 1) > data_end)
			return lb_snat_drop_lb(LB_CNT_DROP_ADJUST);
		__u16 before = in4->check;

		lb_csum_replace4(&in4->check, in4->saddr, client[0]);
		lb_csum_replace4(&in4->check, in4->daddr, vip[0]);
		lb_csum_replace2(icsum, before, in4->check);
		lb_csum_replace4(icsum, in4->saddr, client[0]);
		lb_csum_replace4(icsum, in4->daddr, vip[0]);
		in4->saddr = client[0];
		in4->daddr = vip[0];
		lb_csum_replace4(&oh->check, oh->saddr, osrc[0]);
		lb_csum_replace4(&oh->check, oh->daddr, odst[0]);
		oh->saddr = osrc[0];
		oh->daddr = odst[0];
	} else {
		struct ipv6hdr *in6 = (void *)(icmp + 8);
		struct ipv6hdr *oh = data + l3_off;

		if ((void *)(in6 + 1) > data_end || (void *)(oh + 1) > data_end)
			return lb_snat_drop_lb(LB_CNT_DROP_ADJUST);
		lb_word_t *is = (void *)&in6->saddr, *id = (void *)&in6->daddr;
		lb_word_t *os = (void *)&oh->saddr, *od = (void *)&oh->daddr;

#pragma unroll
		for (int i = 0; i < 4; i++) {
			/* ICMPv6's checksum covers the outer pseudo-header too */
			lb_csum_replace4(icsum, is[i], client[i]);
			lb_csum_replace4(icsum, id[i], vip[i]);
			lb_csum_replace4(icsum, os[i], osrc[i]);
			lb_csum_replace4(icsum, od[i], odst[i]);
			is[i] = client[i];
			id[i] = vip[i];
			os[i] = osrc[i];
			od[i] = odst[i];
		}
	}
	lb_snat_count(LB_SNAT_CNT_ICMP);
	return lb_snat_send(ctx, nh, p);
}

/* IPv4 MF or fragment offset set, or an IPv6 fragment header right after the fixed header. */
static __always_inline int lb_snat_is_fragment(struct xdp_md *ctx, const struct lb_packet *p)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;

	if (p->family == 6)
		return p->proto == LB_IPPROTO_FRAGMENT;
	if (p->l3_off > 18)
		return 0;
	struct iphdr *iph = data + p->l3_off;

	if ((void *)(iph + 1) > data_end)
		return 0;
	return (iph->frag_off & bpf_htons(LB_IP_MF | LB_IP_OFFSET)) != 0;
}

/* The owner slot of a lost node's SNAT address this node serves (lb_snat_served), 0 when `p->dst` is none. One
 * array read while no address is served, the hash lookup only while one is. */
static __always_inline __u32 lb_snat_served_owner(const struct lb_packet *p)
{
	__u32 zero = 0;
	struct lb_snat_owner *gate = bpf_map_lookup_elem(&lb_snat_owners, &zero);

	if (!gate || !gate->served)
		return 0;
	struct lb_snat_served_key k = { .family = p->family };

	__builtin_memcpy(k.addr, p->dst, 16);
	__u32 *slot = bpf_map_lookup_elem(&lb_snat_served, &k);

	return slot && *slot > 0 && *slot < LB_SNAT_MAX_OWNERS ? *slot : 0;
}

/* The translation back (a BPF-to-BPF subprogram: packets to the SNAT address are a path of their own, so its
 * code is one copy, out of the VIP path's instruction stream). `owner` 0: our own SNAT address (from cfg);
 * otherwise the lost node's address `p->dst` that this node serves. */
static __always_inline int lb_snat_reverse_to(struct xdp_md *ctx, struct lb_packet *p, int verdict,
							const struct lb_snat_config *cfg, __u32 owner)
{
	__u32 snat_addr[4] = {};

	if (owner)
		__builtin_memcpy(snat_addr, p->dst, 16);
	else if (!lb_snat_addr_of(cfg, p->family, snat_addr))
		return -1;
	/* nothing from a martian source or through a group MAC is translated (lb_sanity.h) */
	__u32 bad = lb_hostile_reason(ctx, p);

	if (bad)
		return lb_snat_drop_lb(bad);

	/* a fragment carries no (or not all of the) ports: the kernel reassembles it, nothing is translated */
	if (verdict == LB_PARSE_BAD_IF_VIP && lb_snat_is_fragment(ctx, p))
		return lb_snat_pass_fragment();
	int icmp = verdict == LB_PARSE_PASS &&
		   ((p->family == 4 && p->proto == LB_IPPROTO_ICMP) || (p->family == 6 && p->proto == LB_IPPROTO_ICMPV6));

	if (verdict != LB_PARSE_OK && !icmp)
		return lb_snat_pass_local();
	return icmp ? lb_snat_icmp(ctx, p, cfg, snat_addr, owner) : lb_snat_reply(ctx, p, cfg, owner);
}

/* Early hook (xdp_lb.c, right after parsing): packets to a configured SNAT address are replies of NATed
 * flows, ICMP errors about them, or the node's own traffic (passed). Returns an XDP action, or -1 when
 * the packet is not addressed to a SNAT address (the LB path continues). Inline: the test costs a packet to
 * another address one array lookup (and one hash lookup while a lost node's address is served), no call. */
static __always_inline int lb_snat_reverse(struct xdp_md *ctx, struct lb_packet *p, int verdict)
{
	__u32 zero = 0;
	__u32 snat_addr[4] = {};
	__u32 owner = 0;

	if (p->family != 4 && p->family != 6)
		return -1;
	struct lb_snat_config *cfg = bpf_map_lookup_elem(&lb_snat_config, &zero);

	if (!cfg)
		return -1;
	if (!lb_snat_addr_of(cfg, p->family, snat_addr) || !lb_snat_addr_eq(p->dst, snat_addr, p->family)) {
		owner = lb_snat_served_owner(p);
		if (!owner)
			return -1;
	}
	return lb_snat_reverse_to(ctx, p, verdict, cfg, owner);
}

#endif
