// SPDX-License-Identifier: GPL-2.0
/* Lets every frame through. Attached to the peer of a veth it switches on the peer's NAPI, without which frames
 * that native XDP on the veth sends with XDP_TX are silently dropped; the lab attaches it to the switch ports of
 * the lb nodes (docs/lab.md, docs/datapath.md "Native XDP"). Its own object, so `ip link set ... obj` finds it. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

SEC("xdp")
int xdp_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}
