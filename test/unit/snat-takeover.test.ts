// The takeover of a lost lb node's SNAT address (src/reconciler/flows/snat-takeover.ts): who takes it, when, and when it is
// given back; the frames that announce it (src/bpf/address-announce.ts); its BGP route (src/render/bgp/bird.ts).
// The end-to-end proof (a node's link down, 40 SNAT connections surviving) is test/lib/survival-matrix.ts (BIRD and FRR on the router),
// the IPv6 one test/netns/snat6-takeover-netns.test.ts.
import test from 'ava';
import { SnatTakeover, type HandBackWait, type SnatTakeoverOptions, type TakeoverPeer } from '../../src/reconciler/flows/snat-takeover.js';
import { gratuitousArp, unsolicitedNa } from '../../src/bpf/address-announce.js';
import { renderBirdConfig } from '../../src/render/bgp/bird.js';
import { PEERS as BGP_PEERS, file, goodFiles, lbNode, parse } from '../helpers/bgp-model.js';
import type { BpfObject } from '../../src/bpf/libbpf.js';

const PEERS: TakeoverPeer[] = [
  { node: 'lb-2', snatAddress: '198.51.100.112', probe: { host: '198.51.100.12', port: 7946 } },
  { node: 'lb-3', snatAddress: '198.51.100.113', probe: { host: '198.51.100.13', port: 7946 } },
];

/** A takeover of `self` whose world is scripted: which peers answer, what the interface holds, what was announced. */
function world(self: string, peers: TakeoverPeer[], own?: string | (() => string), nodeAddresses: string[] = [], extra: Partial<SnatTakeoverOptions> = {}) {
  const answers = new Map<string, boolean>(peers.map((p) => [p.probe.host, true]));
  const served = new Set<string>();
  const onIface = new Set<string>();
  const announced: string[] = [];
  let now = 0;
  let linkUp = true;
  const o: SnatTakeoverOptions = {
    node: self,
    peers: () => peers,
    ownSnatAddress: () => (typeof own === 'function' ? own() : own),
    nodeAddresses: () => nodeAddresses,
    interface: () => 'eth0',
    object: () => ({}) as BpfObject,
    probe: async (target) => answers.get(target.host) ?? false,
    addAddress: async (_i, a) => { const had = onIface.has(a); onIface.add(a); return !had; },
    removeAddress: async (_i, a) => { onIface.delete(a); },
    announce: (_i, a) => { announced.push(a); },
    link: async () => ({ up: linkUp, mac: '02:00:00:00:00:01' }),
    served: () => ({ serve: (a) => (served.add(a), true), unserve: (a) => { served.delete(a); }, list: () => [...served] }),
    now: () => now,
    ...extra,
  };
  const t = new SnatTakeover(o);
  return {
    t, served, onIface, announced,
    answer: (host: string, yes: boolean) => answers.set(host, yes),
    link: (up: boolean) => { linkUp = up; },
    ticks: async (n: number) => { for (let i = 0; i < n; i++) { now += 500; await t.tick(); } },
  };
}

test('a peer whose kernel does not answer 3 probes in a row is lost: the first living node by name serves, holds and announces its SNAT address', async (t) => {
  const w = world('lb-1', PEERS, '198.51.100.111');
  await w.ticks(1);
  t.deepEqual(w.announced, ['198.51.100.111'], 'a starting node announces its own address (it may have been taken over)');
  w.answer('198.51.100.12', false);
  await w.ticks(2);
  t.deepEqual(w.t.report(), { lost: [], serving: {} }, 'two misses are not a loss');
  await w.ticks(1);
  t.deepEqual(w.t.report(), { lost: ['lb-2'], serving: { '198.51.100.112': 'lb-2' } });
  t.deepEqual([...w.served], ['198.51.100.112']);
  t.deepEqual([...w.onIface], ['198.51.100.112']);
  await w.ticks(3);
  t.is(w.announced.filter((a) => a === '198.51.100.112').length, 3, 'announced 3 times, once a round');
});

