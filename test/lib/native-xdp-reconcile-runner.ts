// Runs inside a test network namespace: a Reconciler (real Git repository on disk, real LB data plane on the
// interface, the real structured logger) applies a one-service config; prints the status document it handed to
// its status sink and the log lines it wrote, so the test sees how the XDP attachment reaches status and log.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import { Reconciler } from '../../src/reconciler/loops/reconciler.js';
import { LocalRemote } from '../../src/reconciler/source/git-remote.js';
import { createLogger } from '../../src/reconciler/log/logger.js';
import { serialiseStatus } from '../../src/reconciler/status/status-doc.js';
import { commitFiles, git, configFiles } from '../reconcile-helpers.js';

const [pinRoot, ifname, mode] = process.argv.slice(2) as [string, string, 'native' | 'generic' | 'auto'];
const work = mkdtempSync(join(tmpdir(), 'gitlb-xdp-status-'));
const dp = await openLbDataPlane({ pinRoot, interface: ifname, xdpMode: mode });
try {
  await git(work, 'init', '-q', '-b', 'main');
  const files = configFiles(['lb-1'], ['198.51.100.11']);
  files['nodes/lb-1.yaml'] = files['nodes/lb-1.yaml']!.replace('interface: eth0', `interface: ${ifname}`);
  await commitFiles(work, files, 'config');
  const logs: string[] = [];
  const statuses: string[] = [];
  const r = new Reconciler({
    node: 'lb-1', branch: 'main', remote: new LocalRemote(work), dataPlane: dp,
    log: createLogger({ node: 'lb-1', format: 'json', out: { write: (s: string) => logs.push(s) } }),
    statusSink: async (s) => void statuses.push(serialiseStatus(s)),
  });
  const outcome = await r.reconcile('test');
  await r.flushStatus();
  console.log(JSON.stringify({ outcome: outcome.kind, status: statuses.at(-1) ?? null, logs: logs.join('').split('\n').filter(Boolean) }));
} finally {
  dp.close();
  rmSync(work, { recursive: true, force: true });
}
