// A node must not believe native XDP forwards when it cannot: on a veth whose peer runs no NAPI, native XDP attaches
// and then drops every XDP_TX frame silently. The LB data plane probes the attachment (src/bpf/xdp-forwarding.ts):
// 'auto' falls back to generic and says why, 'native' refuses, and a peer that can receive (GRO on, or an XDP
// program) keeps native. Real attachments on veth pairs in a test namespace (test/lib/xdp-lab.ts).
import test from 'ava';
import { execFileSync, spawnSync } from 'node:child_process';
import { setupLab, teardownLab } from '../lib/xdp-lab.js';
import { makeState } from '../lib/lb-state.js';
import { stateToJson } from '../lib/xdp-harness.js';
import { readFileSync, rmSync } from 'node:fs';
import { BpfMap } from '../../src/bpf/libbpf.js';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { parseStatus } from '../../src/reconciler/status/status-doc.js';
import { assessStatus, formatStatusVerdict } from '../../src/reconciler/status/assess.js';
const schema = JSON.parse(readFileSync(new URL('../../schemas/status.schema.json', import.meta.url), 'utf8'));

const ajv = new Ajv2020({ allErrors: true });
(addFormats as unknown as (a: Ajv2020) => void)(ajv);
const validateStatus = ajv.compile(schema);

const TAG = 'natx';
let ns = '';
let pinRoot = '';
const STATE = makeState({ reals: { 1: '198.51.100.11' }, services: [{ id: 1, vip: '203.0.113.10', forwarding: 'dsr-l2', ring: [1, 1, 1, 1, 1, 1, 1] }] });

test.before(() => ({ ns, pinRoot } = setupLab(TAG)));
test.after.always(() => teardownLab(TAG));

function open(ifname: string, mode: string, pins: string): { forwarding?: { mode: string; requested: string; fellBack: boolean; forwards: boolean | null; detail: string }; error?: string; code?: string } {
  const r = spawnSync('nsenter', [`--net=/run/netns/${ns}`, process.execPath, '--import', 'tsx', new URL('../lib/native-xdp-runner.ts', import.meta.url).pathname,
    `${pinRoot}/${pins}`, ifname, mode], { input: JSON.stringify(stateToJson(STATE)), timeout: 60_000 });
  if (r.status !== 0) throw new Error(`runner failed: ${r.stderr}`);
  return JSON.parse(r.stdout.toString());
}
const xdpOn = (dev: string) => execFileSync('ip', ['-n', ns, '-d', 'link', 'show', 'dev', dev]).toString().match(/mtu \d+ (xdp\w*)/)?.[1] ?? null;

test.serial("auto: native attaches but cannot forward (peer without NAPI): falls back to generic and says why", (t) => {
  const r = open('lbA', 'auto', 'a');
  t.falsy(r.error, r.error);
  t.like(r.forwarding, { mode: 'generic', requested: 'auto', fellBack: true });
  t.regex(r.forwarding!.detail, /fell back to generic.*0\/4 XDP_TX probe frames/);
  t.is(xdpOn('lbA'), 'xdpgeneric');
});

const linkOf = (pin: string) => JSON.parse(execFileSync('bpftool', ['-j', 'link', 'show', 'pinned', pin]).toString()) as { id: number; prog_id: number };

test.serial('restart: a daemon that adopts the generic link of a fallback still reports the fallback (recorded beside the link pin)', (t) => {
  const before = linkOf(`${pinRoot}/a/xdp_link`);
  const r = open('lbA', 'auto', 'a');
  t.falsy(r.error, r.error);
  const after = linkOf(`${pinRoot}/a/xdp_link`);
  t.is(after.id, before.id, 'the link was adopted, not re-created');
  t.not(after.prog_id, before.prog_id, 'its program swapped for the one this start loaded');
  t.like(r.forwarding, { mode: 'generic', requested: 'auto', fellBack: true });
  t.regex(r.forwarding!.detail, /^native XDP could not forward, fell back to generic \(found \d{4}-\d\d-\d\dT[\d:.]+Z, adopted across a restart\): lbA: only 0\/4 XDP_TX probe frames/);
  t.is(xdpOn('lbA'), 'xdpgeneric');
  // and again: the record is rewritten for the same link and still says so
  t.like(open('lbA', 'auto', 'a').forwarding, { mode: 'generic', fellBack: true });
});

test.serial('restart with --xdp-mode native over that generic link: refused loudly, generic put back, the fallback still recorded', (t) => {
  const before = linkOf(`${pinRoot}/a/xdp_link`);
  const r = open('lbA', 'native', 'a');
  t.is(r.code, 'ENOTSUP');
  t.regex(r.error!, /native XDP on lbA cannot forward: .*0\/4 XDP_TX probe frames.*; the generic attachment is back in place/);
  t.is(xdpOn('lbA'), 'xdpgeneric');
  t.not(linkOf(`${pinRoot}/a/xdp_link`).id, before.id, 'a new generic link (a link cannot change mode)');
  t.like(open('lbA', 'auto', 'a').forwarding, { mode: 'generic', requested: 'auto', fellBack: true });
  // --xdp-mode generic asked for explicitly: generic is what was asked, not a fallback
  t.like(open('lbA', 'generic', 'a').forwarding, { mode: 'generic', requested: 'generic', fellBack: false });
});