test('only one survivor takes over: lb-3 leaves lb-2\'s address to lb-1 while lb-1 lives, and takes it when lb-1 is lost too', async (t) => {
  const w = world('lb-3', [{ node: 'lb-1', snatAddress: '198.51.100.111', probe: { host: '198.51.100.11', port: 7946 } }, PEERS[0]!], '198.51.100.113');
  w.answer('198.51.100.12', false);
  await w.ticks(4);
  t.deepEqual(w.t.report(), { lost: ['lb-2'], serving: {} });
  t.deepEqual([...w.onIface], []);
  w.answer('198.51.100.11', false);
  await w.ticks(3);
  t.deepEqual(w.t.report().serving, { '198.51.100.111': 'lb-1', '198.51.100.112': 'lb-2' });
});

test('a killed daemon is not a lost node: a refused probe (the kernel answered) takes nothing over (benign)', async (t) => {
  // the default probe: a TCP connection refused by a living kernel counts as an answer
  const { tcpProbe } = await import('../../src/reconciler/flows/snat-takeover.js');
  const { createServer } = await import('node:net');
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  t.true(await tcpProbe({ host: '127.0.0.1', port }, 500), 'connection refused: alive');
});

test('a node whose own link is down takes nothing over; its peers coming back make it announce its own address again', async (t) => {
  const w = world('lb-1', PEERS, '198.51.100.111');
  await w.ticks(3);
  w.announced.length = 0;
  w.link(false);
  w.answer('198.51.100.12', false);
  w.answer('198.51.100.13', false);
  await w.ticks(5);
  t.deepEqual(w.t.report(), { lost: [], serving: {} }, 'cut off: it judges no peer and serves nothing');
  w.link(true);
  w.answer('198.51.100.12', true);
  w.answer('198.51.100.13', true);
  await w.ticks(5);
  t.deepEqual(w.t.report(), { lost: [], serving: {} }, 'its link back: its peers answer, nothing was taken over');
  t.deepEqual(w.announced, ['198.51.100.111', '198.51.100.111', '198.51.100.111'], 'its own address taken back: announced 3 times');
});

test('the owner back: the address leaves the interface at once, replies to it are still translated for the grace, then not', async (t) => {
  const w = world('lb-1', PEERS, '198.51.100.111');
  w.answer('198.51.100.12', false);
  await w.ticks(3);
  t.deepEqual([...w.served], ['198.51.100.112']);
  w.answer('198.51.100.12', true);
  await w.ticks(2);
  t.deepEqual(w.t.report(), { lost: [], serving: {} });
  t.deepEqual([...w.onIface], [], 'no longer drawing replies');
  t.deepEqual([...w.served], ['198.51.100.112'], 'still translating what arrives');
  await w.ticks(10);
  t.deepEqual([...w.served], []);
});

test('an address already on the interface before the takeover is not removed when it is given back', async (t) => {
  const w = world('lb-1', PEERS, '198.51.100.111');
  w.onIface.add('198.51.100.112');
  w.answer('198.51.100.12', false);
  await w.ticks(3);
  w.answer('198.51.100.12', true);
  await w.ticks(14);
  t.deepEqual([...w.onIface], ['198.51.100.112']);
  t.deepEqual([...w.served], []);
});

test('a restarted daemon adopts what its data plane serves and gives it back when the owner answers', async (t) => {
  const w = world('lb-1', PEERS, '198.51.100.111');
  w.served.add('198.51.100.112');
  w.onIface.add('198.51.100.112');
  w.answer('198.51.100.12', false);
  await w.ticks(3);
  t.deepEqual(w.t.report().serving, { '198.51.100.112': 'lb-2' });
  w.answer('198.51.100.12', true);
  await w.ticks(14);
  t.deepEqual([...w.onIface], []);
  t.deepEqual([...w.served], []);
});

