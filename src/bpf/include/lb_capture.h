/* SPDX-License-Identifier: GPL-2.0 */
/* Packet capture of xdp_lb_capture.o (xdp_lb.c built with -DLB_CAPTURE) and tc_backend_capture.o (tc_backend.c
 * built with -DBE_CAPTURE) for `gitlb capture`. The filters, the
 * sampling and the rate bound run here, in the program, so a frame nobody asked for costs a few compares and is
 * never copied. src/bpf/capture/record.ts decodes the record, src/bpf/capture/filter.ts writes the config.
 *
 * Per frame: lb_cap_enter (xdp_lb's first step) resets this CPU's scratch; lb_cap_packet (right after lb_parse,
 * before anything rewrites the frame) applies the address filters (VIP, client prefix) and copies the frame's
 * first bytes as received; the packet path notes the real it chose (LB_CAP_REAL) and every counter it moved
 * (LB_CAP_REASON, from lb_count and lb_snat_count); lb_cap_exit applies the exit filters (verdict, real, counter),
 * then the 1-in-N sampling and the token bucket, and hands one record (this scratch: header and entry bytes)
 * plus the frame as it leaves (the XDP form of bpf_perf_event_output) to user space.
 * xdp_lb.o is built without this file: its hooks are empty macros. */
#ifndef LB_CAPTURE_H
#define LB_CAPTURE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* The same capture in xdp_lb (an xdp_md) and in the backend's TC programs (tc_backend.c built with -DBE_CAPTURE,
 * which defines LB_CAPTURE_TC: an sk_buff). Only how a frame's length and bytes are read differs. */
#ifdef LB_CAPTURE_TC
#define LB_CAP_CTX struct __sk_buff
#define LB_CAP_LEN(ctx) ((__u64)(ctx)->len)
#define LB_CAP_LOAD(ctx, buf, n) bpf_skb_load_bytes(ctx, 0, buf, n)
#else
#include "lb_structs.h"
#define LB_CAP_CTX struct xdp_md
#define LB_CAP_LEN(ctx) ((__u64)((ctx)->data_end - (ctx)->data))
#define LB_CAP_LOAD(ctx, buf, n) bpf_xdp_load_bytes(ctx, 0, buf, n)
#endif

#define LB_CAP_MAGIC 0x676c6263 /* "glbc" */
#define LB_CAP_VERSION 2
/* Bytes of each frame kept: every header gitlb writes or reads (Ethernet, two IPv6 headers, options, L4). */
#define LB_CAP_SNAPLEN 192
#define LB_CAP_MAX_MATCH 4
#define LB_CAP_MAX_REALS 8
/* counters noted per frame: lb_counters index i as bit i, lb_snat_stats index i as bit LB_CAP_SNAT_BASE + i */
#define LB_CAP_SNAT_BASE 32

/* where a record was taken (lb_cap_record.hook) */
#define LB_CAP_HOOK_XDP 0
#define LB_CAP_HOOK_TC_INGRESS 1
#define LB_CAP_HOOK_TC_EGRESS 2

#define LB_CAP_F_ENABLED 1
#define LB_CAP_F_ENTRY 2 /* copy the frame as received too (not only as it leaves) */

/* an address filter: (addr & mask) == addr of the given family, and the port / protocol when not 0 */
struct lb_cap_match {
	__u32 addr[4];
	__u32 mask[4];
	__be16 port;
	__u8 proto;
	__u8 family;
};

/* lb_cap_config[0], written by `gitlb capture` before the program is swapped in */
struct lb_cap_config {
	__u32 flags;
	__u32 sample_n;       /* 1 in sample_n of the frames matching every filter (0, 1: all) */
	__u64 counters;       /* noted counters, any of these (0: any) */
	__u32 verdicts;       /* bit per XDP action (0: any) */
	__u8 n_vips;          /* destination filters (the VIP), any of them; 0: any destination */
	__u8 n_clients;       /* source filters (the client), any of them; 0: any source */
	__u8 n_reals;         /* the real chosen, any of them; 0: any (or none) */
	__u8 pad;
	struct lb_cap_match vips[LB_CAP_MAX_MATCH];
	struct lb_cap_match clients[LB_CAP_MAX_MATCH];
	__u32 reals[LB_CAP_MAX_REALS];
	__u64 token_ns;       /* token bucket: ns of credit per captured frame (1e9 / rate); 0: no bound */
	__u64 bucket_ns;      /* the most credit the bucket holds (burst * token_ns) */
};

/* What user space receives: this header, LB_CAP_SNAPLEN bytes of which entry_cap are the frame as received,
 * then exit_cap bytes of the frame as it leaves. */
