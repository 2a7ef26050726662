// SPDX-License-Identifier: GPL-2.0
/* Sends every frame back out of the interface it arrived on. Run with BPF_F_TEST_XDP_LIVE_FRAMES it makes the
 * driver really transmit a probe frame the way xdp_lb's XDP_TX does, so the loader can see whether the interface
 * forwards XDP_TX at all (src/bpf/xdp-forwarding.ts, docs/datapath.md "Native XDP"). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

SEC("xdp")
int xdp_tx_probe(struct xdp_md *ctx)
{
	return XDP_TX;
}
