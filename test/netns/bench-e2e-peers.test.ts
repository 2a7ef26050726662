// bench/e2e's peers on lb-1 (bench/e2e/peers.ts), in a lab with gitlb's daemons running as the bench runs them:
// each peer spreads over all three backends and really passes lb-1 (counted by its nftables rule there, and by
// gitlb's own not_vip pass counter: lb-1's XDP program hands the peer traffic to the kernel untouched), the
// full-NAT and haproxy peers' connections reach the backends from lb-1's address, each ruleset is gone after its
// measurement, a rule that counted nothing fails the measurement, and stop() removes every address and route.
import test, { type ExecutionContext } from 'ava';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DEFAULT_CONFIG_DIR, labDown, labNs, labUp, type LabState } from '../../src/lab/lab.js';
import { exec, nsArgv, run, sleep } from '../../src/lab/netns.js';
import { runTraffic, tally } from '../../src/demo/traffic.js';
import { waitForLocalApplied } from '../../src/demo/status-watch.js';
import { writeBenchConfig, type BenchConfig } from '../../bench/e2e/config.js';
import * as peers from '../../bench/e2e/peers.js';

const scratch = mkdtempSync(join(tmpdir(), 'gitlb-bench-peers-test-'));
let state: LabState;
let cfg: BenchConfig;
let started: Awaited<ReturnType<typeof peers.startPeers>>;

test.before(async () => {
  cfg = writeBenchConfig(DEFAULT_CONFIG_DIR, join(scratch, 'config'), ['web', 'api', 'shop', 'dns']);
  state = await labUp({ stateDir: join(scratch, 'lab'), configDir: cfg.dir, routing: 'static', backendHttp: 'haproxy' });
  const bad = state.daemons.filter((d) => !d.started);
  if (bad.length) throw new Error(`daemons not running: ${bad.map((d) => `${d.node}: ${d.reason}`).join('; ')}`);
  const head = (await run(['git', '--git-dir', state.git!.bare, 'rev-parse', 'main'])).stdout.trim();
  const w = await waitForLocalApplied(state.stateDir, state.plan.nodes.map((n) => n.name), head, 120_000);
  if (!w.ok) throw new Error(`daemons of ${w.missing.join(', ')} did not apply ${head} within 120 s`);
  started = await peers.startPeers(state, cfg.dir, cfg.backends, scratch);
});

test.after.always(async () => {
  await started?.stop().catch(() => {});
  await labDown(join(scratch, 'lab')).catch(() => {});
  rmSync(scratch, { recursive: true, force: true });
});

const target = (prefix: string) => {
  const t = started.targets.find((x) => x.name.startsWith(prefix));
  if (!t) throw new Error(`no peer named ${prefix}...`);
  return t;
};
const lbNs = () => labNs(state, peers.PEER_NODE);
const routerNs = () => labNs(state, 'router');

/** gitlb_passes_total{reason="not_vip"} of lb-1's daemon: packets its XDP program handed to the kernel as non-VIP. */
async function lbNotVipPasses(): Promise<number> {
  const lb = state.plan.nodes.find((n) => n.name === peers.PEER_NODE)!;
  const url = `http://${lb.addresses.find((a) => !a.includes(':'))}:9462/metrics`;
  const out = (await run(nsArgv(routerNs(), ['curl', '-sS', '--max-time', '10', url]))).stdout;
  const lines = [...out.matchAll(/^gitlb_passes_total\{[^}]*reason="not_vip"[^}]*\} (\d+)/gm)];
  if (lines.length === 0) throw new Error('no gitlb_passes_total{reason="not_vip"} in lb-1\'s metrics');
  return lines.reduce((a, m) => a + Number(m[1]), 0);
}

/** lb-1's not_vip passes once they have grown by at least `atLeast` since `since`, or the last figure after 10 s:
 * the exporter reads the kernel's counters at most once per its memo interval (src/reconciler/metrics/dataplane.ts),
 * so a scrape right after the traffic can still show the figure from before it. */