test('a SNAT address a living lb node shares is never taken over: lb-2 lost, lb-3 (same address, other ports) alive (attacker)', async (t) => {
  const shared = '198.51.100.120';
  const peers: TakeoverPeer[] = [
    { node: 'lb-2', snatAddress: shared, probe: { host: '198.51.100.12', port: 7946 } },
    { node: 'lb-3', snatAddress: shared, probe: { host: '198.51.100.13', port: 7946 } },
  ];
  const w = world('lb-1', peers, '198.51.100.111');
  w.answer('198.51.100.12', false);
  await w.ticks(5);
  t.deepEqual(w.t.report(), { lost: ['lb-2'], serving: {} }, 'lb-3 still holds it: taking it would steal lb-3\'s replies');
  t.deepEqual([...w.onIface], []);
  t.false(w.announced.includes(shared));
  // benign: both holders lost, the address is served
  w.answer('198.51.100.13', false);
  await w.ticks(3);
  t.deepEqual(w.t.report().serving, { [shared]: 'lb-2' });
});

test('a node\'s own address is never taken over as a SNAT address (the lost node\'s probe target: it would answer itself and flap) (attacker)', async (t) => {
  const peers: TakeoverPeer[] = [
    { node: 'lb-2', snatAddress: '198.51.100.12', probe: { host: '198.51.100.12', port: 7946 } },
    { node: 'lb-3', snatAddress: '198.51.100.5', probe: { host: '198.51.100.13', port: 7946 } },
  ];
  const w = world('lb-1', peers, '198.51.100.111', ['198.51.100.11', '198.51.100.12', '198.51.100.13', '198.51.100.5']);
  w.answer('198.51.100.12', false);
  w.answer('198.51.100.13', false);
  await w.ticks(5);
  t.deepEqual(w.t.report(), { lost: ['lb-2', 'lb-3'], serving: {} });
  t.deepEqual([...w.served], []);
  t.deepEqual([...w.onIface], []);
});

test('a served address that becomes a living node\'s (config change) is given back (attacker), a plain lost peer\'s is kept (benign)', async (t) => {
  const peers: TakeoverPeer[] = [...PEERS];
  const nodeAddresses = ['198.51.100.11', '198.51.100.12', '198.51.100.13'];
  const w = world('lb-1', peers, '198.51.100.111', nodeAddresses);
  w.answer('198.51.100.12', false);
  w.answer('198.51.100.13', false);
  await w.ticks(3);
  t.deepEqual(w.t.report().serving, { '198.51.100.112': 'lb-2', '198.51.100.113': 'lb-3' });
  nodeAddresses.push('198.51.100.113'); // a new node is given lb-3's old SNAT address
  await w.ticks(1);
  t.deepEqual(w.t.report().serving, { '198.51.100.112': 'lb-2' });
  t.deepEqual([...w.onIface], ['198.51.100.112']);
});

test('a probe whose answer arrived while the event loop was blocked past its timeout counts as an answer (a blip is not a loss)', async (t) => {
  const { tcpProbe } = await import('../../src/reconciler/flows/snat-takeover.js');
  const { createServer } = await import('node:net');
  const srv = createServer((c) => c.destroy());
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  try {
    const answered = tcpProbe({ host: '127.0.0.1', port }, 100);
    const until = Date.now() + 400;
    while (Date.now() < until) { /* a busy event loop (GC, a big render) */ }
    t.true(await answered, 'the kernel answered: alive');
    // benign: a refused port after the same stall is an answer too, and a plain probe stays fast
    const refused = tcpProbe({ host: '127.0.0.1', port: 1 }, 100);
    const until2 = Date.now() + 400;
    while (Date.now() < until2) { /* busy */ }
    t.true(await refused);
    const began = Date.now();
    t.true(await tcpProbe({ host: '127.0.0.1', port }, 100));
    t.true(Date.now() - began < 100);
  } finally {
    await new Promise<void>((r) => srv.close(() => r()));
  }
});

