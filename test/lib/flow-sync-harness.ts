// Two lb nodes' data planes (two pin roots) and their connection-state sync (src/reconciler/flows/flow-sync.ts) over two
// real peer channels on 127.0.0.1, all inside a test network namespace (bpf_fib_lookup needs the lab's neighbours;
// the channels' TCP stays in the namespace). Packets go through each node's xdp_lb by BPF_PROG_TEST_RUN. Runs the
// scenario of test/netns/flow-sync.test.ts and prints one JSON observation per named step; the test asserts.
import { mkdirSync, readFileSync, rmSync } from 'node:fs';
import { openLbDataPlane } from '../../src/bpf/dataplane/index.js';
import { FlowSync, FLOW_SYNC_KIND } from '../../src/reconciler/flows/flow-sync.js';
import { serveSnatAddress, servedSnatAddresses, unserveSnatAddress } from '../../src/bpf/dataplane/flow-state.js';
import { startPeerChannel, secretAuth, type PeerChannel } from '../../src/reconciler/peer/index.js';
import { newNonce, PEER_PATH_PREFIX, seal } from '../../src/reconciler/peer/frame.js';
import { request as httpRequest } from 'node:http';
import type { DesiredState } from '../../src/render/state.js';
import { runPacket, stateFromJson } from './xdp-harness.js';
import { decodeFlowValue, encodeFlowKey, encodeU32 } from '../../src/bpf/dataplane/codec.js';
import { decodeSnatConfig, encodeSnatConfig, monotonicNs, sweepSnat } from '../../src/bpf/dataplane/snat.js';
import { applyTo } from './converge.js';
import { LAB, runHarnessScript } from './xdp-lab.js';
import { TCP_FLAGS, frame, ipPacket } from './packets.js';

export interface FlowSyncInput {
  pinRoot: string;
  secret: string;
  /** Desired states by name, per node (a: lb-a, b: lb-b). */
  states: Record<string, { a: unknown; b: unknown }>;
  steps: FlowSyncStep[];
  importPerSecond: number;
  /** lb-a's ring of published entries (bytes; default: the data plane's) */
  syncRingBytesA?: number;
  /** lb-b's bound on a peer's ends kept for its budget (FLOW_SYNC_DEFAULTS.maxDeferredGone when absent) */
  maxDeferredGone?: number;
}

export type FlowSyncStep =
  | { op: 'apply'; state: string }
  | { op: 'run'; node: 'a' | 'b'; data: string }
  /** the real's reply to the SNAT address and the SNAT port the output of step `ofStep` left from */
  | { op: 'snatReply'; node: 'a' | 'b'; ofStep: number; real: string; realMac: string; snat: string; realPort: number }
  | { op: 'tick'; node: 'a' | 'b' }
  /** a message lb-a's channel sends to lb-b as if it were lb-a's sync (hostile or replayed bodies) */
  | { op: 'send'; body: unknown }
  /** the same from a channel that claims to be lb-a with another secret */
  | { op: 'sendForged'; body: unknown; secret: string }
  /** one genuine lb-a message, sealed once, posted `times` times byte for byte on fresh connections (2: a recorded
   * message replayed): each answer's HTTP status and text, or the connection's error (a refused oversize body);
   * `unsealed`: posted without any authentication headers */
  | { op: 'sendRaw'; body: unknown; times: number; unsealed?: boolean }
  /** lb-b's sync clock moves on (its entry budget refills by the time, never by how slow the machine is) */
  | { op: 'advance'; ms: number }
  /** real time passes (at least `ms` of CLOCK_MONOTONIC: recency marks taken before and after differ by that much) */
  | { op: 'wait'; ms: number }
  /** lb-a's channel sends lb-b one connection-table entry `ct` ([src, dst, sport, dport, proto, realId]) whose age
   * makes its choice `offsetMs` newer (negative: older) than lb-b's own entry for that flow, as of sending */
  | { op: 'sendAged'; ct: unknown[]; offsetMs: number }
  /** the node's SNAT idle timeout of established TCP (s), written into its lb_snat_config as an apply would */
  | { op: 'snatTimeout'; node: 'a' | 'b'; tcpEstablishedS: number }
  /** the node's SNAT sweep (src/reconciler/flows/snat-sweep.ts runs it every 10 s): how many entries it deleted */
  | { op: 'snatSweep'; node: 'a' | 'b' }
  /** whether the node holds a translation of the client port, and its owner slot */
  | { op: 'snatHas'; node: 'a' | 'b'; clientPort: number }
  /** lb-a's channel sends lb-b the end of a translation: `entry` (a 'gone' entry) with the SNAT source port of the packet
   * step `ofStep` put out in place of its snatPort (index 8) */
  | { op: 'sendGone'; ofStep: number; entry: unknown[] }
  /** lb-a's daemon restarts: a new channel and sync of its own, which must send b the whole table */
  | { op: 'restartA' }
  /** lb-b's sync answers every message with an error while `on` (a peer that fails: lb-a's sends fail) */
  | { op: 'refuseSync'; on: boolean }
  /** lb-b's daemon restarts (a new channel and sync); `empty`: its pins removed first (a reboot: empty maps, the
   * applied state written again); `rejoining`: its sync is told it rejoins (its rejoin gate held) */
  | { op: 'restartB'; empty: boolean; rejoining: boolean }
  /** the node's rejoin gate released (or held again): what its sync is told by `rejoining` */
  | { op: 'rejoining'; node: 'a' | 'b'; on: boolean }
  /** this moment (ms since the epoch), for handBack */
  | { op: 'mark' }
  /** the node's FlowSync.nudge(peer): its next round sends the peer a message (an empty one if nothing is due) */
  | { op: 'nudge'; node: 'a' | 'b'; peer: string }
  /** the node's FlowSync.handBackReady(peer, the time of the 'mark' step `sinceStep`) */
  | { op: 'handBack'; node: 'a' | 'b'; peer: string; sinceStep: number }
  /** lb-a's channel sends lb-b one translation `entry` (the 'snat' form) with the SNAT source port of the packet
   * step `ofStep` put out in place of its snatPort (index 8), plus `portOffset` */
  | { op: 'sendSnat'; ofStep: number; entry: unknown[]; portOffset?: number; resync?: unknown }
  /** the node serves (or stops serving) a lost node's SNAT address (src/reconciler/flows/snat-takeover.ts) */
  | { op: 'serve' | 'unserve'; node: 'a' | 'b'; address: string }
  /** what lb-b's channel refused and counted, by reason */
  | { op: 'rejections' }
  | { op: 'report'; node: 'a' | 'b' }
  | { op: 'count'; node: 'a' | 'b' };