async function notVipPassesSince(since: number, atLeast: number): Promise<number> {
  let grown = (await lbNotVipPasses()) - since;
  for (let i = 0; i < 40 && grown < atLeast; i++) {
    await sleep(250);
    grown = (await lbNotVipPasses()) - since;
  }
  return grown;
}

/** 30 new connections from the clients to the peer; the backends that answered, and failures. */
async function burst(url: string) {
  const u = new URL(url);
  const r = await runTraffic(labNs(state, 'client'), { kind: 'burst', host: u.hostname, port: Number(u.port || 80), count: 30, concurrency: 6, sources: state.plan.client.v4, timeoutMs: 5000 });
  return tally(r.records);
}

type Peer = (typeof started.targets)[number];

/** A burst through peer `p` inside its measurement (before/after, as bench/e2e runs it): every backend answers, none
 * fails; then `inside` with the peer's URL, still within the measurement. */
async function throughPeer(t: ExecutionContext, p: Peer, inside: (url: string) => Promise<void> = async () => {}): Promise<void> {
  await p.before();
  try {
    const s = await burst(p.url);
    t.is(s.failed, 0, `${p.name}: ${JSON.stringify(s.errors)}`);
    t.deepEqual(Object.keys(s.byBackend).sort(), ['be-1', 'be-2', 'be-3'], `${p.name}: ${JSON.stringify(s.byBackend)}`);
    await inside(p.url);
  } finally {
    await p.after();
  }
}

/** Whether nftables table `family name` is gone from lb-1. */
async function rulesetGone(family: string, name: string): Promise<boolean> {
  return (await exec(nsArgv(lbNs(), ['nft', 'list', 'table', family, name]))).code !== 0;
}

/** One request's reply body: `backend=... local=ADDR:PORT client=ADDR:PORT` as the backend saw the connection. */
async function reply(url: string): Promise<string> {
  return (await run(nsArgv(labNs(state, 'client'), ['curl', '-sS', '--max-time', '5', url]))).stdout;
}

const lbAddr = () => state.plan.nodes.find((n) => n.name === peers.PEER_NODE)!.addresses.find((a) => !a.includes(':'))!;

test.serial('the peer addresses: test addresses, no VIP, no lab address; the router routes them to lb-1', async (t) => {
  const model = { vips: [...cfg.services.map((s) => new URL(s.url).hostname), '198.51.100.199'], ranges: ['203.0.113.0/24'] };
  t.notThrows(() => peers.checkPeerAddresses(state, model.vips, model.ranges));
  // what the check is for: addresses the lab uses (lb-1, its SNAT address, the Git server, web's VIP on the
  // backends' lo), a VIP, an address in a VIP range, one outside the test ranges
  for (const [addr, why] of [['198.51.100.11', /already used/], ['198.51.100.111', /already used/], ['198.51.100.2', /already used/],
    ['203.0.113.10', /already used/], ['198.51.100.199', /a VIP/], ['203.0.113.77', /VIP range/], ['10.0.0.1', /outside the test ranges/]] as const) {
    t.throws(() => peers.checkPeerAddresses(state, model.vips, model.ranges, [addr]), { message: why }, addr);
  }
  for (const a of [peers.LB_PEER_ADDR, peers.LB_DSR_ADDR]) {
    const r = await run(nsArgv(routerNs(), ['ip', 'route', 'get', a]));
    t.regex(r.stdout, new RegExp(`via ${lbAddr().replace(/\./g, '\\.')} `), a);
  }
});

test.serial('nftables full NAT on lb-1: every backend, from lb-1\'s address, through its DNAT rule and past gitlb\'s XDP program', async (t) => {
  const passes0 = await lbNotVipPasses();
  await throughPeer(t, target('nftables full nat on lb-1'), async (url) => {
    t.regex(await reply(url), /local=198\.51\.100\.2[123]:80 client=198\.51\.100\.150:\d+/, 'SNAT to lb-1\'s peer address');
    // the nat chain sees each connection's first packet: 30 connections, plus the one request above
    const conns = await peers.nftCounter(lbNs(), 'ip', 'gitlb_bench_lb_nat', peers.LB_PEER_ADDR);
    t.is(conns, 31);
    t.true((await notVipPassesSince(passes0, 31 * 3)) >= 31 * 3, 'lb-1\'s XDP program passed the peer\'s packets to the kernel');
  });
  t.true(await rulesetGone('ip', 'gitlb_bench_lb_nat'), 'the ruleset is gone after the measurement');
});