test('a peer whose answers come and go cannot make the address flap: each return within a minute doubles the misses needed, up to 8x (attacker)', async (t) => {
  const w = world('lb-1', PEERS, '198.51.100.111');
  let takeovers = 0;
  let serving = false;
  // 3 probes lost, 2 answered, over and over (a lossy path, or someone dropping the probes): 50 rounds, 25 s
  for (let round = 0; round < 50; round++) {
    w.answer('198.51.100.12', round % 5 >= 3);
    await w.ticks(1);
    const now = '198.51.100.112' in w.t.report().serving;
    if (now && !serving) takeovers++;
    serving = now;
  }
  t.true(takeovers <= 3, `taken over ${takeovers} times in 25 s (10 without damping)`);
  t.true(takeovers >= 1, 'the first loss is taken over as before');
});

test('damping fades: a peer answering for a minute after its flaps is taken over after 3 misses again (benign)', async (t) => {
  const w = world('lb-1', PEERS, '198.51.100.111');
  for (let i = 0; i < 3; i++) {
    w.answer('198.51.100.12', false);
    await w.ticks(24);
    w.answer('198.51.100.12', true);
    await w.ticks(2);
  }
  await w.ticks(130); // 65 s of answers
  w.answer('198.51.100.12', false);
  await w.ticks(3);
  t.deepEqual(w.t.report().serving, { '198.51.100.112': 'lb-2' });
});

test('a served address that becomes this node\'s own SNAT address (config change) stays on its interface (attacker: it was removed)', async (t) => {
  const peers: TakeoverPeer[] = [{ ...PEERS[0]! }, PEERS[1]!];
  let own = '198.51.100.111';
  const w = world('lb-1', peers, () => own);
  w.answer('198.51.100.12', false);
  await w.ticks(3);
  t.deepEqual([...w.onIface], ['198.51.100.112']);
  own = '198.51.100.112'; // the operator gives lb-2's old address to lb-1, and lb-2 a new one
  peers[0] = { ...peers[0]!, snatAddress: '198.51.100.122' };
  await w.ticks(14);
  t.true(w.onIface.has('198.51.100.112'), 'this node\'s own SNAT address is not taken off its interface');
  t.deepEqual(w.t.report().serving, { '198.51.100.122': 'lb-2' }, 'benign: lb-2\'s new address is served');
});

