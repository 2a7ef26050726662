// SPDX-License-Identifier: GPL-2.0
/* bench/e2e's floor for L2 DSR: the least an XDP balancer can do per packet in the lab. A packet to FLOOR_VIP:
 * FLOOR_PORT/TCP gets the destination MAC of one of the backends (chosen by client address and port, so a flow
 * keeps its backend and both lb nodes agree) and leaves with XDP_TX; everything else goes up to the kernel.
 * No connection table, no ring, no counters, no checks beyond the bounds the verifier wants: what gitlb's
 * dsr/l2 costs above this row is the balancer, what this row costs below direct is the lab's extra hop through
 * an XDP_TX on a veth. The VIP, port and MACs are compiled in (-D, see bench.ts). Never used outside the bench.
 * With FLOOR_ROUTER_MAC also a reply leg: a packet from FLOOR_VIP:FLOOR_PORT/TCP (a backend's answer, when the
 * backends route the clients via the lb nodes: the path SNAT's replies take) gets the router's MAC and leaves with
 * XDP_TX too, so the floor of a balancer that carries the replies can be measured as well (floor.ts). */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "GPL";

static const unsigned char backend_macs[][ETH_ALEN] = { FLOOR_MACS };
#define FLOOR_N (sizeof(backend_macs) / sizeof(backend_macs[0]))

SEC("xdp")
int xdp_l2_floor(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);

	if ((void *)(ip + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
#ifdef FLOOR_ROUTER_MAC
	if (ip->saddr == bpf_htonl(FLOOR_VIP) && ip->protocol == IPPROTO_TCP && ip->ihl == 5) {
		static const unsigned char router_mac[ETH_ALEN] = FLOOR_ROUTER_MAC;
		struct tcphdr *th = (void *)(ip + 1);

		if ((void *)(th + 1) > data_end || th->source != bpf_htons(FLOOR_PORT))
			return XDP_PASS;
		__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
		__builtin_memcpy(eth->h_dest, router_mac, ETH_ALEN);
		return XDP_TX;
	}
#endif
	if (ip->daddr != bpf_htonl(FLOOR_VIP) || ip->protocol != IPPROTO_TCP || ip->ihl != 5)
		return XDP_PASS;
	struct tcphdr *tcp = (void *)(ip + 1);

	if ((void *)(tcp + 1) > data_end || tcp->dest != bpf_htons(FLOOR_PORT))
		return XDP_PASS;
	__u32 h = bpf_ntohl(ip->saddr) * 2654435761u ^ bpf_ntohs(tcp->source) * 40503u;
	__u32 i = (h >> 16) % FLOOR_N;

	/* the verifier does not follow the modulo: a bound it can see (the barrier keeps clang from dropping it) */
	asm volatile("" : "+r"(i));
	if (i >= FLOOR_N)
		return XDP_PASS;

	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, backend_macs[i], ETH_ALEN);
	return XDP_TX;
}
