// The pid a bpffs pin's name carries (src/lab/stale-pins.ts): the three forms runs use, and names that must never be
// taken for a run's (the daemons' root, a name without a pid, a pid not at the start).
import test from 'ava';
import { pinCreatorPid } from '../../src/lab/stale-pins.js';

test('pinCreatorPid: glb<pid>-, gitlb-test-glb<pid>-, gitlb-test-<pid>- carry a pid; nothing else does', (t) => {
  t.is(pinCreatorPid('glb1234-scale3'), 1234);
  t.is(pinCreatorPid('glb1234-lb'), 1234);
  t.is(pinCreatorPid('gitlb-test-glb77-health-via-vip'), 77);
  t.is(pinCreatorPid('gitlb-test-4242-control'), 4242);
  for (const name of ['gitlb', 'maps.debug', 'progs.debug', 'gitlb-test-never', 'glb-12-x', 'glb12', 'glb12-', 'glbx12-a',
    'gitlb-test-', 'gitlb-test-glb-3-x', 'x-glb12-a', 'gitlb-glb12-a', 'glb0-x', 'cilium', 'gitlb-test-12x-a'])
    t.is(pinCreatorPid(name), null, name);
});
