// Other projects' packets against xdp_lb and the backend TC programs, judged by the same checks as our own hostile
// corpus (test/lib/hostile.ts, through test/lib/hostile-xdp-harness.ts and test/lib/hostile-backend.ts):
//   - frames built at test time by Debian's python3-scapy with its own layers and defaults (test/foreign-packets.py),
//     aimed at our VIPs, ports, SNAT address and backend addresses and at addresses that are none of them;
//   - sample captures shipped by Debian packages (test/lib/pcap.ts), read from their installed paths, as captured
//     and re-addressed to our VIPs / backend.
// `make deps` installs both; nothing of theirs is in this repository. The captures keep their own (public and
// private) addresses in the "as captured" runs: BPF_PROG_TEST_RUN hands every output back to the test and sends
// nothing (no live-frames mode), and next-hop lookups see only the lab namespace. Every output is checked for valid
// checksums and lengths and an allowed action, every packet is accounted for by one counter, and the log prints the
// count of each action and counter per corpus. docs/datapath.md and docs/backend.md, "Hostile packets".
import test from 'ava';
import { execFile } from 'node:child_process';
import { LAB, runHarnessScript, setupLab, teardownLab } from '../lib/xdp-lab.js';
import { ETH_IN, XDP, XDP_STATE, BACKEND } from '../lib/hostile-setups.js';
import { stateToJson } from '../lib/xdp-harness.js';
import type { BatchSummary, HostileInput } from '../lib/hostile-xdp-harness.js';
import { frame, ipPacket } from '../lib/packets.js';
import { flowHash } from '../../src/bpf/dataplane/flow-hash.js';
import { DEBIAN_PCAPS, missingPcaps, readPcap, retarget } from '../lib/pcap.js';
import { addTunnelVips, backendStats, loadBackendProgs } from '../lib/backend-prog.js';
import { STAT_NAMES } from '../../src/bpf/backend/codec.js';
import { fuzz, type Summary } from '../lib/hostile-backend.js';

const TAG = 'hfor';
const SCAPY = ['/usr/bin/python3', new URL('../foreign-packets.py', import.meta.url).pathname];
const SNAT_SYN = frame(ETH_IN, ipPacket({ src: XDP.snatClient, dst: XDP.vips.snat, l4: { udp: { sport: 43100, dport: 53, payload: Buffer.from('query') } } }));
const SNAT_REAL_PORT = 53; // the SNAT VIP's UDP port 53 goes to the real's port 53
// the SNAT port the flow of SNAT_SYN gets in an empty table (the first port probed: range start + flow hash with the
// source port: docs/datapath.md, "Port allocation"), so scapy can build that flow's replies and ICMP errors while the lab comes
// up; the harness checks the program agrees
const STATE = XDP_STATE;
const SNAT_PORT = STATE.snatPorts.min + flowHash({ src: XDP.snatClient, dst: XDP.vips.snat, sport: 43100, dport: 53, proto: 17 }, true, XDP.seed)
  % (STATE.snatPorts.max - STATE.snatPorts.min + 1);

type Frames = Array<[string, string]>;
interface Corpus { xdp: Frames; ingress: Frames; egress: Frames }

/** scapy's frames for the addresses below; run inside the lab namespace, so scapy sees only the lab's links. */
function scapyCorpus(ns: string, snatPort: number): Promise<Corpus> {
  const input = {
    xdp: {
      vips: XDP.vips, nonVip4: '203.0.113.99', nonVip6: '2001:db8:f::99', lb6: LAB.lbA.v6, snatAddress: LAB.lbA.v4,
      client4: XDP.client4, client6: XDP.client6, clientMac: LAB.clientMac, lbMac: LAB.lbA.mac, tcpPort: 80, udpPort: 53,
      snat: { port: snatPort, real: XDP.real4, realMac: LAB.neighbours[XDP.real4], realPort: SNAT_REAL_PORT, router: '198.51.100.254' },
    },
    backend: {
      vipPort: BACKEND.vipPort, targetPort: BACKEND.targetPort,
      v4: { ...BACKEND.v4, router: '203.0.113.254' }, v6: { ...BACKEND.v6, router: '2001:db8:1::fe' },
    },
  };
  return new Promise((resolve, reject) => {
    const child = execFile('ip', ['netns', 'exec', ns, ...SCAPY], { maxBuffer: 64 << 20 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`${SCAPY[1]}: ${err.message} ${stderr}`));
      resolve(JSON.parse(stdout) as Corpus);
    });
    child.stdin!.end(JSON.stringify(input));
  });
}

/** The Debian sample captures: as captured, and re-addressed to `to` (IP frames only). */
function pcapCorpus(to: (i: number) => Parameters<typeof retarget>[1]): { raw: Frames; retargeted: Frames } {
  const raw: Frames = [];
  const retargeted: Frames = [];
  let n = 0;
  for (const [pkg, paths] of Object.entries(DEBIAN_PCAPS))
    for (const p of paths)
      readPcap(p).forEach((f, i) => {
        const name = `${pkg} ${p.split('/').pop()} #${i}`;
        if (f.length >= 14) raw.push([name, f.toString('hex')]);
        const g = retarget(f, to(n++));
        if (g) retargeted.push([`${name} retargeted`, g.toString('hex')]);
      });
  return { raw, retargeted };
}

/** A problem with its frames cut to their first 80 bytes (the checks name the field; the log stays readable). */
const short = (p: string) => p.replace(/[0-9a-f]{200,}/g, (h) => `${h.slice(0, 160)}…(${h.length / 2} bytes)`);

