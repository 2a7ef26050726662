// bench/e2e/two-arm-run: throughput through an lb node with two interfaces (two-arm-lab.ts: client arm, backend
// arm, two backends), the shape of the independent lab issue 26 reports, in one run: direct (the client's wrk
// straight to the backends, routed through the lb node's kernel, the hop every other target takes too), gitlb's
// snat and dsr-l2 services (gitlb's data plane on the client arm in native XDP, also on the backend arm where the
// routes to the reals leave: src/bpf/dataplane/egress-links.ts) and nftables full NAT on the lb node
// (peers.ts's ruleset, loaded only for its own measurements). Rounds as bench.ts: direct, then each target,
// direct again after the last round; ratios to the directs around each round (table.ts). Per target it also
// reports what would show a loss: TCP retransmissions at the client and the backends, resets the lb node's
// kernel sent, frames its drivers dropped (veth rx drops, where failed XDP redirects land) and gitlb's drop
// counters.
//   bench/e2e/two-arm-run [--duration S] [--rounds N] [--connections N] [--xdp-mode native|generic|auto]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { TWO_ARM, lbResets, lbRxDrops, procCounter, sh, twoArmLab, type TwoArmLab } from './two-arm-lab.js';
import { LB_PEER_ADDR, lbFullNatRuleset, nftCounter, nftDelete, nftLoad } from './peers.js';
import { formatTable, summarize, type Sample, type Series } from './table.js';
import { wrk } from './wrk.js';

const { values } = parseArgs({ options: {
  duration: { type: 'string', default: '3' }, rounds: { type: 'string', default: '3' },
  connections: { type: 'string', default: '64' }, 'xdp-mode': { type: 'string', default: 'native' },
} });
const mode = values['xdp-mode'] as 'native' | 'generic' | 'auto';
if (!['native', 'generic', 'auto'].includes(mode)) throw new Error('--xdp-mode must be native, generic or auto');
const seconds = Math.min(30, Math.max(1, Number(values.duration)));
const rounds = Math.min(20, Math.max(1, Math.floor(Number(values.rounds))));
const threads = TWO_ARM.backends.length; // one wrk thread per backend (direct needs it; every target gets the same)
const connections = Math.max(threads, Math.min(256, Number(values.connections)) - (Number(values.connections) % threads));
const NFT_TABLE = 'gitlb_bench_lb_nat';

interface Target { name: string; url: string; spreadOver?: string[]; before?: () => Promise<void>; after?: () => Promise<void> }

