// SPDX-License-Identifier: Apache-2.0
/* A program the verifier must reject (packet read without a bounds check):
 * used by test/netns/libbpf.test.ts to check that load errors carry the verifier log. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

SEC("xdp")
int xdp_unchecked(struct xdp_md *ctx)
{
	unsigned char *data = (unsigned char *)(long)ctx->data;
	return data[20] == 7 ? XDP_DROP : XDP_PASS;
}
