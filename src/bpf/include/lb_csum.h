/* SPDX-License-Identifier: Apache-2.0 */
/* Internet checksum helpers. All values are raw memory-order loads: one's-complement sums do not
 * care about byte order as long as every operand is in the same (memory) order. */
#ifndef LB_CSUM_H
#define LB_CSUM_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>

/* Checksums read headers written through other struct types: this type may alias them, so the compiler
 * cannot move the reads ahead of the writes (strict aliasing). */
typedef __u32 __attribute__((__may_alias__)) lb_word_t;

static __always_inline __u16 lb_csum_fold(__u64 sum)
{
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* sum of n 32-bit words of a buffer the verifier knows to be n*4 bytes long (stack) */
static __always_inline __u64 lb_csum_words(const void *buf, int n)
{
	const lb_word_t *w = buf;
	__u64 sum = 0;

#pragma unroll
	for (int i = 0; i < n; i++)
		sum += w[i];
	return sum;
}

/* Adds `len` bytes (a multiple of 4, at most max_words*4; max_words a constant) of the packet from `start` to
 * *sum; -1 when they run past data_end. */
static __always_inline int lb_csum_packet(void *start, void *data_end, __u32 len, int max_words, __u64 *sum)
{
	lb_word_t *w = start;

	for (int i = 0; i < max_words; i++) {
		if (i * 4 >= len)
			break;
		barrier_var(w);
		if ((void *)(w + 1) > data_end)
			return -1;
		*sum += *w;
		w++;
	}
	return 0;
}

/* RFC 1624 incremental update for a 32-bit field change */
static __always_inline void lb_csum_replace4(__u16 *csum, __u32 from, __u32 to)
{
	__u64 sum = (__u16)~*csum;

	sum += (__u16)~from + (__u16)~(from >> 16);
	sum += (to & 0xffff) + (to >> 16);
	*csum = lb_csum_fold(sum);
}

static __always_inline void lb_csum_replace2(__u16 *csum, __u16 from, __u16 to)
{
	__u64 sum = (__u16)~*csum;

	sum += (__u16)~from;
	sum += to;
	*csum = lb_csum_fold(sum);
}

#endif