const V = XDP.vips;
const XDP_TARGETS4 = [V.l2, V.ipip, V.ipopt, V.snat];
const XDP_TARGETS6 = [V.l2v6, V.ipipv6];

let corpus: Promise<Corpus>;
let xdpSuite: Promise<BatchSummary[]>;

test.before(() => {
  const missing = missingPcaps();
  if (missing.length) throw new Error(`sample captures missing (run make deps): ${missing.join(', ')}`);
  const { ns, pinRoot } = setupLab(TAG);
  corpus = scapyCorpus(ns, SNAT_PORT);
  corpus.catch(() => undefined);
  xdpSuite = corpus.then((c) => {
    const pcaps = pcapCorpus((i) => ({ srcMac: LAB.clientMac, dstMac: LAB.lbA.mac, dst4: XDP_TARGETS4[i % 4], dst6: XDP_TARGETS6[i % 2] }));
    return runHarnessScript(new URL('../lib/hostile-xdp-harness.ts', import.meta.url).pathname, ns, {
      pinRoot, state: stateToJson(STATE), ifname: 'lbA', mtu: XDP.mtu, kinds: {}, flips: 0, seed: 0,
      snatSyn: SNAT_SYN.toString('hex'), snatPort: SNAT_PORT,
      snat: { address: LAB.lbA.v4, mac: LAB.lbA.mac, real: XDP.real4, realMac: LAB.neighbours[XDP.real4]! },
      corpora: [
        { batch: 'scapy', frames: c.xdp },
        { batch: 'Debian sample captures', frames: pcaps.raw },
        { batch: 'Debian sample captures to our VIPs', frames: pcaps.retargeted },
      ],
    } satisfies HostileInput, 120_000) as Promise<BatchSummary[]>;
  });
  xdpSuite.catch(() => undefined);
});
test.after.always(() => teardownLab(TAG));

test('foreign packets: xdp_lb keeps every invariant over scapy frames and Debian sample captures', async (t) => {
  const batches = await xdpSuite;
  for (const b of batches) {
    console.log(`xdp_lb ${b.batch}: ${b.runs} runs ${JSON.stringify(b.actions)} counters ${JSON.stringify(b.counters)}`);
    t.deepEqual(b.problems.map(short), [], b.batch);
  }
  const scapy = batches.find((b) => b.batch === 'scapy')!;
  t.true(scapy.runs >= 500, `${scapy.runs} scapy frames`);
  // the corpus reaches every way out and the SNAT return path, not only the kernel's
  for (const k of ['tx', 'redirect', 'icmp_sent', 'ct_miss', 'ct_hit', 'pass_not_vip', 'pass_not_ip', 'drop_fragment', 'snat_reply', 'snat_icmp', 'snat_new'])
    t.true((scapy.counters[k] ?? 0) > 0, `scapy frames never moved ${k}`);
});

test.serial('foreign packets: backend_ingress then backend_egress keep every invariant', async (t) => {
  const c = await corpus;
  const { obj, ingress, egress } = await loadBackendProgs(BACKEND.v4, BACKEND.v6);
  try {
    addTunnelVips(obj, BACKEND, BACKEND.vipPort, BACKEND.targetPort);
    const frames = (f: Frames) => f.map(([name, hex]) => ({ name, frame: Buffer.from(hex, 'hex') }));
    const eth = { srcMac: '02:00:00:00:00:01', dstMac: '02:00:00:00:00:02' };
    const toReal = pcapCorpus(() => ({ ...eth, dst4: BACKEND.v4.real, dst6: BACKEND.v6.real }));
    const fromReal = pcapCorpus(() => ({ ...eth, src4: BACKEND.v4.real, src6: BACKEND.v6.real }));
    const before = backendStats(obj);
    // ingress first: its ipopt requests record the flows whose replies and ICMP errors egress then rewrites
    const runs: Array<[string, Summary]> = [
      ['backend_ingress scapy', fuzz(obj, ingress, frames(c.ingress))],
      ['backend_ingress Debian sample captures', fuzz(obj, ingress, frames(toReal.raw))],
      ['backend_ingress Debian sample captures to the real', fuzz(obj, ingress, frames(toReal.retargeted))],
      ['backend_egress scapy', fuzz(obj, egress, frames(c.egress))],
      ['backend_egress Debian sample captures', fuzz(obj, egress, frames(fromReal.raw))],
      ['backend_egress Debian sample captures from the real', fuzz(obj, egress, frames(fromReal.retargeted))],
    ];
    for (const [name, s] of runs) {
      console.log(`${name}: ${s.runs} runs ${JSON.stringify(s.actions)} drops ${JSON.stringify(s.drops)}`);
      t.deepEqual(s.problems.map(short), [], name);
    }
    t.true(runs[0]![1].runs >= 200 && runs[3]![1].runs >= 100, 'scapy frames per backend program');
    // the corpus reaches every rewrite and refusal, not only the untouched path
    const after = backendStats(obj);
    const moved = Object.fromEntries(STAT_NAMES.map((k) => [k, after[k] - before[k]]).filter(([, d]) => d));
    console.log(`backend counters: ${JSON.stringify(moved)}`);
    for (const k of ['decap_ipip4', 'decap_ipip6', 'decap_4in6', 'decap_6in4', 'ipip_not_vip', 'ipopt4', 'ipopt6', 'ipopt_not_vip', 'fragment',
      'decap_not_allowed', 'reply4_rewrite', 'reply6_rewrite', 'icmp4_rewrite', 'icmp6_rewrite'] as const)
      t.true((moved[k] ?? 0) > 0, `never moved ${k}`);
  } finally {
    obj.close();
  }
});
