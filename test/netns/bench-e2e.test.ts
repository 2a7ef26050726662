// bench/e2e's fairness parts, each against the real thing: the bench config is a valid gitlb config that spreads
// every measured service over every backend; the haproxy backend (lab option backendHttp: 'haproxy') keeps the
// Node backend's reply contract; wrk's spread script really sends thread i to backend i (counted by nftables in
// the namespace, against the same run without it).
import test from 'ava';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DEFAULT_CONFIG_DIR } from '../../src/lab/lab.js';
import { loadConfigModel } from '../../src/lab/load-config.js';
import { addrAddArgs, cleanupRun, createNetns, ipBatch, nsExec, nsName, nsSpawn, waitForPort } from '../../src/lab/netns.js';
import { backendHaproxyConfig } from '../../src/lab/servers/backend-haproxy.js';
import { writeBenchConfig } from '../../bench/e2e/config.js';
import { spreadScript, wrk } from '../../bench/e2e/wrk.js';
import { formatTable, latencyMs, summarize } from '../../bench/e2e/table.js';

const ADDRS = ['198.51.100.21', '198.51.100.22', '198.51.100.23'];
const scratch = mkdtempSync(join(tmpdir(), 'gitlb-bench-e2e-test-'));
const ns = nsName('benche2e');

test.before(async () => {
  await createNetns(ns);
  await ipBatch(ns, [...ADDRS.map((a) => addrAddArgs('lo', `${a}/32`)), addrAddArgs('lo', '2001:db8::21/128')]);
  const cfg = join(scratch, 'be.cfg');
  writeFileSync(cfg, backendHaproxyConfig('be-t', [80, 8080]));
  const child = nsSpawn(ns, ['haproxy', '-db', '-f', cfg]);
  child.stderr!.on('data', () => {}); // drained; a failure to start shows as the ports never binding
  await waitForPort(ns, 80, 'tcp', { timeoutMs: 10_000 });
  await waitForPort(ns, 8080, 'tcp', { timeoutMs: 10_000 });
  // SYNs per destination address on port 80: how many connections each address received
  const rules = ADDRS.map((a) => `    ip daddr ${a} tcp dport 80 tcp flags & (syn | ack) == syn counter`).join('\n');
  writeFileSync(join(scratch, 'count.nft'), `table ip count {\n  chain in {\n    type filter hook input priority 0;\n${rules}\n  }\n}\n`);
  const r = await nsExec(ns, ['nft', '-f', join(scratch, 'count.nft')]);
  if (r.code !== 0) throw new Error(`nft: ${r.stderr}`);
});

test.after.always(async () => {
  await cleanupRun();
  rmSync(scratch, { recursive: true, force: true });
});

let synsBefore = ADDRS.map(() => 0);
/** SYNs each of ADDRS received since the last call (the rule counters only grow: the difference to last time). */
async function synsPerAddress(): Promise<number[]> {
  const out = (await nsExec(ns, ['nft', 'list', 'table', 'ip', 'count'])).stdout;
  const now = ADDRS.map((a) => Number(new RegExp(`ip daddr ${a.replace(/\./g, '\\.')} .*counter packets (\\d+)`).exec(out)?.[1] ?? NaN));
  const delta = now.map((n, i) => n - synsBefore[i]!);
  synsBefore = now;
  return delta;
}

test.serial('the bench config is valid and spreads every measured service over every backend, equal weights', async (t) => {
  const cfg = writeBenchConfig(DEFAULT_CONFIG_DIR, join(scratch, 'config'), ['web', 'api', 'shop', 'dns']);
  t.deepEqual(cfg.backends, ADDRS);
  t.deepEqual(cfg.services.map((s) => s.url), ['http://203.0.113.10:80/', 'http://203.0.113.20:8080/', 'http://203.0.113.30:80/', 'http://203.0.113.40:53/']);
  const model = await loadConfigModel(cfg.dir); // the project's own parser and validation
  for (const name of ['web', 'api', 'shop', 'dns']) {
    const reals = model.services.find((s) => s.metadata.name === name)!.spec.reals;
    t.deepEqual(reals.map((r) => r.address), ADDRS, name);
    t.true(reals.every((r) => r.weight === reals[0]!.weight && r.state !== 'drain'), name);
  }
  // services the bench does not measure are the sample's, untouched
  const sample = await loadConfigModel(DEFAULT_CONFIG_DIR);
  const game = (m: typeof model) => m.services.find((s) => s.metadata.name === 'game')!.spec.reals;
  t.deepEqual(game(model), game(sample));
});

