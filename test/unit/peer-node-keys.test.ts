// The peer channel with node keys (--peer-key; Node spec.peerKey): each lb node signs with its own ed25519 key and
// a message passes only with the sender's key from the config. Attacks: a compromised lb node, holding a valid key
// of its own, speaks as another lb node (requests and answers); an lb node with no key in the config; a
// config that gives two nodes one key or a backend a key. Benign: the exchange both ways.
import test from 'ava';
import { generateKeyPairSync } from 'node:crypto';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import { nodeKeyAuth, PeerError, startPeerChannel, type PeerAddress, type PeerChannel, type PeerKey, type RejectReason } from '../../src/reconciler/peer/index.js';
import { newNonce, seal } from '../../src/reconciler/peer/frame.js';
import { parseSshPublicKeyText } from '../../src/reconciler/verify/ssh-key.js';
import { parseConfig } from '../../src/render/config/index.js';
import { clusterYaml, serviceYaml } from '../reconcile-helpers.js';

function sshString(b: Buffer): Buffer {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(b.length);
  return Buffer.concat([len, b]);
}

/** A fresh ed25519 key as --peer-key loads it, and its spec.peerKey line. */
function newKey(): PeerKey {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const raw = Buffer.from(publicKey.export({ format: 'jwk' }).x!, 'base64url');
  const line = `ssh-ed25519 ${Buffer.concat([sshString(Buffer.from('ssh-ed25519')), sshString(raw)]).toString('base64')}`;
  return { privateKey, publicKey: parseSshPublicKeyText('ssh-ed25519', line.split(' ')[1]!), publicLine: line };
}

const keys: Record<string, PeerKey> = { 'lb-1': newKey(), 'lb-2': newKey(), 'lb-3': newKey() };
/** spec.peerKey of each lb node in the "config": lb-4 is an lb node without a key. */
const configKey = (node: string) => keys[node]?.publicLine;

async function cluster(t: import('ava').ExecutionContext) {
  const book: PeerAddress[] = [];
  const rejected: Record<string, RejectReason[]> = {};
  const chans: Record<string, PeerChannel> = {};
  for (const node of ['lb-1', 'lb-2', 'lb-3', 'lb-4']) {
    rejected[node] = [];
    const key = keys[node] ?? newKey(); // lb-4 has a key of its own, but the config names none
    const ch = await startPeerChannel({ node, host: '127.0.0.1', port: 0, auth: nodeKeyAuth(key, configKey),
      peers: () => book.filter((p) => p.node !== node), metrics: { rejected: (r) => rejected[node]!.push(r) } });
    t.teardown(() => ch.close());
    ch.serve('echo', (from, body) => ({ from, body }));
    chans[node] = ch;
    book.push({ node, url: ch.url });
  }
  return { book, chans, rejected };
}

test('benign: lb nodes with their keys in the config talk both ways', async (t) => {
  const { chans, rejected } = await cluster(t);
  t.deepEqual(await chans['lb-1']!.request('lb-2', 'echo', 1), { from: 'lb-1', body: 1 });
  t.deepEqual(await chans['lb-2']!.request('lb-1', 'echo', 2), { from: 'lb-2', body: 2 });
  t.deepEqual(await chans['lb-3']!.request('lb-1', 'echo', 3), { from: 'lb-3', body: 3 });
  t.deepEqual(Object.values(rejected).flat(), []);
});

