// The lb daemon's neighbour keeper: pure parsing, and a real resolution inside a throwaway namespace pair.
import test from 'ava';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { addressesToResolve, usableNeighbours } from '../../src/reconciler/host/neighbours.js';

test('usable states are what bpf_fib_lookup accepts', (t) => {
  const json = JSON.stringify([
    { dst: '198.51.100.21', state: ['REACHABLE'] },
    { dst: '198.51.100.22', state: ['STALE'] },
    { dst: '198.51.100.23', state: ['FAILED'] },
    { dst: '2001:db8:1::21', state: ['INCOMPLETE'] },
    { dst: '2001:db8:1::22', state: ['DELAY'] },
  ]);
  const usable = usableNeighbours(json);
  t.deepEqual([...usable].sort(), ['198.51.100.21', '198.51.100.22', '2001:db8:1::22']);
  t.deepEqual(addressesToResolve(['198.51.100.23', '198.51.100.21', '2001:db8:1::21', '198.51.100.23'], usable), ['198.51.100.23', '2001:db8:1::21']);
  t.deepEqual([...usableNeighbours('not json')], []);
});

test('refreshNeighbours resolves a peer that had no entry (IPv4 and IPv6, in namespaces)', async (t) => {
  const p = `glb${process.pid}-nb`;
  const a = `${p}a`;
  const b = `${p}b`;
  const sh = (ns: string, ...argv: string[]) => execFileSync('ip', ['netns', 'exec', ns, ...argv]).toString();
  try {
    execFileSync('ip', ['netns', 'add', a]);
    execFileSync('ip', ['netns', 'add', b]);
    execFileSync('ip', ['-n', a, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', b]);
    sh(a, 'ip', 'addr', 'add', '198.51.100.1/24', 'dev', 'eth0');
    sh(a, 'ip', 'addr', 'add', '2001:db8:77::1/64', 'dev', 'eth0', 'nodad');
    sh(b, 'ip', 'addr', 'add', '198.51.100.2/24', 'dev', 'eth0');
    sh(b, 'ip', 'addr', 'add', '2001:db8:77::2/64', 'dev', 'eth0', 'nodad');
    sh(a, 'ip', 'link', 'set', 'eth0', 'up');
    sh(b, 'ip', 'link', 'set', 'eth0', 'up');
    t.notRegex(sh(a, 'ip', 'neigh', 'show', 'dev', 'eth0'), /198\.51\.100\.2 /);
    // run the daemon's code inside namespace a (nsenter keeps /sys, like the daemon)
    const script = `import { refreshNeighbours } from ${JSON.stringify(join(import.meta.dirname, '..', '..', 'src', 'reconciler', 'host', 'neighbours.ts'))};
      const first = await refreshNeighbours(['198.51.100.2', '2001:db8:77::2']);
      await new Promise((r) => setTimeout(r, 1500));
      const second = await refreshNeighbours(['198.51.100.2', '2001:db8:77::2']);
      console.log(JSON.stringify({ first, second }));`;
    const out = execFileSync('nsenter', [`--net=/run/netns/${a}`, process.execPath, '--import', 'tsx', '--input-type=module', '-e', script], { timeout: 60_000 }).toString();
    const r = JSON.parse(out.trim().split('\n').pop()!) as { first: string[]; second: string[] };
    t.deepEqual(r.first.sort(), ['198.51.100.2', '2001:db8:77::2']);
    t.deepEqual(r.second, [], 'both entries usable after one nudge');
    t.regex(sh(a, 'ip', 'neigh', 'show', 'dev', 'eth0'), /198\.51\.100\.2 .*(REACHABLE|STALE|DELAY)/);
  } finally {
    for (const ns of [a, b]) try { execFileSync('ip', ['netns', 'del', ns]); } catch { /* already gone */ }
  }
});