test.serial('the haproxy backend answers like the Node backend: every path 200, naming itself, the local and client address', async (t) => {
  const r = await nsExec(ns, ['curl', '-sS', '-i', '--max-time', '5', 'http://198.51.100.22:8080/any/path']);
  t.regex(r.stdout, /^HTTP\/1\.1 200/);
  t.regex(r.stdout, /\r\nx-backend: be-t\r\n/i);
  t.regex(r.stdout, /\r\n\r\nbackend=be-t local=198\.51\.100\.22:8080 client=198\.51\.100\.\d+:\d+\n$/);
  const h = await nsExec(ns, ['curl', '-sS', '-o', '/dev/null', '-w', '%{http_code}', '--max-time', '5', 'http://198.51.100.21:80/healthz']);
  t.is(h.stdout, '200');
  const v6 = await nsExec(ns, ['curl', '-sS', '--max-time', '5', 'http://[2001:db8::21]:80/']);
  t.regex(v6.stdout, /^backend=be-t local=2001:db8::21:80 client=/);
});

test.serial("wrk's spread script sends thread i to address i; without it every connection goes to the URL's host", async (t) => {
  await synsPerAddress();
  const spread = await wrk(ns, 'http://198.51.100.21:80/', { seconds: 1, connections: 3, threads: 3, closeEach: false, spreadOver: ADDRS });
  t.is(spread.errors, 0);
  t.true(spread.requests > 0);
  const s = await synsPerAddress();
  t.true(s.every((n) => n >= 1), `SYNs per address ${s.join(',')}`);

  const one = await wrk(ns, 'http://198.51.100.21:80/', { seconds: 1, connections: 3, threads: 3, closeEach: false });
  t.is(one.errors, 0);
  const o = await synsPerAddress();
  t.true(o[0]! >= 3, `SYNs per address ${o.join(',')}`);
  t.deepEqual(o.slice(1), [0, 0]);

  // Connection: close: one connection per request, each address several, and haproxy closes cleanly (no errors)
  const close = await wrk(ns, 'http://198.51.100.21:80/', { seconds: 1, connections: 3, threads: 3, closeEach: true, spreadOver: ADDRS });
  t.is(close.errors, 0);
  const c = await synsPerAddress();
  t.true(c.every((n) => n > 1), `SYNs per address ${c.join(',')}`);
});

test('spreadScript takes IP addresses only (they go into Lua source)', (t) => {
  t.throws(() => spreadScript(['198.51.100.21', 'x"); os.execute("id'], 80), { message: /not an IP address/ });
  t.regex(spreadScript(ADDRS, 8080), /wrk\.lookup\(addrs\[\(n - 1\) % #addrs \+ 1\], "8080"\)/);
});

test('summarize: each round against the directs just before and after it; medians and ranges over the rounds', (t) => {
  const s = (rps: number, cps: number, lat = '1.00ms') => ({
    rps: { requestsPerSec: rps, requests: rps, errors: 0, latencyAvg: lat },
    cps: { requestsPerSec: cps, requests: cps, errors: 1, latencyAvg: '9.00ms' },
  });
  // the machine slows down by half during the lab; the target is always 0.9x of the direct around it
  const direct = { name: 'direct', lab: 0, direct: true, samples: [s(1000, 100), s(800, 80), s(600, 60), s(500, 50)] };
  const vip = { name: 'vip', lab: 0, direct: false, samples: [s(810, 81), s(630, 63), s(495, 49.5, '850.00us')] };
  const other = { name: 'other lab', lab: 1, direct: false, samples: [s(10, 1)] };
  const [d, v, o] = summarize([direct, vip, other]);
  t.is(v!.rps.value, 630);
  t.is(v!.rps.ratio!.toFixed(3), '0.900');
  t.is(v!.rps.low!.toFixed(3), '0.900');
  t.is(v!.rps.high!.toFixed(3), '0.900');
  t.is(v!.cps.ratio!.toFixed(3), '0.900');
  t.is(v!.errors, 3);
  t.is(v!.latencyMs, 1);
  // direct: the median of its samples, and the drift as each sample / that median
  t.is(d!.rps.value, 700);
  t.is(d!.rps.low!.toFixed(3), (500 / 700).toFixed(3));
  t.is(d!.rps.high!.toFixed(3), (1000 / 700).toFixed(3));
  // no direct in its lab: no ratio
  t.is(o!.rps.ratio, null);
  t.is(latencyMs('1.02s'), 1020);
  t.true(Number.isNaN(latencyMs('?')));
  const table = formatTable([d!, v!, o!]);
  t.regex(table[2]!, /^vip +630 +0\.90 +0\.90-0\.90 +63 +0\.90 +0\.90-0\.90 +3  1\.00ms$/);
  t.regex(table[3]!, /^other lab +10 +- +1 +- +1  1\.00ms$/);
});
