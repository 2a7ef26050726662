// `gitlb capture` swapping its build in and out of a running data plane: a client namespace sends UDP to a DSR (l2)
// VIP through a veth into the lb namespace, where xdp_lb rewrites the MAC and transmits (XDP_TX): frames tcpdump on
// the lb never sees. The capture shows each as received (to the lb's MAC) and as sent on (to the real's MAC, verdict
// TX), writes a classic pcap tcpdump reads, and hands the link back: the original program runs again, and no packet
// went unhandled or reached the lb's stack while the programs were swapped in and out. `gitlb monitor` is the same
// command (an alias), used here for the first case. Real namespaces, veths, programs, maps and CLI.
import test from 'ava';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { cleanupRun, deleteNetns, exec, nsArgv, nsName, run } from '../../src/lab/netns.js';
import { readLbStats } from '../../src/bpf/dataplane/pinned-stats.js';
import { LINK_PIN } from '../../src/bpf/dataplane/index.js';
import { pinnedXdpLink } from '../../src/bpf/attach.js';
import { makeState } from '../lib/lb-state.js';
import { stateToJson } from '../lib/xdp-harness.js';
import { readPcap } from '../lib/pcap.js';
import { LB_MAC, PORT, REAL_MACS, VIP, passedToStack as stackCount, setupVipVethLab, withUdpTraffic } from '../lib/vip-veth-lab.js';

const NS_C = nsName('capc');
const NS_L = nsName('capl');
const PIN_ROOT = `/sys/fs/bpf/glb${process.pid}-capture`;
const PIN = join(PIN_ROOT, 'lb-1');
const REAL_MAC = REAL_MACS['198.51.100.11']!;
const RUNNER = fileURLToPath(new URL('../lib/reattach-runner.ts', import.meta.url));
const MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
const STATE = { ...makeState({ reals: { 1: '198.51.100.11' },
  services: [{ id: 1, vip: VIP, forwarding: 'dsr-l2', ports: [{ port: PORT, protocol: 'UDP' }], ring: [1, 1, 1, 1, 1, 1, 1] }] }), interface: 'l0' };
const tmp = mkdtempSync(join(tmpdir(), 'gitlb-capture-'));


test.before(async () => {
  await setupVipVethLab(NS_C, NS_L, 'glbmon');
  const r = await exec(nsArgv(NS_L, [process.execPath, '--import', 'tsx', RUNNER, PIN, 'l0', 'generic']),
    { input: JSON.stringify(stateToJson(STATE)), timeoutMs: 90_000 });
  if (r.code !== 0) throw new Error(`data plane start failed: ${r.stderr}`);
});

test.after.always(async () => {
  await cleanupRun();
  await deleteNetns(NS_C);
  await deleteNetns(NS_L);
  rmSync(PIN_ROOT, { recursive: true, force: true });
  rmSync(tmp, { recursive: true, force: true });
});

const passedToStack = () => stackCount(NS_L, 'glbmon');

const handled = (): number => readLbStats(PIN)?.services.get(1)?.packets ?? 0;

const withTraffic = <T>(during: () => Promise<T>) => withUdpTraffic(NS_C, 200_000, during);

const capture = (...args: string[]) =>
  exec([process.execPath, '--import', 'tsx', MAIN, 'capture', '--pin-root', PIN_ROOT, ...args], { timeoutMs: 60_000 });

