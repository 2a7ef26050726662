// One LB data plane on real pinned maps with one `snat` service (VIP port 80 -> the real's 8080), for kernel tests of
// what user space writes into the NAT and connection tables while xdp_lb may write them too (snat-delete,
// flow-merge). Registers the file's before/after hooks; the data plane is open between them.
import test from 'ava';
import { rmSync } from 'node:fs';
import { openLbDataPlane, type LbDataPlaneHandle } from '../../src/bpf/dataplane/index.js';
import { makeState } from './lb-state.js';
import { applyTo } from './converge.js';

export const SNAT_VIP = '203.0.113.52';
export const SNAT_REAL = '198.51.100.42';

/** Opens the data plane before the file's tests (pins under a name of this process and `tag`), closes and unpins it
 * after; returns the handle's getter. The real has id 7 and fills service 2's ring. */
export function withSnatDataPlane(tag: string): () => LbDataPlaneHandle {
  const pin = `/sys/fs/bpf/glb${process.pid}-${tag}`;
  let dp: LbDataPlaneHandle | undefined;
  test.before(async () => {
    rmSync(pin, { recursive: true, force: true });
    dp = await openLbDataPlane({ pinRoot: pin });
    await applyTo(dp, { ...makeState({ reals: { 7: SNAT_REAL }, hashSeed: 3,
      services: [{ id: 2, vip: SNAT_VIP, forwarding: 'snat', ring: Array(31).fill(7), ports: [{ port: 80, protocol: 'TCP', targetPort: 8080 }] }] }),
    snatAddress: '198.51.100.250' });
  });
  test.after.always(() => {
    dp?.close();
    rmSync(pin, { recursive: true, force: true });
  });
  return () => dp!;
}