struct lb_cap_record {
	__u32 magic;
	__u16 version;
	__u16 hook;           /* LB_CAP_HOOK_*: which program */
	__s32 verdict;        /* the XDP action (the TC action for a backend's program) */
	__u32 real_id;        /* the real the packet path chose; 0: none */
	__u64 counters;       /* every counter the packet path moved for this frame (bits as lb_cap_config.counters;
			       * for a backend's programs the be_stats indexes) */
	__u32 entry_len;      /* the frame's length as received */
	__u32 entry_cap;
	__u32 exit_len;       /* the frame's length as it leaves */
	__u32 exit_cap;
	__u64 ts_ns;          /* bpf_ktime_get_ns at exit */
	__u8 entry[LB_CAP_SNAPLEN];
};

struct lb_cap_scratch {
	struct lb_cap_record rec;
	__u32 candidate;      /* the address filters let this frame through */
	__u32 pad;
};

/* user-space-visible outcome counters (lb_cap_stats, per CPU; names in src/bpf/capture/index.ts) */
enum lb_cap_stat {
	LB_CAP_STAT_SEEN = 0,       /* frames through the capture build */
	LB_CAP_STAT_MATCHED,        /* frames that matched every filter */
	LB_CAP_STAT_SAMPLED_OUT,    /* matched, not picked by the 1-in-N sampling */
	LB_CAP_STAT_RATE_LIMITED,   /* matched and picked, over the token bucket: not captured */
	LB_CAP_STAT_CAPTURED,       /* handed to the perf buffer */
	LB_CAP_STAT_OUTPUT_FAILED,  /* the perf buffer refused the record (full, or nobody reads this CPU) */
	LB_CAP_STAT_MAX,
};

struct lb_cap_bucket {
	struct bpf_spin_lock lock;
	__u32 pad;
	__u64 credit_ns;
	__u64 last_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} lb_cap_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_cap_config);
} lb_cap_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_cap_scratch);
} lb_cap_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LB_CAP_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} lb_cap_stats SEC(".maps");

/* one bucket for the node (not per CPU): the bound is what the operator asked for, whichever CPUs see traffic */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_cap_bucket);
} lb_cap_bucket SEC(".maps");

static __always_inline struct lb_cap_scratch *lb_cap_scratch_get(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&lb_cap_scratch, &zero);
}

static __always_inline void lb_cap_stat(__u32 which)
{
	__u64 *c = bpf_map_lookup_elem(&lb_cap_stats, &which);

	if (c)
		*c += 1;
}

/* LB_CAP_REASON: lb_count / lb_snat_count of this frame */
static __always_inline void lb_cap_note_counter(__u32 bit)
{
	struct lb_cap_scratch *s = lb_cap_scratch_get();

	if (s)
		s->rec.counters |= 1ULL << (bit & 63);
}

/* LB_CAP_REAL: the real the packet path chose */
static __always_inline void lb_cap_note_real(__u32 real_id)
{
	struct lb_cap_scratch *s = lb_cap_scratch_get();

	if (s)
		s->rec.real_id = real_id;
}

static __always_inline void lb_cap_enter(LB_CAP_CTX *ctx)
{
	struct lb_cap_scratch *s = lb_cap_scratch_get();

	lb_cap_stat(LB_CAP_STAT_SEEN);
	if (!s)
		return;
	s->candidate = 0;
	s->rec.real_id = 0;
	s->rec.counters = 0;
	s->rec.entry_len = (__u32)LB_CAP_LEN(ctx);
	s->rec.entry_cap = 0;
}

static __always_inline int lb_cap_match(const struct lb_cap_match *m, const __u32 *addr, __u8 family, __be16 port,
					__u8 proto)
{
	return m->family == family && (addr[0] & m->mask[0]) == m->addr[0] && (addr[1] & m->mask[1]) == m->addr[1] &&
	       (addr[2] & m->mask[2]) == m->addr[2] && (addr[3] & m->mask[3]) == m->addr[3] &&
	       (!m->port || m->port == port) && (!m->proto || m->proto == proto);
}

static __always_inline int lb_cap_any(const struct lb_cap_match *list, __u32 n, const __u32 *addr, __u8 family,
				      __be16 port, __u8 proto)
{
#pragma unroll
	for (int i = 0; i < LB_CAP_MAX_MATCH; i++)
		if (i < n && lb_cap_match(&list[i], addr, family, port, proto))
			return 1;
	return 0;
}

/* The frame passed the address filters: a candidate, and its bytes as received copied when asked for. */
static __always_inline void lb_cap_candidate(LB_CAP_CTX *ctx, const struct lb_cap_config *cfg, struct lb_cap_scratch *s)
{
	s->candidate = 1;
	if (!(cfg->flags & LB_CAP_F_ENTRY))
		return;
	__u32 len = s->rec.entry_len;
	__u32 cap = len < LB_CAP_SNAPLEN ? len : LB_CAP_SNAPLEN;

	if (cap < 1 || cap > LB_CAP_SNAPLEN)
		return;
	if (LB_CAP_LOAD(ctx, s->rec.entry, cap) == 0)
		s->rec.entry_cap = cap;
}

