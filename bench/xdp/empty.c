// SPDX-License-Identifier: GPL-2.0
/* The harness floor: an XDP program that does nothing but return XDP_PASS. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

SEC("xdp")
int xdp_empty(struct xdp_md *ctx)
{
	return XDP_PASS;
}
