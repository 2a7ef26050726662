// Peer trust of an lb node daemon comes from its applied (verified) config only (docs/security.md, Peers). Attack:
// an unsigned commit at the head of the branch gives lb-2 the attacker's spec.peerKey; a fresh node under enforce
// refuses the commit and has applied nothing, and must not take the unverified head's keys instead: the attacker,
// speaking as lb-2 with that key, is refused as unknown-sender. Benign: once the signed config is applied, lb-2
// with its key from it is answered (and the attacker's key is not). Real lb data plane (BPF maps pinned under a
// per-run directory, nothing attached), real git over HTTP on 127.0.0.1, the peer channel on 127.0.0.1.
import test from 'ava';
import { execFile } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { startNodeDaemon, StartError, type NodeDaemon } from '../../src/reconciler/node-daemon.js';
import { loadPeerKeyFile, nodeKeyAuth, PeerError, startPeerChannel, type PeerChannel, type PeerKey } from '../../src/reconciler/peer/index.js';
import { clusterYaml, git, serviceYaml, servedRepo, tempDir } from '../reconcile-helpers.js';
import { sshKey, signerLine, signedCommit, trustOf } from '../verify-helpers.js';

const execFileP = promisify(execFile);
const PIN_BASE = `/sys/fs/bpf/gitlb-test-${process.pid}-peer-trust`;
const PROBE = 'test.probe';
const quiet = { info: () => {}, warn: () => {} };
const cleanups: (() => unknown)[] = [];
test.after.always(async () => {
  for (const f of cleanups.reverse()) await f();
  rmSync(PIN_BASE, { recursive: true, force: true });
});

async function scratch(name: string): Promise<string> {
  const d = await tempDir(name);
  cleanups.push(() => rmSync(d, { recursive: true, force: true }));
  return d;
}

async function peerKey(dir: string, name: string): Promise<PeerKey> {
  await execFileP('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', join(dir, name)]);
  return loadPeerKeyFile(join(dir, name));
}

function config(keys: Record<'lb-1' | 'lb-2', string>): Record<string, string> {
  const node = (n: 'lb-1' | 'lb-2', a: number) => `apiVersion: gitlb/v1\nkind: Node\nmetadata: { name: ${n} }\nspec:\n  role: lb\n  interface: eth0\n` +
    `  addresses: [198.51.100.${a}]\n  allowedVips: [203.0.113.0/24]\n  peerKey: ${keys[n]}\n`;
  return { 'cluster.yaml': clusterYaml(), 'services/web.yaml': serviceYaml('web', '203.0.113.10', ['198.51.100.21']), 'nodes/lb-1.yaml': node('lb-1', 11), 'nodes/lb-2.yaml': node('lb-2', 12) };
}

/** A peer channel speaking as lb-2 with `key`, to lb-1 at `url` (it trusts lb-1's key). */
async function speaker(key: PeerKey, lb1: PeerKey, url: string): Promise<PeerChannel> {
  const ch = await startPeerChannel({ node: 'lb-2', host: '127.0.0.1', port: 0, auth: nodeKeyAuth(key, (n) => (n === 'lb-1' ? lb1.publicLine : undefined)),
    peers: () => [{ node: 'lb-1', url }] });
  cleanups.push(() => ch.close());
  return ch;
}