/** A third lb node of the applied config that takes no part in the harness: only its SNAT address is known. */
export const LB_C_SNAT = '198.51.100.4';

async function main(): Promise<void> {
  const input = JSON.parse(readFileSync(0, 'utf8')) as FlowSyncInput;
  const dp: Record<'a' | 'b', Awaited<ReturnType<typeof openLbDataPlane>>> = { a: await openLbDataPlane({ pinRoot: `${input.pinRoot}/a`, ...(input.syncRingBytesA && { syncRingBytes: input.syncRingBytesA }) }), b: await openLbDataPlane({ pinRoot: `${input.pinRoot}/b` }) };
  const applied: Record<'a' | 'b', DesiredState | null> = { a: null, b: null };
  const url: Record<string, string> = {};
  const peersOf = (self: string) => () => Object.entries(url).filter(([n]) => n !== self).map(([node, u]) => ({ node, url: u }));
  const auth = secretAuth(input.secret);
  const log = { info: () => undefined, warn: (m: string) => process.stderr.write(`${m}\n`) };
  const channels: PeerChannel[] = [];
  const open = async (node: string) => {
    const ch = await startPeerChannel({ node, host: '127.0.0.1', port: 0, auth, peers: peersOf(node), log });
    channels.push(ch);
    url[node] = ch.url;
    return ch;
  };
  // Deadlines far beyond any step: on a loaded machine a slow answer must not turn into a refusal (the tests count).
  const limits = { importPerSecond: input.importPerSecond, maxEntriesPerMessage: 512, timeoutMs: 60_000,
    ...(input.maxDeferredGone !== undefined && { maxDeferredGone: input.maxDeferredGone }) };
  // lb-b's sync runs on a clock only the steps move ('advance'), so what its entry budget grants depends on the steps
  // alone, never on how long the machine took between them (the flood test was flaky under load).
  let clockB = Date.now();
  const rejoining = { a: false, b: false };
  const syncOf = (node: 'a' | 'b', ch: PeerChannel) => new FlowSync({ node: `lb-${node}`, channel: ch, peers: () => Object.keys(url).filter((n) => n !== `lb-${node}`),
    object: () => dp[node].object(), desired: () => applied[node], log, limits, ...(node === 'b' && { now: () => clockB }),
    rejoining: () => rejoining[node],
    snatAddressOf: (peer) => (peer === 'lb-c' ? LB_C_SNAT : applied[peer === 'lb-a' ? 'a' : 'b']?.snatAddress) });
  let chA = await open('lb-a');
  let chB = await open('lb-b');
  const sync = { a: syncOf('a', chA), b: syncOf('b', chB) };
  const out: unknown[] = [];
  try {
    for (const step of input.steps) {
      try {
        if (step.op === 'apply') {
          for (const n of ['a', 'b'] as const) {
            applied[n] = stateFromJson(input.states[step.state]![n]);
            await applyTo(dp[n], applied[n]!);
          }
          out.push({});
        } else if (step.op === 'run') out.push(await runPacket(dp[step.node], step.data, 'lbA'));
        else if (step.op === 'snatReply') {
          const sent = Buffer.from((out[step.ofStep] as { data: string }).data, 'hex');
          const snatPort = sent.readUInt16BE(14 + 20);
          const data = frame({ dst: LAB.lbA.mac, src: step.realMac },
            ipPacket({ src: step.real, dst: step.snat, l4: { tcp: { sport: step.realPort, dport: snatPort, flags: TCP_FLAGS.ACK, ack: 1 } } }));
          out.push(await runPacket(dp[step.node], data.toString('hex'), 'lbA'));
        }
        else if (step.op === 'tick') {
          await sync[step.node].tick();
          out.push({ report: sync[step.node].report(), local: sync[step.node].localReport() });
        } else if (step.op === 'send') {
          out.push({ answer: await chA.request('lb-b', FLOW_SYNC_KIND, step.body, { timeoutMs: 60_000 }) });
        } else if (step.op === 'sendRaw') {
          const body = Buffer.from(JSON.stringify(step.body));
          // unsealed: the body alone, no authentication headers at all
          const headers = step.unsealed ? {} : seal(auth, { direction: 'request', kind: FLOW_SYNC_KIND, from: 'lb-a', to: 'lb-b', time: Date.now(), nonce: newNonce() }, body);
          const answers: { status?: number; body?: string; error?: string }[] = [];
          for (let i = 0; i < step.times; i++)
            answers.push(await rawPost(url['lb-b']!, FLOW_SYNC_KIND, headers, body).catch((e: Error) => ({ error: e.message })));
          out.push({ answers });
        } else if (step.op === 'wait') {
          await new Promise((res) => setTimeout(res, step.ms));
          out.push({});
        } else if (step.op === 'sendAged') {
          const [src, dst, sport, dport, proto] = step.ct as [string, string, number, number, number];
          const held = dp.b.object()!.map('lb_conntrack').lookup(encodeFlowKey({ src, dst, sport, dport, proto, family: 4 }));
          if (!held) throw new Error('lb-b holds no entry for the flow');
          // both data planes run in this process: one CLOCK_MONOTONIC
          const heldAge = Number((monotonicNs() - decodeFlowValue(Buffer.from(held)).chosenNs) / 1_000_000n);
          const ageMs = Math.max(0, heldAge - step.offsetMs);
          out.push({ ageMs, answer: await chA.request('lb-b', FLOW_SYNC_KIND, { v: 1, ct: [[...step.ct, ageMs]], snat: [] }, { timeoutMs: 60_000 }) });
        } else if (step.op === 'snatTimeout') {
          const m = dp[step.node].object()!.map('lb_snat_config');
          const cfg = decodeSnatConfig(Buffer.from(m.lookup(encodeU32(0))!));
          m.update(encodeU32(0), encodeSnatConfig({ ...cfg, timeouts: { ...cfg.timeouts, tcpEstablishedNs: BigInt(step.tcpEstablishedS) * 1_000_000_000n } }));
          out.push({});
        } else if (step.op === 'snatSweep') {
          out.push({ swept: await sweepSnat(dp[step.node].object()!) });
        } else if (step.op === 'snatHas') {
          const held = dp[step.node].object()!.map('lb_snat_rev').entries().map(([, v]) => Buffer.from(v))
            .filter((v) => v.readUInt16BE(32) === step.clientPort);
          out.push({ has: held.length > 0, owners: held.map((v) => v[41]), created: held.map((v) => String(v.readBigUInt64LE(48))) });
        } else if (step.op === 'sendGone') {
          const sent = Buffer.from((out[step.ofStep] as { data: string }).data, 'hex');
          const entry = [...step.entry];
          entry[8] = sent.readUInt16BE(14 + 20);
          out.push({ answer: await chA.request('lb-b', FLOW_SYNC_KIND, { v: 1, ct: [], snat: [], gone: [entry] }, { timeoutMs: 60_000 }) });
        } else if (step.op === 'advance') {
          clockB += step.ms;
          out.push({});
        } else if (step.op === 'rejections') {
          out.push({ rejections: chB.rejections().counts });
        } else if (step.op === 'sendForged') {
          const forged = await startPeerChannel({ node: 'lb-a', host: '127.0.0.1', port: 0, auth: secretAuth(step.secret), peers: peersOf('lb-a'), log });
          try {
            out.push({ answer: await forged.request('lb-b', FLOW_SYNC_KIND, step.body, { timeoutMs: 60_000 }) });
          } finally {
            await forged.close();
          }
        } else if (step.op === 'restartA') {
          await chA.close();
          channels.splice(channels.indexOf(chA), 1);
          chA = await open('lb-a');
          sync.a = syncOf('a', chA);
          out.push({});
        } else if (step.op === 'refuseSync') {
          // an own property shadows FlowSync.receive, which the channel's handler calls; deleting it restores it
          if (step.on) sync.b.receive = async () => { throw new Error('lb-b refuses the sync (test)'); };
          else delete (sync.b as { receive?: unknown }).receive;
          out.push({});
        } else if (step.op === 'restartB') {
          await chB.close();
          channels.splice(channels.indexOf(chB), 1);
          if (step.empty) {
            dp.b.close();
            rmSync(`${input.pinRoot}/b`, { recursive: true, force: true });
            mkdirSync(`${input.pinRoot}/b`, { recursive: true });
            dp.b = await openLbDataPlane({ pinRoot: `${input.pinRoot}/b` });
            if (applied.b) await applyTo(dp.b, applied.b);
          }
          rejoining.b = step.rejoining;
          chB = await open('lb-b');
          sync.b = syncOf('b', chB);
          out.push({});
        } else if (step.op === 'rejoining') {
          rejoining[step.node] = step.on;
          out.push({});
        } else if (step.op === 'mark') {
          out.push({ at: Date.now() });
        } else if (step.op === 'nudge') {
          sync[step.node].nudge(step.peer);
          out.push({});
        } else if (step.op === 'handBack') {
          out.push({ ready: sync[step.node].handBackReady(step.peer, (out[step.sinceStep] as { at: number }).at) });
        } else if (step.op === 'sendSnat') {
          const sent = Buffer.from((out[step.ofStep] as { data: string }).data, 'hex');
          const entry = [...step.entry];
          entry[8] = sent.readUInt16BE(14 + 20) + (step.portOffset ?? 0);
          out.push({ answer: await chA.request('lb-b', FLOW_SYNC_KIND, { v: 1, ct: [], snat: [entry], ...(step.resync !== undefined && { resync: step.resync }) },
            { timeoutMs: 60_000 }) });
        } else if (step.op === 'serve' || step.op === 'unserve') {
          const obj = dp[step.node].object()!;
          const ok = step.op === 'serve' ? serveSnatAddress(obj, step.address) : (unserveSnatAddress(obj, step.address), true);
          out.push({ ok, served: servedSnatAddresses(obj), gate: Buffer.from(obj.map('lb_snat_owners').lookup(Buffer.alloc(4))!).readUInt32LE(20) });
        } else if (step.op === 'report') out.push({ report: sync[step.node].report() });
        else if (step.op === 'count') {
          const obj = dp[step.node].object()!;
          const rev = obj.map('lb_snat_rev').entries();
          // ownSnat: the node's own translations (owner 0), the ones it sends; the rest are peers' copies
          out.push({ ct: obj.map('lb_conntrack').keys().length, snat: rev.length, ownSnat: rev.filter(([, v]) => v[41] === 0).length, at: Date.now() });
        }
      } catch (e) {
        out.push({ error: String((e as Error).message ?? e), reason: (e as { reason?: string }).reason });
      }
    }
  } finally {
    for (const c of channels) await c.close();
    dp.a.close();
    dp.b.close();
  }
  process.stdout.write(JSON.stringify(out));
}

/** A raw POST of a recorded message to a peer channel: its HTTP status and answer text. */
function rawPost(base: string, kind: string, headers: Record<string, string>, body: Buffer): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    // agent false: a connection of its own each time, never one the peer closed after a refusal
    const req = httpRequest(`${base}${PEER_PATH_PREFIX}${kind}`, { method: 'POST', agent: false,
      headers: { ...headers, 'content-type': 'application/json', 'content-length': String(body.length) } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8', 0, 200) }));
    });
    req.on('error', reject);
    req.setTimeout(60_000, () => req.destroy(new Error('no answer within 60 s')));
    req.end(body);
  });
}

export function runFlowSyncHarness(ns: string, input: FlowSyncInput, timeoutMs = 120_000): Promise<any[]> {
  return runHarnessScript(new URL(import.meta.url).pathname, ns, input, timeoutMs);
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop()!)) await main();