function lossNow(lab: TwoArmLab): Loss {
  const c = lab.counters();
  const drops = Object.entries(c).filter(([k, v]) => /^(snat_)?drop_/.test(k) && typeof v === 'number').reduce((a, [, v]) => a + v, 0);
  return {
    retrans: [lab.ns.client, ...lab.ns.backends].reduce((a, n) => a + procCounter(n, 'snmp', 'Tcp:', 'RetransSegs'), 0),
    synRetrans: procCounter(lab.ns.client, 'netstat', 'TcpExt:', 'TCPSynRetrans'),
    pawsTimewait: lab.ns.backends.reduce((a, n) => a + procCounter(n, 'netstat', 'TcpExt:', 'PAWSTimewait'), 0),
    lbRsts: lbResets(lab), lbRxDrops: lbRxDrops(lab), gitlbDrops: drops,
  };
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'gitlb-two-arm-'));
  const lab = twoArmLab(`glb${process.pid}-2a`, { egressNapi: true });
  process.once('SIGINT', () => { lab.teardown(); process.exit(130); });
  const loss = new Map<string, Loss>();
  try {
    lab.startServers(dir);
    sh(lab.ns.lb, ['ip', 'addr', 'add', `${LB_PEER_ADDR}/32`, 'dev', 'lo']);
    lab.applyDataPlane(mode);
    const attached = `eth0 ${lab.xdpOn('eth0')}, eth1 ${lab.xdpOn('eth1')}`;
    const url = (a: string) => `http://${a}:${TWO_ARM.port}/`;
    const direct: Target = { name: `direct, ${threads} backends (via the lb node's kernel)`, url: url(TWO_ARM.backends[0]), spreadOver: [...TWO_ARM.backends] };
    const nft: Target = { name: 'nftables full nat on the lb node', url: url(LB_PEER_ADDR),
      before: () => nftLoad(lab.ns.lb, lbFullNatRuleset([...TWO_ARM.backends], LB_PEER_ADDR), dir, NFT_TABLE),
      after: async () => {
        try {
          if (!(await nftCounter(lab.ns.lb, 'ip', NFT_TABLE, LB_PEER_ADDR))) throw new Error('the nftables rule counted nothing');
        } finally {
          await nftDelete(lab.ns.lb, 'ip', NFT_TABLE);
        }
      } };
    const tag = `[${lab.xdpOn('eth0') === 'xdp' ? 'native' : 'generic'}]`;
    const targets: Target[] = [direct, nft, { name: `snat via gitlb ${tag}`, url: url(TWO_ARM.vip.snat) }, { name: `dsr/l2 via gitlb ${tag}`, url: url(TWO_ARM.vip.l2) }];
    const series = targets.map((t): Series => ({ name: t.name, lab: 0, direct: t === direct, samples: [] }));
    const sample = async (t: Target, what: string): Promise<Sample> => {
      process.stderr.write(`two-arm: ${what} ...\n`);
      lab.refreshNeighbours();
      await t.before?.();
      const l0 = lossNow(lab);
      try {
        const o = { seconds, connections, threads, spreadOver: t.spreadOver };
        const rps = await wrk(lab.ns.client, t.url, { ...o, closeEach: false });
        const cps = await wrk(lab.ns.client, t.url, { ...o, closeEach: true });
        return { rps, cps };
      } finally {
        const l1 = lossNow(lab);
        const acc = loss.get(t.name) ?? { retrans: 0, synRetrans: 0, pawsTimewait: 0, lbRsts: 0, lbRxDrops: 0, gitlbDrops: 0 };
        for (const k of Object.keys(acc) as (keyof Loss)[]) acc[k] += l1[k] - l0[k];
        loss.set(t.name, acc);
        await t.after?.();
      }
    };
    // warm-up: every target answers (also loads the neighbour and connection state) before anything is measured
    for (const t of targets) await sample(t, `warm-up: ${t.name}`);
    loss.clear();
    for (let k = 0; k < rounds; k++) for (const [j, t] of targets.entries()) series[j]!.samples.push(await sample(t, `round ${k + 1}/${rounds}: ${t.name}`));
    series[0]!.samples.push(await sample(direct, 'after the last round: direct'));

    console.log('');
    console.log(`two-arm lab: one lb node (eth0 to the client, eth1 to the backends' bridge), two backends (haproxy, 1 thread each)`);
    console.log(`wrk -t${threads} -c${connections}, ${seconds} s per measurement, ${rounds} rounds; gitlb's data plane --xdp-mode ${mode}: ${attached}`);
    console.log('req/s: keep-alive; conn/s: one request per connection; /direct: median of ratios to the directs around each round\n');
    const lines = summarize(series);
    for (const l of formatTable(lines)) console.log(l);
    const byName = new Map(lines.map((l) => [l.name, l]));
    const d = (a: string, b: string, f: 'rps' | 'cps') => (byName.get(a)![f].ratio! - byName.get(b)![f].ratio!).toFixed(2);
    console.log(`\nsnat (via gitlb) less nftables full nat: ${d(targets[2]!.name, nft.name, 'rps')} keep-alive / ${d(targets[2]!.name, nft.name, 'cps')} per connection`);
    console.log(`snat minus dsr/l2 (both via gitlb):      ${d(targets[2]!.name, targets[3]!.name, 'rps')} keep-alive / ${d(targets[2]!.name, targets[3]!.name, 'cps')} per connection`);
    console.log('\nwhat the measured rounds lost (sums over the rounds): TCP retransmissions (client + backends) and of them the client\'s SYNs,');
    console.log('SYNs the backends refused for a TIME_WAIT of the same 4-tuple (PAWS), resets sent by the lb node, frames dropped by its veths, xdp_lb\'s drop counters');
    for (const t of targets) {
      const l = loss.get(t.name)!;
      console.log(`  ${t.name.padEnd(48)} retrans ${String(l.retrans).padStart(6)}  syn ${String(l.synRetrans).padStart(5)}  paws tw ${String(l.pawsTimewait).padStart(5)}  lb rsts ${String(l.lbRsts).padStart(5)}  lb rx drops ${String(l.lbRxDrops).padStart(5)}  xdp_lb drops ${l.gitlbDrops}`);
    }
    console.log(`\nmachine load average at the end of the run: ${sh(lab.ns.lb, ['cat', '/proc/loadavg']).trim()} (2 shared cores: compare ratios, not absolute figures)`);
  } finally {
    lab.teardown();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e: Error) => {
  console.error(`two-arm: ${e.message}`);
  process.exit(1);
});