test('peer trust comes from the applied config only: a key that only an unverified branch head names is refused; the applied one is answered', async (t) => {
  const d = await scratch('peer-trust');
  const alice = await sshKey(d, 'alice');
  const k1 = await peerKey(d, 'lb-1'), k2 = await peerKey(d, 'lb-2'), attacker = await peerKey(d, 'attacker');
  const r = await servedRepo();
  cleanups.push(() => r.cleanup());
  const signed = await signedCommit(r.work, config({ 'lb-1': k1.publicLine, 'lb-2': k2.publicLine }), 'lb-1 and lb-2', { ssh: alice });
  const unsigned = await signedCommit(r.work, config({ 'lb-1': k1.publicLine, 'lb-2': attacker.publicLine }), 'lb-2 gets my key', null);
  await git(r.work, 'push', '-q', 'origin', 'main');

  let channel: PeerChannel | null = null;
  const nd: NodeDaemon = await startNodeDaemon({
    repo: r.url, branch: 'main', node: 'lb-1', xdpMode: 'auto', pinRoot: join(PIN_BASE, 'applied'), cacheDir: await scratch('peer-trust-cache'),
    writeStatus: false, health: false, peerPoll: '2', gitTimeoutMs: 5000, once: false, log: quiet,
    trust: await trustOf(`${signerLine('alice@example.com', alice)}\n`),
    peer: { key: k1, port: 0, listen: '127.0.0.1:0' },
    hooks: { started: (p) => { channel = p.peerChannel ?? null; } },
  });
  cleanups.push(() => nd.stop());
  await nd.daemon.idle();
  t.true(channel !== null, 'the peer channel is up');
  const ch = channel as unknown as PeerChannel;
  let served = 0;
  ch.serve(PROBE, (from) => { served++; return { from }; });

  // The head is unsigned: refused under enforce, nothing applied.
  const out = nd.lastOutcome();
  t.true(out?.kind === 'failed' && out.stage === 'verify', JSON.stringify(out));
  if (out?.kind === 'failed') t.regex(out.reason, new RegExp(`commit ${unsigned.slice(0, 12)} .*: unsigned`));
  t.is(nd.daemon.reconciler.appliedRevision, null);
  const evil = await speaker(attacker, k1, ch.url);
  const refused = await t.throwsAsync(evil.request('lb-1', PROBE, {}, { timeoutMs: 3000 }), { instanceOf: PeerError });
  t.regex(refused!.message, /unknown-sender|403/);
  t.is(ch.rejections().counts['unknown-sender'], 1);
  t.is(served, 0, 'nothing from the attacker was handled');

  // Benign: the signed config back at the head is applied; lb-2 with its key from it is answered, the attacker not.
  await git(r.work, 'reset', '-q', '--hard', signed);
  await git(r.work, 'push', '-q', '-f', 'origin', 'main');
  nd.daemon.trigger('test');
  await nd.daemon.idle();
  t.is(nd.daemon.reconciler.appliedRevision, signed, JSON.stringify(nd.lastOutcome()));
  const lb2 = await speaker(k2, k1, ch.url);
  t.deepEqual(await lb2.request('lb-1', PROBE, {}, { timeoutMs: 3000 }), { from: 'lb-2' });
  t.is(served, 1);
  await t.throwsAsync(evil.request('lb-1', PROBE, {}, { timeoutMs: 3000 }), { instanceOf: PeerError });
  t.is(served, 1);
});

test('under enforce an unverified head does not stop a start: its Node document naming another peerKey is a warning; without verification a refusal', async (t) => {
  const d = await scratch('peer-start-head');
  const alice = await sshKey(d, 'alice');
  const k1 = await peerKey(d, 'lb-1'), k2 = await peerKey(d, 'lb-2'), attacker = await peerKey(d, 'attacker');
  const r = await servedRepo();
  cleanups.push(() => r.cleanup());
  const signed = await signedCommit(r.work, config({ 'lb-1': k1.publicLine, 'lb-2': k2.publicLine }), 'lb-1 and lb-2', { ssh: alice });
  await signedCommit(r.work, config({ 'lb-1': attacker.publicLine, 'lb-2': k2.publicLine }), 'lb-1 gets my key', null);
  await git(r.work, 'push', '-q', 'origin', 'main');
  const warnings: string[] = [];
  const base = { repo: r.url, branch: 'main', node: 'lb-1', xdpMode: 'auto' as const, pinRoot: join(PIN_BASE, 'start'), writeStatus: false, health: false, peerPoll: '2',
    gitTimeoutMs: 5000, once: false, peer: { key: k1, port: 0, listen: '127.0.0.1:0' }, log: { info: () => {}, warn: (m: string) => warnings.push(m) } };
  // Without verification the head is what the node would apply: the mismatch is a start-up refusal, as before.
  const refused = await t.throwsAsync(startNodeDaemon({ ...base, cacheDir: await scratch('psh-off') }), { instanceOf: StartError });
  t.regex(refused!.message, /--peer-key: its public key is not spec.peerKey of the Node document 'lb-1' at the head of main/);
  // Under enforce (--trust): a warning, the node starts, refuses the unsigned head and keeps nothing applied.
  const nd = await startNodeDaemon({ ...base, cacheDir: await scratch('psh-enforce'), trust: await trustOf(`${signerLine('alice@example.com', alice)}\n`) });
  cleanups.push(() => nd.stop());
  await nd.daemon.idle();
  t.true(warnings.some((w) => /--peer-key: its public key is not spec.peerKey .* \(a warning: the head is not verified yet\)$/.test(w)), warnings.join('\n'));
  t.is(nd.lastOutcome()?.kind, 'failed');
  // The signed config back at the head: applied, with this node's key.
  await git(r.work, 'reset', '-q', '--hard', signed);
  await git(r.work, 'push', '-q', '-f', 'origin', 'main');
  nd.daemon.trigger('test');
  await nd.daemon.idle();
  t.is(nd.daemon.reconciler.appliedRevision, signed, JSON.stringify(nd.lastOutcome()));
});
