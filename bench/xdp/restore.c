// SPDX-License-Identifier: GPL-2.0
/* Bench harness: BPF_PROG_TEST_RUN with repeat > 1 reuses one buffer, so a program that encapsulates
 * would see its own output from the second iteration on. This program puts the original packet back
 * (head moved back by the growth, bytes rewritten from the `original` map) and tail-calls the program
 * under test (slot 0 of `target`). Its own cost is measured with the empty program as target. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

#define BENCH_PKT_LEN 54 /* Ethernet + IPv4 + TCP without options or payload */

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u8[BENCH_PKT_LEN]);
} original SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} target SEC(".maps");

SEC("xdp")
int xdp_restore(struct xdp_md *ctx)
{
	__u32 zero = 0;
	__u8 *orig = bpf_map_lookup_elem(&original, &zero);
	int grown = (int)(ctx->data_end - ctx->data) - BENCH_PKT_LEN;

	if (!orig)
		return XDP_ABORTED;
	if (grown && bpf_xdp_adjust_head(ctx, grown))
		return XDP_ABORTED;
	if (bpf_xdp_store_bytes(ctx, 0, orig, BENCH_PKT_LEN))
		return XDP_ABORTED;
	bpf_tail_call(ctx, &target, 0);
	return XDP_ABORTED;
}