test.serial('nftables stateless DSR on lb-1: every backend, the client\'s address kept, every packet through lb-1\'s rule', async (t) => {
  const passes0 = await lbNotVipPasses();
  await throughPeer(t, target('nftables dsr on lb-1'), async (url) => {
    t.regex(await reply(url), /local=198\.51\.100\.151:80 client=192\.0\.2\.\d+:\d+/);
    // SYN, ACK, request, ACK/FIN...: at least three packets per connection came to lb-1 and were sent on
    const packets = (await peers.nftCounter(lbNs(), 'netdev', 'gitlb_bench_lb_dsr', peers.LB_DSR_ADDR))!;
    t.true(packets >= 31 * 3, `packets ${packets}`);
    t.true((await notVipPassesSince(passes0, packets)) >= packets, 'lb-1\'s XDP program passed every packet the rule then forwarded');
  });
  t.true(await rulesetGone('netdev', 'gitlb_bench_lb_dsr'), 'the ruleset is gone after the measurement');
});

test.serial('haproxy on lb-1 and the router peers: every backend; haproxy on lb-1 connects from lb-1\'s address', async (t) => {
  for (const prefix of ['haproxy tcp mode on lb-1', 'nftables dnat on the router', 'haproxy tcp mode on the router']) await throughPeer(t, target(prefix));
  t.regex(await reply(target('haproxy tcp mode on lb-1').url), new RegExp(`client=${lbAddr().replace(/\./g, '\\.')}:\\d+`));
  // the router's DNAT: the client connects from its second address (never the 4-tuples direct leaves in TIME_WAIT)
  const nft = target('nftables dnat on the router');
  await nft.before();
  try {
    t.regex(await reply(nft.url), new RegExp(`local=198\\.51\\.100\\.2[123]:80 client=${state.plan.client.v4[1]!.replace(/\./g, '\\.')}:\\d+`));
  } finally {
    await nft.after();
  }
});

test.serial('a peer whose rule counted nothing fails its measurement (and its ruleset is removed all the same)', async (t) => {
  const p = target('nftables full nat on lb-1');
  await p.before();
  await t.throwsAsync(p.after(), { message: /counted no packets/ });
  t.true(await rulesetGone('ip', 'gitlb_bench_lb_nat'));
});

test.serial('stop() removes the peers\' processes, addresses and routes', async (t) => {
  await started.stop();
  for (const a of [peers.LB_PEER_ADDR, peers.LB_DSR_ADDR]) {
    const r = await run(nsArgv(routerNs(), ['ip', 'route', 'show', `${a}/32`]));
    t.is(r.stdout.trim(), '', a);
  }
  t.notRegex((await run(nsArgv(lbNs(), ['ip', 'addr', 'show', 'dev', 'lo']))).stdout, /198\.51\.100\.150/);
  t.is((await run(nsArgv(labNs(state, 'client'), ['ip', 'route', 'show', `${peers.ROUTER_NFT.addr}/32`]))).stdout.trim(), '');
  for (const b of state.plan.nodes.filter((n) => n.role === 'backend')) {
    t.notRegex((await run(nsArgv(labNs(state, b.ns), ['ip', 'addr', 'show', 'dev', 'lo']))).stdout, /198\.51\.100\.151/, b.name);
  }
  const h = await exec(nsArgv(lbNs(), ['ss', '-Htln', `sport = :${peers.LB_HAPROXY.port}`]));
  t.is(h.stdout.trim(), '', 'haproxy on lb-1 stopped');
});