test.serial('restart: a record that does not validate is not trusted (the adopted generic link is reported as unknown, not as a fallback)', (t) => {
  rmSync(`${pinRoot}/a`, { recursive: true, force: true });
  t.like(open('lbA', 'auto', 'b').forwarding, { mode: 'generic', fellBack: true }); // fresh pins: a fallback, recorded
  const rec = BpfMap.open(`${pinRoot}/b/xdp_attach`);
  try {
    const v = rec.lookup(Buffer.alloc(4))!;
    v.writeUInt32LE(v.readUInt32LE(12) + 1, 12); // names another link
    rec.update(Buffer.alloc(4), v);
  } finally {
    rec.close();
  }
  const r = open('lbA', 'auto', 'b');
  t.like(r.forwarding, { mode: 'generic', requested: 'auto', fellBack: false });
  t.regex(r.forwarding!.detail, /without a valid attach record \(it describes link \d+ .*, not link \d+/);
});

test.serial('auto fallback through the reconciler: status/<node>.yaml records xdp generic fellBack (schema-valid), a structured warning is logged, gitlb status shows it', (t) => {
  for (const p of ['a', 'b']) rmSync(`${pinRoot}/${p}`, { recursive: true, force: true }); // the previous tests' pinned links: detach them
  t.is(xdpOn('lbA'), null);
  const r = spawnSync('nsenter', [`--net=/run/netns/${ns}`, process.execPath, '--import', 'tsx', new URL('../lib/native-xdp-reconcile-runner.ts', import.meta.url).pathname,
    `${pinRoot}/r`, 'lbA', 'auto'], { timeout: 90_000 });
  t.is(r.status, 0, r.stderr.toString());
  const out = JSON.parse(r.stdout.toString()) as { outcome: string; status: string | null; logs: string[] };
  t.is(out.outcome, 'applied');
  const status = parseStatus(out.status!);
  t.true(validateStatus(status), JSON.stringify(validateStatus.errors));
  t.like(status.xdp, { mode: 'generic', requested: 'auto', fellBack: true, forwards: null });
  t.regex(status.xdp!.detail, /fell back to generic.*0\/4 XDP_TX probe frames/);
  const lines = out.logs.map((l) => JSON.parse(l) as Record<string, unknown>);
  const warning = lines.find((l) => l['xdpFellBack'] === true);
  t.like(warning, { level: 'warn', node: 'lb-1', xdpMode: 'generic', xdpRequested: 'auto' }, out.logs.join('\n'));
  t.is(lines.filter((l) => 'xdpMode' in l).length, 1, 'logged once, not on every status write');
  t.false(r.stderr.toString().includes('fell back'), 'nothing printed around the logger');
  const now = new Date();
  const table = formatStatusVerdict(assessStatus({ statuses: [status], head: null, configNodes: [], now, behindGraceMs: 60_000, staleAfterMs: 60_000 }), now);
  t.regex(table, /^NODE\s+ROLE\s+XDP\s+APPLIED/m);
  t.regex(table, /^lb-1\s+lb\s+generic \(fallback\)\s+[0-9a-f]{12}/m);
  t.regex(table, /^lb-1: xdp generic \(--xdp-mode auto\), native fell back: native XDP could not forward/m);

  // a restarted daemon adopts the pinned generic link: status and log still say the fallback, not plain generic
  const again = spawnSync('nsenter', [`--net=/run/netns/${ns}`, process.execPath, '--import', 'tsx', new URL('../lib/native-xdp-reconcile-runner.ts', import.meta.url).pathname,
    `${pinRoot}/r`, 'lbA', 'auto'], { timeout: 90_000 });
  t.is(again.status, 0, again.stderr.toString());
  const out2 = JSON.parse(again.stdout.toString()) as { outcome: string; status: string | null; logs: string[] };
  const status2 = parseStatus(out2.status!);
  t.true(validateStatus(status2), JSON.stringify(validateStatus.errors));
  t.like(status2.xdp, { mode: 'generic', requested: 'auto', fellBack: true });
  t.regex(status2.xdp!.detail, /fell back to generic \(found .*, adopted across a restart\): lbA: only 0\/4 XDP_TX probe frames/);
  const warning2 = out2.logs.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l['xdpFellBack'] === true);
  t.like(warning2, { level: 'warn', xdpMode: 'generic', xdpRequested: 'auto' }, out2.logs.join('\n'));
});

test.serial('native: refused loudly when the interface cannot forward; nothing stays attached', (t) => {
  const r = open('lbC', 'native', 'c1');
  t.is(r.code, 'ENOTSUP');
  t.regex(r.error!, /native XDP on lbC cannot forward: .*peer needs an XDP program/);
  t.is(xdpOn('lbC'), null);
});

test.serial('native: with GRO on the peers (their NAPI runs) the probe frames leave and native stays, on lbC and on lbA, where the route to the real leaves', (t) => {
  rmSync(`${pinRoot}/r`, { recursive: true, force: true }); // the reconciler test's generic link on lbA: detach it
  // the real (198.51.100.11) is routed out of lbA: native XDP on lbC redirects into lbA, so lbA's peer needs NAPI too
  // (test/netns/xdp-two-arm.test.ts: without it native is refused, naming lbA)
  for (const peer of ['lbD', 'lbB']) execFileSync('ip', ['netns', 'exec', ns, 'ethtool', '-K', peer, 'gro', 'on']);
  const r = open('lbC', 'native', 'c2');
  t.falsy(r.error, r.error);
  t.deepEqual(r.forwarding, { mode: 'native', requested: 'native', fellBack: false, forwards: true,
    detail: 'lbC: 4/4 XDP_TX probe frames transmitted; lbA: 4/4 XDP_TX probe frames transmitted; xdp_lb also on lbA (the routes to the reals leave by it; SNAT replies arrive there)' });
  t.is(xdpOn('lbC'), 'xdp');
  t.is(xdpOn('lbA'), 'xdp');
});
