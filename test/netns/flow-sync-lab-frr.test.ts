// The survival matrix of issue 24 with FRR (bgpd + zebra, src/lab/frr.ts) as the upstream router:
// test/lib/survival-matrix.ts, the same code as the BIRD run (test/netns/flow-sync-lab.test.ts).
import { survivalMatrix } from '../lib/survival-matrix.js';

survivalMatrix('frr');
