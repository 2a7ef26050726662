/* SPDX-License-Identifier: GPL-2.0 */
/* Shared by the bench harnesses (restore.c, snat_vary.c): BPF_PROG_TEST_RUN with repeat > 1 reuses one
 * buffer, so a program that encapsulates would see its own output from the second iteration on. A harness
 * puts the original packet back (head moved back by the growth, bytes rewritten from the `original` map)
 * and then tail-calls the program under test (slot 0 of `target`). */
#ifndef BENCH_RESTORE_HARNESS_H
#define BENCH_RESTORE_HARNESS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

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

/* Restores the original packet; 0 on success. */
static __always_inline int bench_restore_packet(struct xdp_md *ctx)
{
	__u32 zero = 0;
	__u8 *orig = bpf_map_lookup_elem(&original, &zero);
	int grown = (int)(ctx->data_end - ctx->data) - BENCH_PKT_LEN;

	if (!orig)
		return -1;
	if (grown && bpf_xdp_adjust_head(ctx, grown))
		return -1;
	return bpf_xdp_store_bytes(ctx, 0, orig, BENCH_PKT_LEN) ? -1 : 0;
}

#endif
