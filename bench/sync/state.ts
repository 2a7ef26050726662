// bench/sync's shared pieces: the data-plane state both lb nodes apply (one dsr-l2 VIP over three reals with
// permanent neighbours in the bench namespace), the SYN the new-flow harness varies, and how a synced entry maps
// back to the index of the flow the harness made (bench/xdp/snat_vary.c: source port 1024 + i % 64000, last
// byte of the source address 1 + i / 64000).
import { makeState } from '../../test/lib/lb-state.js';
import { LAB } from '../../test/lib/xdp-lab.js';
import { TCP_FLAGS, frame, ipPacket } from '../../test/lib/packets.js';
import type { DesiredState } from '../../src/render/state.js';

export const SYNC_VIP = '203.0.113.10';
export const SYNC_PORTS = { 'lb-a': 7946, 'lb-b': 7947 } as const;
/** A bench-only peer secret (32 bytes, base64): the channel authenticates every message as in production. */
export const SYNC_SECRET = 'u3Jq0m2pVt8cXb6wZk4yNf1rHs9dLg7eAo5iPj3qRkM=';
/** The connection table of both nodes (the scan walks its buckets, so its size, not only its entries, sets a round's cost). */
export const SYNC_CT_ENTRIES = 262_144;

export function syncBenchState(node: string): DesiredState {
  const s = makeState({ reals: { 1: '198.51.100.11', 2: '198.51.100.12', 3: '198.51.100.13' }, addresses: [LAB.lbA.v4], hashSeed: 1,
    conntrackMaxEntries: SYNC_CT_ENTRIES, services: [{ id: 1, vip: SYNC_VIP, forwarding: 'dsr-l2', ring: [1, 2, 3, 1, 2, 3, 1] }] });
  return { ...s, node };
}

/** The SYN the harness turns into a new flow every iteration (54 bytes, as the restore harnesses expect). */
export function newFlowPacket(): Buffer {
  return frame({ dst: LAB.lbA.mac, src: LAB.clientMac }, ipPacket({ src: '192.0.2.1', dst: SYNC_VIP, l4: { tcp: { sport: 1024, dport: 80, flags: TCP_FLAGS.SYN } } }));
}

/** The harness's flow index of a client address and port, or null for a flow it did not make. */
export function flowIndex(src: string, sport: number): number | null {
  const m = /^192\.0\.2\.(\d+)$/.exec(src);
  if (!m || sport < 1024 || sport >= 1024 + 64000) return null;
  return (Number(m[1]) - 1) * 64000 + (sport - 1024);
}