test('a returned owner gets its address back only once it has its own translations (handBackWaitingFor): until then replies are still drawn and translated here, and the report says so', async (t) => {
  let waiting: HandBackWait[] = ['sync-spoke'];
  const asked: Array<[string, number]> = [];
  const nudged: string[] = [];
  const told: string[] = [];
  const w = world('lb-1', PEERS, '198.51.100.111', [], { handBackWaitingFor: (node, since) => { asked.push([node, since]); return waiting; },
    nudge: (node) => nudged.push(node), onHandbackChange: (why) => told.push(why) });
  w.answer('198.51.100.12', false);
  await w.ticks(3);
  t.deepEqual(w.t.report(), { lost: ['lb-2'], serving: { '198.51.100.112': 'lb-2' } }, 'lost, not returned: no handback reported');
  w.answer('198.51.100.12', true); // its kernel answers (a reboot: its daemon is not even up yet)
  await w.ticks(20);
  // answered again at the second round after the loss: 3 + 2 rounds of 500 ms
  const held = { owner: 'lb-2', since: new Date(2500).toISOString(), waitingFor: ['sync-spoke'], limitSeconds: 120, giveBackBy: new Date(122_500).toISOString() };
  t.deepEqual(w.t.report(), { lost: [], serving: { '198.51.100.112': 'lb-2' }, handback: { '198.51.100.112': held } },
    'not lost, but still served: it has no translations yet, and the report says for whom, since when, waiting for what');
  t.deepEqual(told, ['snat takeover: holding lb-2\'s SNAT address 198.51.100.112 until it has its own translations (waiting for: sync-spoke)'], 'told once');
  waiting = ['own-translations']; // its sync spoke (a rebooted node: it asked for its own translations)
  await w.ticks(1);
  t.deepEqual(w.t.report().handback, { '198.51.100.112': { ...held, waitingFor: ['own-translations'] } });
  t.is(told.length, 2, 'what it waits for changed: told again');
  t.deepEqual([...w.onIface], ['198.51.100.112'], 'still drawing its replies here');
  t.deepEqual([...w.served], ['198.51.100.112']);
  t.true(asked.length > 0 && asked.every(([n, since]) => n === 'lb-2' && since === asked[0]![1]), 'asked about lb-2 since the moment it answered again');
  t.true(nudged.length >= 19 && nudged.every((n) => n === 'lb-2'), 'its sync nudged to talk to lb-2 each round it waits');
  waiting = []; // its sync spoke and the copies of its own translations reached it
  await w.ticks(1);
  const after = nudged.length;
  t.deepEqual(w.t.report(), { lost: [], serving: {} }, 'given back: no longer served nor reported as held');
  t.regex(told.at(-1)!, /lb-2's SNAT address 198\.51\.100\.112 no longer held for it/);
  t.deepEqual([...w.onIface], []);
  await w.ticks(10);
  t.deepEqual([...w.served], [], 'and no longer translated after the grace');
  t.is(nudged.length, after, 'no nudge once ready');
});

test('a returned owner that never says it is ready (an older version, its daemon not up) gets its address back at the bound (--snat-handback-limit), with a warning naming what was missing', async (t) => {
  const warned: string[] = [];
  const w = world('lb-1', PEERS, '198.51.100.111', [], { handBackWaitingFor: () => ['sync-spoke', 'own-translations'], handBackBoundMs: 10_000,
    log: { info: () => {}, warn: (m) => warned.push(m) } });
  w.answer('198.51.100.12', false);
  await w.ticks(3);
  w.answer('198.51.100.12', true);
  await w.ticks(2 + 18); // answered again after 2 rounds, then 9 s
  t.deepEqual(w.t.report().serving, { '198.51.100.112': 'lb-2' }, 'not before the bound');
  t.like(w.t.report().handback?.['198.51.100.112'], { owner: 'lb-2', waitingFor: ['sync-spoke', 'own-translations'], limitSeconds: 10,
    giveBackBy: new Date(2500 + 10_000).toISOString() }, 'the limit reported is the one given');
  await w.ticks(3);
  t.deepEqual(w.t.report(), { lost: [], serving: {} }, 'at the bound: given back, no longer reported as held');
  t.deepEqual(warned, ['snat takeover: lb-2 answers again but did not show it has its own SNAT translations back within 10 s (still waiting for: sync-spoke, own-translations; --snat-handback-limit 10)']);
  // lost again while waiting: served again at once, as any loss, and no longer reported as held for a returned owner
  const v = world('lb-1', PEERS, '198.51.100.111', [], { handBackWaitingFor: () => ['sync-spoke'] });
  v.answer('198.51.100.12', false);
  await v.ticks(3);
  v.answer('198.51.100.12', true);
  await v.ticks(4);
  t.truthy(v.t.report().handback?.['198.51.100.112']);
  v.answer('198.51.100.12', false);
  await v.ticks(6);
  t.deepEqual(v.t.report(), { lost: ['lb-2'], serving: { '198.51.100.112': 'lb-2' } });
});

test('a node rejoining with empty maps does not announce its own SNAT address until its own translations are back (ownAddressHeld); then it does, 3 times', async (t) => {
  let held = true;
  const w = world('lb-1', PEERS, '198.51.100.111', [], { ownAddressHeld: () => held });
  await w.ticks(5);
  t.deepEqual(w.announced, [], 'no announcement of its own address while held');
  held = false;
  await w.ticks(5);
  t.deepEqual(w.announced, ['198.51.100.111', '198.51.100.111', '198.51.100.111']);
});

/** RFC 1071 sum over the pseudo header and the ICMPv6 message: 0xffff when the checksum is right. */
function icmp6Sum(frame: Buffer): number {
  const ip = frame.subarray(14, 54);
  const icmp = frame.subarray(54);
  const pseudo = Buffer.concat([ip.subarray(8, 40), Buffer.from([0, 0, 0, icmp.length, 0, 0, 0, 58])]);
  let sum = 0;
  for (const b of [pseudo, icmp]) for (let i = 0; i < b.length; i += 2) sum += b.readUInt16BE(i);
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return sum;
}

test('announcement frames: a gratuitous ARP request (sender = target = the address) and an unsolicited NA with override', (t) => {
  const mac = Buffer.from('02aabbccddee', 'hex');
  const arp = gratuitousArp('198.51.100.111', mac);
  t.is(arp.length, 60);
  t.is(arp.subarray(0, 14).toString('hex'), 'ffffffffffff02aabbccddee0806');
  t.is(arp.subarray(14, 42).toString('hex'), '000108000604' + '0001' + '02aabbccddee' + 'c633646f' + '000000000000' + 'c633646f');
  const na = unsolicitedNa('2001:db8:1::111', mac);
  t.is(na.subarray(0, 14).toString('hex'), '33330000000102aabbccddee86dd');
  t.is(na[20], 58);
  t.is(na[21], 255);
  t.is(na[54], 136);
  t.is(na.readUInt32BE(58), 0x20000000, 'override, not solicited, not a router');
  t.is(na.subarray(62, 78).toString('hex'), '20010db8000100000000000000000111');
  t.is(na.subarray(78, 86).toString('hex'), '020102aabbccddee');
  t.is(icmp6Sum(na), 0xffff);
});

test('BIRD: a taken-over SNAT address is a host route beside the VIPs; without takeover the file is unchanged; an address of no peer is refused', (t) => {
  const { model, lines } = parse([...goodFiles(`${BGP_PEERS}  snatAddress: 198.51.100.111\n`),
    file('nodes/lb-2.yaml', lbNode('lb-2', '  snatAddress: 198.51.100.112\n'))]);
  if (!model) throw new Error(lines.join('\n'));
  const plain = renderBirdConfig(model, 'lb-1', []);
  t.is(renderBirdConfig(model, 'lb-1', [], { snatTakeover: [] }), plain);
  const peerSnat = model.nodes.find((n) => n.metadata.name === 'lb-2')!.spec.snatAddress;
  t.truthy(peerSnat, 'the model gives lb-2 a SNAT address');
  const taken = renderBirdConfig(model, 'lb-1', [], { snatTakeover: [peerSnat!] })!;
  t.true(taken.includes(`  route ${peerSnat}/32 blackhole;`));
  t.true(taken.includes(`# SNAT addresses of lost lb nodes, taken over: ${peerSnat}`));
  const own = model.nodes.find((n) => n.metadata.name === 'lb-1')!.spec.snatAddress!;
  t.throws(() => renderBirdConfig(model, 'lb-1', [], { snatTakeover: [own] }), { message: /not another lb node's snatAddress/ });
  t.throws(() => renderBirdConfig(model, 'lb-1', [], { snatTakeover: ['203.0.113.99'] }), { message: /not another lb node's snatAddress/ });
});

test('--snat-handback-limit 0: a returned owner gets its address back in the round it answers again, and nothing is reported as held (benign)', async (t) => {
  const said: string[] = [];
  const warned: string[] = [];
  const w = world('lb-1', PEERS, '198.51.100.111', [], { handBackWaitingFor: () => ['sync-spoke'], handBackBoundMs: 0,
    log: { info: (m) => said.push(m), warn: (m) => warned.push(m) } });
  w.answer('198.51.100.12', false);
  await w.ticks(3);
  w.answer('198.51.100.12', true);
  await w.ticks(2);
  t.deepEqual(w.t.report(), { lost: [], serving: {} });
  t.deepEqual([...w.onIface], []);
  t.deepEqual(warned, [], 'no hold was asked for: nothing to warn about');
  t.true(said.includes('snat takeover: lb-2 answers again: its SNAT address goes back at once (--snat-handback-limit 0; not yet shown: sync-spoke)'), said.join('\n'));
});
