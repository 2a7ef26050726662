// SPDX-License-Identifier: Apache-2.0
/* Test program for the libbpf binding (test/netns/libbpf.test.ts): one map of each kind
 * the data plane uses, a struct whose layout the TS codec checks against BTF, and
 * one XDP and one TC program whose behaviour is driven by a config map so that
 * BPF_PROG_TEST_RUN can observe map writes from Node. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "GPL";

/* Layout checked from TS with checkBtfLayout(): offsets 0, 8, 12, 14, 15; size 16. */
struct selftest_flow {
	__u64 packets;
	__u32 bytes;
	__u16 port;
	__u8 proto;
	__u8 flags;
};

/* cfg[0] = XDP action to return, cfg[1] = TC action, cfg[2] = 1 to swap MACs */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u32);
} cfg SEC(".maps");

/* per-CPU packet counter: index 0 = xdp, 1 = tc */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} pcpu_cnt SEC(".maps");

/* keyed by ethertype: per-flow stats (struct value for BTF check) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct selftest_flow);
} flows SEC(".maps");

/* conntrack-like LRU map whose size tests override before load */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 128);
	__type(key, __u64);
	__type(value, __u64);
} lru SEC(".maps");

/* large array for batch benchmarks/tests */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65537);
	__type(key, __u32);
	__type(value, __u32);
} big SEC(".maps");

/* last ctx seen: [0] ingress_ifindex, [1] rx_queue_index, [2] skb mark */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u32);
} seen SEC(".maps");

struct inner_arr {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u32);
};

/* outer[0] selects the active inner table (ring switch pattern) */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 4);
	__type(key, __u32);
	__array(values, struct inner_arr);
} outer SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(max_entries, 16);
	__type(key, __u32);
	__array(values, struct inner_arr);
} outer_hash SEC(".maps");

static __always_inline __u32 cfg_get(__u32 idx, __u32 dflt)
{
	__u32 *v = bpf_map_lookup_elem(&cfg, &idx);
	return v ? *v : dflt;
}

static __always_inline void count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&pcpu_cnt, &idx);
	if (c)
		*c += 1;
}

static __always_inline void account_flow(__u32 ethertype, __u32 len)
{
	struct selftest_flow *f = bpf_map_lookup_elem(&flows, &ethertype);
	if (f) {
		__sync_fetch_and_add(&f->packets, 1);
		__sync_fetch_and_add(&f->bytes, len);
	} else {
		struct selftest_flow nf = { .packets = 1, .bytes = len, .port = 0, .proto = 0, .flags = 1 };
		bpf_map_update_elem(&flows, &ethertype, &nf, BPF_NOEXIST);
	}
}

SEC("xdp")
int xdp_selftest(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u32 k0 = 0, k1 = 1, v;

	count(0);
	v = ctx->ingress_ifindex;
	bpf_map_update_elem(&seen, &k0, &v, BPF_ANY);
	v = ctx->rx_queue_index;
	bpf_map_update_elem(&seen, &k1, &v, BPF_ANY);

	if ((void *)(eth + 1) > data_end)
		return XDP_DROP;
	account_flow(bpf_ntohs(eth->h_proto), (__u32)(data_end - data));

	if (cfg_get(2, 0)) {
		unsigned char tmp[ETH_ALEN];
		__builtin_memcpy(tmp, eth->h_dest, ETH_ALEN);
		__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
		__builtin_memcpy(eth->h_source, tmp, ETH_ALEN);
	}
	return cfg_get(0, XDP_PASS);
}

/* Returns outer[0] -> inner[0] + 1000, or 1 when no inner table is installed:
 * lets tests observe an atomic inner-map swap through BPF_PROG_TEST_RUN. */
SEC("xdp")
int xdp_inner(struct xdp_md *ctx)
{
	__u32 k = 0;
	void *inner = bpf_map_lookup_elem(&outer, &k);
	if (!inner)
		return 1;
	__u32 *v = bpf_map_lookup_elem(inner, &k);
	if (!v)
		return 1;
	return *v + 1000;
}

SEC("tc")
int tc_selftest(struct __sk_buff *skb)
{
	__u32 k2 = 2, mark = skb->mark;

	count(1);
	bpf_map_update_elem(&seen, &k2, &mark, BPF_ANY);
	account_flow(bpf_ntohs(skb->protocol), skb->len);
	return cfg_get(1, TC_ACT_OK);
}

/* A second TC program: the "someone else's filter" in attach tests. */
SEC("tc")
int tc_passthru(struct __sk_buff *skb)
{
	return TC_ACT_OK;
}
