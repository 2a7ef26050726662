// A connection-table resize on an attached lb data plane swaps xdp_lb inside its pinned XDP link (the link stays,
// its program changes) while traffic flows, and the flow that was established before keeps its real. A client
// namespace sends UDP (one flow: one socket) to a VIP through a veth into the lb namespace; the lb's data plane
// (generic XDP, started as a daemon start does it, test/lib/resize-runner.ts) first grows its tables, then, in a
// second start, its ring is changed to pick another real. Packets that found no program reach the lb's stack and
// are counted by an nftables netdev ingress rule; xdp_lb counts per real. If the flow's entry had not been copied
// into the new table, the ring change would have sent it to real 2. Real namespaces, veth, programs and maps.
import test from 'ava';
import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { cleanupRun, createNetns, deleteNetns, exec, nsArgv, nsName, run, vethPair } from '../../src/lab/netns.js';
import { readLbStats } from '../../src/bpf/dataplane/pinned-stats.js';
import { makeState } from '../lib/lb-state.js';
import { stateToJson } from '../lib/xdp-harness.js';

const NS_C = nsName('rszc');
const NS_L = nsName('rszl');
const PIN = `/sys/fs/bpf/glb${process.pid}-rszlink`;
const VIP = '203.0.113.10';
const PORT = 53;
const LB_MAC = '02:00:00:00:0c:01';
const RUNNER = fileURLToPath(new URL('../lib/resize-runner.ts', import.meta.url));
const REALS = { 1: '198.51.100.11', 2: '198.51.100.12' };
const state = (real: number, conntrackMaxEntries: number) => ({ ...makeState({ reals: REALS, conntrackMaxEntries,
  services: [{ id: 1, vip: VIP, forwarding: 'dsr-l2', ports: [{ port: PORT, protocol: 'UDP' }], ring: Array(7).fill(real) }] }), interface: 'l0' });

// Paced UDP sender from one socket (one flow), bounded: at most `limit` datagrams and 60 s. Prints "go" after 100
// datagrams, keeps sending until its stdin ends (or the limit), then prints {"sent": n}.
const SENDER = `
const s = require('dgram').createSocket('udp4');
const [vip, port, limit] = process.argv.slice(1);
let stop = false;
process.stdin.on('end', () => { stop = true; });
process.stdin.resume();
const deadline = Date.now() + 60000;
const payload = Buffer.alloc(32);
const send = () => new Promise((res, rej) => s.send(payload, Number(port), vip, (e) => (e ? rej(e) : res())));
(async () => {
  let sent = 0;
  while (sent < Number(limit) && !(stop && sent >= 100) && Date.now() < deadline) {
    await send();
    sent++;
    if (sent === 100) process.stdout.write('go\\n');
    if (sent % 20 === 0) await new Promise((r) => setTimeout(r, 1));
  }
  s.close();
  process.stdout.write(JSON.stringify({ sent }) + '\\n');
})().catch((e) => { console.error(String(e)); process.exit(1); });
`;

interface Link { linkId: number; progId: number; mode: string }
interface Start { opened: Link | null; applied: Link; program: number; programMap: number; conntrack: { max: number; id: number };
  ops: string[]; mapWrites: number; resized: Record<string, { copied: number; size: number }> | null }

test.before(async () => {
  await createNetns(NS_C);
  await createNetns(NS_L);
  await vethPair({ ns: NS_C, name: 'c0', addrs: ['198.51.100.2/24'] }, { ns: NS_L, name: 'l0', addrs: ['198.51.100.1/24'] });
  await run(['ip', '-n', NS_L, 'link', 'set', 'dev', 'l0', 'address', LB_MAC]);
  await run(['ip', '-n', NS_C, 'neigh', 'replace', '198.51.100.1', 'lladdr', LB_MAC, 'dev', 'c0', 'nud', 'permanent']);
  await run(['ip', '-n', NS_C, 'route', 'add', `${VIP}/32`, 'via', '198.51.100.1', 'dev', 'c0']);
  for (const [ip, m] of [['198.51.100.11', '02:00:00:00:01:11'], ['198.51.100.12', '02:00:00:00:01:12']])
    await run(['ip', '-n', NS_L, 'neigh', 'replace', ip!, 'lladdr', m!, 'dev', 'l0', 'nud', 'permanent']);
  await run(['ip', 'netns', 'exec', NS_L, 'sysctl', '-q', '-w', 'net.ipv4.ip_forward=1']);
  await run(['ip', 'netns', 'exec', NS_L, 'nft', '-f', '-'], {
    input: `table netdev glbrsz {\n  chain in {\n    type filter hook ingress device "l0" priority 0;\n    ip daddr ${VIP} counter\n  }\n}\n` });
});