test('a compromised lb node cannot speak as another one, and a node without a key in the config cannot speak', async (t) => {
  const { book, chans, rejected } = await cluster(t);
  const lb1 = book.find((p) => p.node === 'lb-1')!.url;
  // lb-3 signs a request "from lb-2" with its own (valid, configured) key.
  const body = Buffer.from('{"down":["198.51.100.21"]}');
  const forged = seal(nodeKeyAuth(keys['lb-3']!, configKey), { direction: 'request', kind: 'echo', from: 'lb-2', to: 'lb-1', time: Date.now(), nonce: newNonce() }, body);
  const res = await fetch(`${lb1}/v1/peer/echo`, { method: 'POST', headers: forged, body });
  t.is(res.status, 401);
  t.deepEqual(rejected['lb-1'], ['bad-mac']);
  // lb-4 is an lb node of the config but has no spec.peerKey: nothing it sends passes.
  const err = await t.throwsAsync(chans['lb-4']!.request('lb-1', 'echo', null), { instanceOf: PeerError });
  t.is(err?.reason, 'refused');
  t.deepEqual(rejected['lb-1'], ['bad-mac', 'bad-mac']);
  // lb-3 answers in lb-2's place (listening at lb-2's address), signing with its own key.
  const impostor = createServer((req, res2) => {
    req.resume();
    const out = Buffer.from('{"from":"lb-1","body":"all down"}');
    res2.writeHead(200, seal(nodeKeyAuth(keys['lb-3']!, configKey), { direction: 'answer', kind: 'echo', from: 'lb-2', to: 'lb-1', time: Date.now(),
      nonce: newNonce(), replyTo: (req.headers as IncomingHttpHeaders)['x-gitlb-peer-nonce'] as string }, out)).end(out);
  });
  await new Promise<void>((r) => impostor.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => { impostor.close(() => r()); impostor.closeAllConnections(); }));
  book.find((p) => p.node === 'lb-2')!.url = `http://127.0.0.1:${(impostor.address() as { port: number }).port}`;
  const e2 = await t.throwsAsync(chans['lb-1']!.request('lb-2', 'echo', null), { instanceOf: PeerError });
  t.is(e2?.reason, 'bad-mac');
});

test('config: spec.peerKey is an ed25519 line, one per node, lb nodes only', (t) => {
  const node = (name: string, role: string, key?: string, addr = 11) => `apiVersion: gitlb/v1\nkind: Node\nmetadata: { name: ${name} }\nspec:\n  role: ${role}\n  interface: eth0\n` +
    `  addresses: [198.51.100.${addr}]\n${role === 'lb' ? '  allowedVips: [203.0.113.0/24]\n' : ''}${key ? `  peerKey: ${key}\n` : ''}`;
  const parse = (nodes: Record<string, string>) => {
    const files = { 'cluster.yaml': clusterYaml(), 'services/web.yaml': serviceYaml('web', '203.0.113.10', ['198.51.100.21']), ...nodes };
    return parseConfig(Object.entries(files).map(([path, text]) => ({ path, content: Buffer.from(text) })));
  };
  const ok = parse({ 'nodes/lb-1.yaml': node('lb-1', 'lb', `${keys['lb-1']!.publicLine} lb-1@example`), 'nodes/lb-2.yaml': node('lb-2', 'lb', keys['lb-2']!.publicLine, 12) });
  t.deepEqual(ok.diagnostics.filter((d) => d.severity === 'error'), []);
  t.is(ok.model!.nodes.find((n) => n.metadata.name === 'lb-2')!.spec.peerKey, keys['lb-2']!.publicLine);
  const shared = parse({ 'nodes/lb-1.yaml': node('lb-1', 'lb', keys['lb-1']!.publicLine), 'nodes/lb-2.yaml': node('lb-2', 'lb', keys['lb-1']!.publicLine, 12) });
  t.regex(shared.diagnostics.map((d) => d.message).join('\n'), /spec.peerKey: the same key as node 'lb-1'/);
  const backend = parse({ 'nodes/lb-1.yaml': node('lb-1', 'lb'), 'nodes/be-1.yaml': node('be-1', 'backend', keys['lb-2']!.publicLine, 21) });
  t.regex(backend.diagnostics.map((d) => d.message).join('\n'), /only lb nodes talk on the peer channel/);
  const rsa = parse({ 'nodes/lb-1.yaml': node('lb-1', 'lb', 'ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ') });
  t.regex(rsa.diagnostics.map((d) => d.message).join('\n'), /ssh-ed25519 public key line/);
});
