// SPDX-License-Identifier: GPL-2.0
/* Bench harness for SNAT new translations: like restore.c it puts the original packet back before every
 * iteration and tail-calls the program under test, but it also gives every iteration a new client flow
 * (source port and the low byte of the source address from a per-CPU counter), so each run of the LB
 * program allocates a SNAT port and inserts both NAT entries. The checksums are left stale: the LB does not
 * verify them and only measures the path. */
#include "restore_harness.h"

char LICENSE[] SEC("license") = "GPL";

#define SRC_LOW_OFF (14 + 15) /* last byte of the IPv4 source address */
#define SPORT_OFF (14 + 20)

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} flow_counter SEC(".maps");

SEC("xdp")
int xdp_snat_vary(struct xdp_md *ctx)
{
	__u32 zero = 0;
	__u32 *n = bpf_map_lookup_elem(&flow_counter, &zero);

	if (!n || bench_restore_packet(ctx))
		return XDP_ABORTED;

	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u8 *p = data;

	if ((void *)(p + BENCH_PKT_LEN) > data_end)
		return XDP_ABORTED;
	__u32 i = *n;

	*n = i + 1;
	__u32 port = 1024 + i % 64000;

	p[SRC_LOW_OFF] = (__u8)(1 + (i / 64000) % 120);
	p[SPORT_OFF] = port >> 8;
	p[SPORT_OFF + 1] = port & 0xff;
	bpf_tail_call(ctx, &target, 0);
	return XDP_ABORTED;
}
