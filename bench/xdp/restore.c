// SPDX-License-Identifier: GPL-2.0
/* Bench harness: restores the original packet before every iteration (restore_harness.h) and tail-calls the
 * program under test. Its own cost is measured with the empty program as target. */
#include "restore_harness.h"

char LICENSE[] SEC("license") = "GPL";

SEC("xdp")
int xdp_restore(struct xdp_md *ctx)
{
	if (bench_restore_packet(ctx))
		return XDP_ABORTED;
	bpf_tail_call(ctx, &target, 0);
	return XDP_ABORTED;
}
