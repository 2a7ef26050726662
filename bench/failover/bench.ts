// bench/failover: see ./run. One lab (sample config: hold time 3 s, keepalive 1 s, daemons poll Git every 2 s).
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { labDown, labUp, restartBird, type LabState } from '../../src/lab/lab.js';
import { run } from '../../src/lab/netns.js';
import { waitForLocalApplied } from '../../src/demo/status-watch.js';
import { measureFailover, routerNextHops, waitForHops, type FailoverResult } from '../../src/demo/failover.js';

const VIP = '203.0.113.10';

const { values } = parseArgs({ options: { flows: { type: 'string', default: '200' }, rounds: { type: 'string', default: '1' } } });
const flows = Number(values.flows);
const rounds = Number(values.rounds);
if (!Number.isInteger(flows) || flows < 10 || flows > 1000) throw new Error('--flows must be 10..1000');
if (!Number.isInteger(rounds) || rounds < 1 || rounds > 10) throw new Error('--rounds must be 1..10');

const GIT_ENV = { ...process.env, GIT_AUTHOR_NAME: 'bench', GIT_AUTHOR_EMAIL: 'bench@gitlb.invalid', GIT_COMMITTER_NAME: 'bench', GIT_COMMITTER_EMAIL: 'bench@gitlb.invalid' };

/** Sets lb-1's state in the lab's working clone, commits and pushes to the lab's repository. */
async function setState(state: LabState, to: 'drain' | 'active'): Promise<string> {
  const work = state.git!.work;
  const file = join(work, 'nodes', 'lb-1.yaml');
  writeFileSync(file, readFileSync(file, 'utf8').replace(/state: (active|drain)/, `state: ${to}`));
  await run(['git', '-C', work, 'commit', '--quiet', '-am', `lb-1: ${to}`], { env: GIT_ENV });
  await run(['git', '-C', work, 'push', '--quiet', 'origin', 'HEAD:main'], { env: GIT_ENV });
  return (await run(['git', '-C', work, 'rev-parse', 'HEAD'])).stdout.trim();
}

async function bothBack(state: LabState, lb1: string): Promise<void> {
  if ((await waitForHops(state, [VIP], (h) => h.includes(lb1) && h.length === 2, 90_000, 100)) === null) throw new Error('lb-1 did not announce again');
}

function row(name: string, r: FailoverResult): string {
  const ms = r.routeChangeMs === null ? 'no change' : `${r.routeChangeMs} ms`;
  return `${name.padEnd(34)} ${ms.padStart(10)}   ${`${r.survived}/${r.flows}`.padStart(9)} (${((100 * r.survived) / r.flows).toFixed(1)}%)   ${r.switchedBackend}`;
}

async function main(): Promise<void> {
  const scratch = mkdtempSync(join(tmpdir(), `gitlb-failover-${process.pid}-`));
  const stateDir = join(scratch, 'lab');
  try {
    const state = await labUp({ stateDir });
    if (!state.plan.bird) throw new Error('the lab has no BGP (the config needs Cluster.spec.bgp and Node.spec.bgp)');
    const lb1 = state.plan.nodes.find((n) => n.name === 'lb-1')!.addresses.find((a) => !a.includes(':'))!;
    const head = (await run(['git', '--git-dir', state.git!.bare, 'rev-parse', 'main'])).stdout.trim();
    const applied = await waitForLocalApplied(stateDir, state.plan.nodes.map((n) => n.name), head, 120_000);
    if (!applied.ok) throw new Error(`not applied on ${applied.missing.join(', ')}`);
    await bothBack(state, lb1);
    const common = { vip: VIP, port: 80, leaving: lb1, flows, durationMs: 12_000, intervalMs: 500, settleMs: 3000, routeTimeoutMs: 60_000 };
    const lines: string[] = [];
    for (let round = 1; round <= rounds; round++) {
      const drain = await measureFailover(state, { ...common, event: async () => void (await setState(state, 'drain')) });
      lines.push(row('drain (commit pushed)', drain));
      await setState(state, 'active');
      await bothBack(state, lb1);

      const bird = () => [...state.processes].reverse().find((p) => p.role === 'bird' && p.node === 'lb-1')!;
      const killed = await measureFailover(state, { ...common, event: async () => process.kill(bird().pid, 'SIGKILL') });
      lines.push(row('hard failure: BIRD SIGKILL', killed));
      await restartBird(state, 'lb-1');
      await bothBack(state, lb1);

      const silent = bird();
      const stopped = await measureFailover(state, { ...common, event: async () => process.kill(silent.pid, 'SIGSTOP') });
      lines.push(row('silent failure: BIRD SIGSTOP', stopped));
      process.kill(silent.pid, 'SIGKILL');
      await restartBird(state, 'lb-1');
      await bothBack(state, lb1);
    }
    const hold = readFileSync(join(state.configDir, 'cluster.yaml'), 'utf8').match(/holdTime: (\d+)/)?.[1] ?? '?';
    process.stdout.write(
      `bench/failover: ${flows} keep-alive connections to ${VIP}:80 (a request every 500 ms, 12 s), router ${await routerNextHops(state, VIP).then((h) => h.join(' + '))}\n` +
        `BGP hold time ${hold} s; daemons poll Git every 2 s; time measured from the end of the event to the router's kernel route without lb-1\n\n` +
        `${'event'.padEnd(34)} ${'route change'.padStart(10)}   ${'survived'.padStart(9)}            switched backend\n` +
        lines.join('\n') +
        '\n',
    );
  } finally {
    await labDown(stateDir).catch(() => {});
    rmSync(scratch, { recursive: true, force: true });
  }
}

await main();