#ifdef LB_CAPTURE_TC
/* A backend's programs: no address filters (the command refuses them there), every frame is a candidate. */
static __always_inline void lb_cap_all(LB_CAP_CTX *ctx)
{
	__u32 zero = 0;
	struct lb_cap_config *cfg = bpf_map_lookup_elem(&lb_cap_config, &zero);
	struct lb_cap_scratch *s = lb_cap_scratch_get();

	if (cfg && s && (cfg->flags & LB_CAP_F_ENABLED))
		lb_cap_candidate(ctx, cfg, s);
}
#else
/* After lb_parse, before anything rewrites the frame: the address filters, then the frame as received. A frame
 * lb_parse could not read far enough has family 0 (and no ports): it matches no address filter. */
static __always_inline void lb_cap_packet(LB_CAP_CTX *ctx, const struct lb_packet *p)
{
	__u32 zero = 0;
	struct lb_cap_config *cfg = bpf_map_lookup_elem(&lb_cap_config, &zero);
	struct lb_cap_scratch *s = lb_cap_scratch_get();

	if (!cfg || !s || !(cfg->flags & LB_CAP_F_ENABLED))
		return;
	if (cfg->n_vips && !lb_cap_any(cfg->vips, cfg->n_vips, p->dst, p->family, p->dport, p->proto))
		return;
	if (cfg->n_clients && !lb_cap_any(cfg->clients, cfg->n_clients, p->src, p->family, p->sport, p->proto))
		return;
	lb_cap_candidate(ctx, cfg, s);
}
#endif

static __always_inline int lb_cap_take_token(const struct lb_cap_config *cfg)
{
	__u32 zero = 0;
	struct lb_cap_bucket *b = bpf_map_lookup_elem(&lb_cap_bucket, &zero);
	__u64 now = bpf_ktime_get_ns();
	int ok = 0;

	if (!b)
		return 0;
	bpf_spin_lock(&b->lock);
	if (now > b->last_ns)
		b->credit_ns += now - b->last_ns;
	b->last_ns = now;
	if (b->credit_ns > cfg->bucket_ns)
		b->credit_ns = cfg->bucket_ns;
	if (b->credit_ns >= cfg->token_ns) {
		b->credit_ns -= cfg->token_ns;
		ok = 1;
	}
	bpf_spin_unlock(&b->lock);
	return ok;
}

static __always_inline int lb_cap_real_wanted(const struct lb_cap_config *cfg, __u32 real_id)
{
#pragma unroll
	for (int i = 0; i < LB_CAP_MAX_REALS; i++)
		if (i < cfg->n_reals && cfg->reals[i] == real_id)
			return 1;
	return 0;
}

static __always_inline void lb_cap_exit(LB_CAP_CTX *ctx, int verdict, __u16 hook)
{
	__u32 zero = 0;
	struct lb_cap_scratch *s = lb_cap_scratch_get();

	if (!s || !s->candidate)
		return;
	struct lb_cap_config *cfg = bpf_map_lookup_elem(&lb_cap_config, &zero);

	if (!cfg)
		return;
	if (cfg->verdicts && !(cfg->verdicts & (1U << ((__u32)verdict & 31))))
		return;
	if (cfg->counters && !(cfg->counters & s->rec.counters))
		return;
	if (cfg->n_reals && (!s->rec.real_id || !lb_cap_real_wanted(cfg, s->rec.real_id)))
		return;
	lb_cap_stat(LB_CAP_STAT_MATCHED);
	if (cfg->sample_n > 1 && bpf_get_prandom_u32() % cfg->sample_n) {
		lb_cap_stat(LB_CAP_STAT_SAMPLED_OUT);
		return;
	}
	if (cfg->token_ns && !lb_cap_take_token(cfg)) {
		lb_cap_stat(LB_CAP_STAT_RATE_LIMITED);
		return;
	}
	__u64 len = LB_CAP_LEN(ctx);
	__u64 cap = len < LB_CAP_SNAPLEN ? len : LB_CAP_SNAPLEN;

	s->rec.magic = LB_CAP_MAGIC;
	s->rec.version = LB_CAP_VERSION;
	s->rec.hook = hook;
	s->rec.verdict = verdict;
	s->rec.exit_len = (__u32)len;
	s->rec.exit_cap = (__u32)cap;
	s->rec.ts_ns = bpf_ktime_get_ns();
	if (bpf_perf_event_output(ctx, &lb_cap_events, (cap << 32) | BPF_F_CURRENT_CPU, &s->rec, sizeof(s->rec)))
		lb_cap_stat(LB_CAP_STAT_OUTPUT_FAILED);
	else
		lb_cap_stat(LB_CAP_STAT_CAPTURED);
}

#define LB_CAP_REASON(bit) lb_cap_note_counter(bit)
#define LB_CAP_REAL(id) lb_cap_note_real(id)
#ifndef LB_CAPTURE_TC
#define LB_CAP_PACKET(ctx, p) lb_cap_packet(ctx, p)
#endif

#endif