test.after.always(async () => {
  await cleanupRun();
  await deleteNetns(NS_C);
  await deleteNetns(NS_L);
  rmSync(PIN, { recursive: true, force: true });
});

async function start(s: ReturnType<typeof state>): Promise<Start> {
  const r = await exec(nsArgv(NS_L, [process.execPath, '--import', 'tsx', RUNNER, PIN, 'l0']),
    { input: JSON.stringify(stateToJson(s)), timeoutMs: 90_000 });
  if (r.code !== 0) throw new Error(`resize-runner exited ${r.code}: ${r.stderr}`);
  return JSON.parse(r.stdout) as Start;
}

async function passedToStack(): Promise<number> {
  const r = await run(['ip', 'netns', 'exec', NS_L, 'nft', '-j', 'list', 'chain', 'netdev', 'glbrsz', 'in']);
  const rule = (JSON.parse(r.stdout).nftables as Array<Record<string, any>>).find((x) => x['rule'])!['rule'];
  return (rule.expr as Array<Record<string, any>>).find((e) => e['counter'])!['counter'].packets as number;
}

const realPackets = (id: number): number => readLbStats(PIN)?.reals.get(id)?.packets ?? 0;

/** Sends to the VIP from the client namespace while `during` runs; resolves with the count sent. */
async function withTraffic<T>(during: () => Promise<T>): Promise<{ sent: number; result: T }> {
  const [cmd, ...args] = nsArgv(NS_C, [process.execPath, '-e', SENDER, VIP, String(PORT), '200000']);
  const child = spawn(cmd!, args, { stdio: ['pipe', 'pipe', 'pipe'] });
  try {
    let out = '';
    let err = '';
    child.stderr.on('data', (d) => (err += d));
    const exited = new Promise<number>((resolve) => child.on('close', (code) => resolve(code ?? -1)));
    await new Promise<void>((resolve, reject) => {
      child.stdout.on('data', (d) => {
        out += d;
        if (out.includes('go\n') || out.includes('"sent"')) resolve();
      });
      void exited.then((code) => reject(new Error(`sender exited ${code} before sending: ${err}`)));
    });
    const result = await during();
    child.stdin.end();
    const code = await exited;
    if (code !== 0) throw new Error(`sender exited ${code}: ${err}`);
    return { sent: (JSON.parse(out.trim().split('\n').at(-1)!) as { sent: number }).sent, result };
  } finally {
    if (child.exitCode === null) child.kill('SIGKILL');
  }
}

test('a resize swaps the program inside the pinned link under traffic; the established flow keeps its real', async (t) => {
  t.timeout(300_000);
  const first = await start(state(1, 1024));
  t.is(first.opened, null);
  t.is(first.conntrack.max, 1024);
  const passed0 = await passedToStack();
  const { sent, result: [grown, moved] } = await withTraffic(async () => [await start(state(1, 65536)), await start(state(2, 65536))] as const);
  t.deepEqual(grown.ops, ['table.resize', 'table.resize', 'table.resize', 'table.resize']);
  t.is(grown.applied.linkId, grown.opened!.linkId, 'the same link');
  t.not(grown.applied.progId, grown.opened!.progId, 'a new program in it');
  t.is(grown.applied.progId, grown.program, 'the program the data plane holds, the one using the new table');
  t.is(grown.programMap, grown.conntrack.id, 'that program uses the pinned table');
  t.is(grown.conntrack.max, 65536);
  t.not(grown.conntrack.id, first.conntrack.id);
  t.is(grown.resized!.lb_conntrack!.copied, 1, 'the one flow was in the table and copied');
  t.true(moved.ops.includes('service.switch') && !moved.ops.includes('table.resize'));
  const passed = (await passedToStack()) - passed0;
  const r1 = realPackets(1);
  const r2 = realPackets(2);
  t.log(`${sent} datagrams during a resize 1024 -> 65536 and a ring change: real 1 ${r1}, real 2 ${r2}, ${passed} reached the stack`);
  t.is(passed, 0, 'no packet found the interface without xdp_lb');
  t.is(r1, sent, 'every datagram handled by xdp_lb went to the flow\'s real');
  t.is(r2, 0, 'the ring change moved no packet of the established flow: its entry was copied into the new table');
});