test.serial('shows each frame as received and as transmitted, with the verdict, then hands the link back', async (t) => {
  const before = pinnedXdpLink(join(PIN, LINK_PIN))!;
  const [passed0, handled0] = [await passedToStack(), handled()];
  const { sent, result } = await withTraffic(() =>
    exec([process.execPath, '--import', 'tsx', MAIN, 'monitor', '--pin-root', PIN_ROOT, '--count', '10'], { timeoutMs: 60_000 }));
  t.is(result.code, 0, result.stderr);
  const lines = result.stdout.trim().split('\n');
  t.is(lines.length, 20, 'ten frames, each as received and as sent on');
  // the veths' own IPv6 neighbour discovery shows up too (entry, then exit PASS): only the VIP's frames matter here
  const vip = lines.filter((l) => l.includes(`> ${VIP}:${PORT} UDP`));
  const entries = vip.filter((l) => / entry /.test(l));
  const exits = vip.filter((l) => / exit /.test(l));
  t.true(entries.length >= 8 && exits.length >= 8, result.stdout);
  for (const l of exits) t.regex(l, / exit  TX .* \| TX to real 198\.51\.100\.11 \(id 1\) \[/);
  for (const l of entries) t.regex(l, new RegExp(`> ${LB_MAC} IPv4 198\\.51\\.100\\.2:\\d+ > ${VIP.replace(/\./g, '\\.')}:${PORT} UDP`));
  for (const l of exits) t.regex(l, new RegExp(`> ${REAL_MAC} IPv4 198\\.51\\.100\\.2:\\d+ > ${VIP.replace(/\./g, '\\.')}:${PORT} UDP`));
  t.regex(result.stderr, new RegExp(`10 frames shown or written; .*; original program \\(id ${before.progId}\\) restored`));
  const after = pinnedXdpLink(join(PIN, LINK_PIN))!;
  t.is(after.linkId, before.linkId);
  t.is(after.progId, before.progId, 'the original program runs again');
  // every datagram was handled by an xdp_lb (the original or the capture build: the same maps and counters),
  // none reached the lb's stack while the programs were swapped
  t.true(sent > 100);
  t.is(handled() - handled0, sent);
  t.is(await passedToStack(), passed0);
});

test.serial('writes a classic pcap that tcpdump reads; --point and --action select frames', async (t) => {
  const file = join(tmp, 'frames.pcap');
  const { result } = await withTraffic(() => capture('--count', '10', '--point', 'exit', '--action', 'TX', '-w', file, '--format', 'pcap', '-q'));
  t.is(result.code, 0, result.stderr);
  t.is(result.stdout, '');
  const frames = readPcap(file);
  t.is(frames.length, 10);
  // only TX exits were written: every one is a VIP datagram on its way to the real
  for (const f of frames) t.is(f.subarray(0, 6).toString('hex'), REAL_MAC.replace(/:/g, ''));
  const dump = await run(['tcpdump', '-nn', '-e', '-r', file]);
  t.is(dump.stdout.trim().split('\n').length, 10);
  t.regex(dump.stdout, new RegExp(`${LB_MAC} > ${REAL_MAC}.*198\\.51\\.100\\.2\\.\\d+ > 203\\.0\\.113\\.10\\.53: `));
  const none = await withTraffic(() => capture('--duration', '1', '--action', 'DROP'));
  t.is(none.result.code, 0);
  t.is(none.result.stdout, '', 'nothing was dropped');
});

test.serial('a program the daemon put in meanwhile is never replaced by the capture', async (t) => {
  const [cmd, ...args] = [process.execPath, '--import', 'tsx', MAIN, 'capture', '--pin-root', PIN_ROOT, '--duration', '30'];
  const child = spawn(cmd!, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  child.stderr.on('data', (d) => (err += d));
  const exited = new Promise<number>((resolve) => child.on('close', (code) => resolve(code ?? -1)));
  try {
    // wait until the capture's program runs in the link
    const original = pinnedXdpLink(join(PIN, LINK_PIN))!.progId;
    // (loading and verifying the capture build takes seconds on a busy machine)
    for (let i = 0; i < 300 && pinnedXdpLink(join(PIN, LINK_PIN))!.progId === original && child.exitCode === null; i++) await new Promise((r) => setTimeout(r, 100));
    t.not(pinnedXdpLink(join(PIN, LINK_PIN))!.progId, original);
    // a daemon restart: loads xdp_lb.o again and swaps it into the link
    const r = await exec(nsArgv(NS_L, [process.execPath, '--import', 'tsx', RUNNER, PIN, 'l0', 'generic']),
      { input: JSON.stringify(stateToJson(STATE)), timeoutMs: 90_000 });
    t.is(r.code, 0, r.stderr);
    const daemons = pinnedXdpLink(join(PIN, LINK_PIN))!.progId;
    t.is(await exited, 0, err);
    t.regex(err, /the daemon replaced the program meanwhile; its program stays/);
    t.is(pinnedXdpLink(join(PIN, LINK_PIN))!.progId, daemons);
  } finally {
    if (child.exitCode === null) child.kill('SIGKILL');
  }
});

test('without a pinned data plane it says so and exits 1', async (t) => {
  const r = await exec([process.execPath, '--import', 'tsx', MAIN, 'capture', '--pin-root', join(tmp, 'none')], { timeoutMs: 60_000 });
  t.is(r.code, 1);
  t.regex(r.stderr, /no lb data plane pinned under/);
});
