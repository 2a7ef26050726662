/* SPDX-License-Identifier: GPL-2.0 */
/* Packet samples of xdp_lb_monitor.o (xdp_lb.c built with -DLB_MONITOR) for `gitlb monitor`: a fixed record
 * followed by the frame's first bytes, through the XDP form of bpf_perf_event_output (the upper 32 bits of the
 * flags copy that many bytes of the packet after the record). src/bpf/monitor/sample.ts decodes the record. */
#ifndef LB_MONITOR_H
#define LB_MONITOR_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define LB_MONITOR_MAGIC 0x676c626d /* "glbm" */
#define LB_MONITOR_ENTRY 0
#define LB_MONITOR_EXIT 1
/* Bytes of each frame copied: every header gitlb writes or reads (Ethernet, two IPv6 headers, options, L4). */
#define LB_MONITOR_SNAPLEN 192

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} lb_monitor_events SEC(".maps");

struct lb_monitor_meta {
	__u32 magic;
	__u8 point;     /* LB_MONITOR_ENTRY: as received; LB_MONITOR_EXIT: as it leaves */
	__u8 pad[3];
	__s32 verdict;  /* exit: the XDP action; entry: -1 */
	__u32 pkt_len;  /* the frame's whole length */
	__u32 cap_len;  /* bytes that follow the record */
	__u64 ts_ns;    /* bpf_ktime_get_ns */
};

static __always_inline void lb_monitor_sample(struct xdp_md *ctx, __u8 point, __s32 verdict)
{
	__u64 len = (__u64)(ctx->data_end - ctx->data);
	__u64 cap = len < LB_MONITOR_SNAPLEN ? len : LB_MONITOR_SNAPLEN;
	struct lb_monitor_meta meta = {
		.magic = LB_MONITOR_MAGIC,
		.point = point,
		.verdict = verdict,
		.pkt_len = (__u32)len,
		.cap_len = (__u32)cap,
		.ts_ns = bpf_ktime_get_ns(),
	};

	bpf_perf_event_output(ctx, &lb_monitor_events, (cap << 32) | BPF_F_CURRENT_CPU, &meta, sizeof(meta));
}

#endif
