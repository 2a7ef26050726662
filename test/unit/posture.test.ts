// gitlb doctor's trust posture (src/reconciler/doctor/posture.ts), judged from facts: the hardened node passes, and each
// weakness an attacker would look for (verification off, no trust root, a weak peer secret, consensus without
// one, an unauthenticated listener on the network) is a warning or a failure with its reason.
import test from 'ava';
import { isLoopback, trustPosture, type PostureFacts } from '../../src/reconciler/doctor/posture.js';

const REV = 'a'.repeat(40);
const ENFORCE = { mode: 'enforce' as const, formats: ['ssh' as const], signersFile: 'trust/allowed_signers' };

/** A hardened lb node: state with enforce, a trust root, the peer secret, metrics on loopback, no webhook. */
const hardened: PostureFacts = {
  trust: { file: '/etc/gitlb/trust', keys: 2 },
  localState: { file: '/var/lib/gitlb/lb-1/state.json', kind: 'own', revision: REV, policy: ENFORCE },
  headVerification: ENFORCE,
  headHealthMode: 'consensus',
  role: 'lb',
  peer: { secretFile: '/etc/gitlb/peer/secret', listen: { host: '192.0.2.11', port: 7946 } },
  metrics: { host: '127.0.0.1', port: 9462 },
};

const lines = (f: PostureFacts) => trustPosture(f).map((r) => `${r.level} ${r.name}: ${r.detail}`);

test('a hardened node: every posture line ok, each saying what it rests on', (t) => {
  t.deepEqual(lines(hardened), [
    `ok verification: mode enforce in force (recorded in /var/lib/gitlb/lb-1/state.json with aaaaaaaaaaaa), root --trust /etc/gitlb/trust (2 keys); the branch head asks for enforce`,
    'ok trust root: local state: /var/lib/gitlb/lb-1/state.json verified aaaaaaaaaaaa; new commits are verified from there',
    'ok peer auth: every peer message authenticated (HMAC with the cluster secret in /etc/gitlb/peer/secret)',
    'ok listener metrics: 127.0.0.1:9462: /metrics and /healthz, read-only (service names, reals, health), unauthenticated, loopback only',
    'ok listener webhook: none (no --webhook): the node polls',
    'ok listener peer: 192.0.2.11:7946: health votes and connection sync, authenticated (cluster secret)',
  ]);
});

test('verification: off or warn in force is a warning; the recorded policy wins over the branch head; a bad trust file fails', (t) => {
  const off = trustPosture({ ...hardened, trust: undefined, localState: { file: 's.json', kind: 'absent' }, headVerification: null });
  t.like(off[0], { level: 'warn', name: 'verification' });
  t.regex(off[0]!.detail, /^mode off in force \(nothing verified yet.*commits are not verified; whoever can push to the branch steers the data plane$/);
  // The head asks for off, but the node recorded enforce: enforce is in force (a lowering needs a verified descendant).
  const lowered = trustPosture({ ...hardened, headVerification: { ...ENFORCE, mode: 'off' } });
  t.like(lowered[0], { level: 'ok' });
  t.regex(lowered[0]!.detail, /^mode enforce in force .*the branch head asks for off$/);
  const warnMode = trustPosture({ ...hardened, localState: { ...hardened.localState, kind: 'own', revision: REV, policy: { ...ENFORCE, mode: 'warn' } } });
  t.like(warnMode[0], { level: 'warn' });
  t.regex(warnMode[0]!.detail, /unverified commits are applied with a warning/);
  // A new node with --trust: enforce from the first revision.
  t.like(trustPosture({ ...hardened, localState: { file: 's.json', kind: 'absent' } })[0], { level: 'ok' });
  t.deepEqual(trustPosture({ ...hardened, trust: { file: 'trust', error: 'trust: no keys' } })[0], { level: 'fail', name: 'verification', detail: '--trust trust: trust: no keys' });
});

test('trust root: local state, --trust-from, or none (a warning under enforce, naming --trust-from); a foreign state file is ignored', (t) => {
  const fresh = { ...hardened, localState: { file: 's.json', kind: 'absent' as const } };
  t.deepEqual(trustPosture(fresh)[1], { level: 'warn', name: 'trust root',
    detail: 'none: no local state and no --trust-from; the history is verified from the root commit (unsigned history is refused; give --trust-from COMMIT)' });
  t.deepEqual(trustPosture({ ...fresh, trustFrom: REV })[1], { level: 'ok', name: 'trust root',
    detail: '--trust-from aaaaaaaaaaaa: its history counts as verified until this node has state of its own' });
  const foreign = trustPosture({ ...hardened, localState: { file: 's.json', kind: 'foreign', node: 'lb-2', branch: 'main' } })[1]!;
  t.is(foreign.level, 'warn');
  t.regex(foreign.detail, /^s\.json belongs to node 'lb-2' branch 'main' and is ignored; none: /);
  t.regex(trustPosture({ ...hardened, trustFrom: REV })[1]!.detail, /--trust-from aaaaaaaaaaaa is not used: the node has state/);
});

test('peer auth with node keys: a usable key is ok and its listener says node keys; a key problem fails', (t) => {
  const keyed = { ...hardened, peer: { keyFile: '/etc/gitlb/peer-key', listen: { host: '192.0.2.11', port: 7946 } } };
  const r = trustPosture(keyed);
  t.like(r[2], { level: 'ok', name: 'peer auth' });
  t.regex(r[2]!.detail, /signed with this node's key .*no shared secret/);
  t.true(r.some((c) => c.name === 'listener peer' && /authenticated \(node keys\)/.test(c.detail)));
  t.like(trustPosture({ ...keyed, peer: { ...keyed.peer, keyProblem: "--peer-key k: its public key is not spec.peerKey of the Node document 'lb-1'" } })[2], { level: 'fail', name: 'peer auth' });
});

test('peer auth: a weak secret fails, consensus without a secret fails, local health without one is fine', (t) => {
  t.like(trustPosture({ ...hardened, peer: { ...hardened.peer, secretProblem: '--peer-secret-file s: the peer secret is too short' } })[2], { level: 'fail', name: 'peer auth' });
  t.like(trustPosture({ ...hardened, peer: { listen: null } })[2], { level: 'fail', name: 'peer auth' });
  t.like(trustPosture({ ...hardened, headHealthMode: 'local', peer: { listen: null } })[2], { level: 'ok' });
  t.like(trustPosture({ ...hardened, role: 'backend', peer: { listen: null } })[2], { level: 'ok', detail: 'backend node: no peer channel' });
});

test('listeners: unauthenticated on a non-loopback address warns; authenticated ones and loopback are fine; 0.0.0.0 is said to be every interface', (t) => {
  const exposed = lines({ ...hardened, metrics: { host: '192.0.2.7', port: 9462 }, webhook: { host: '0.0.0.0', port: 9000 } });
  t.is(exposed[3], 'warn listener metrics: 192.0.2.7:9462: /metrics and /healthz, read-only (service names, reals, health), unauthenticated and reachable ' +
    'from the network: bind it to the address its clients use and firewall it to them, or to 127.0.0.1');
  t.is(exposed[4], 'ok listener webhook: 0.0.0.0:9000 (every interface): push notifications (a fetch trigger), authenticated (shared secret)');
  t.is(lines({ ...hardened, metrics: { host: '2001:db8::7', port: 9462 } })[3]!.split(':')[0], 'warn listener metrics');
  t.regex(lines({ ...hardened, metrics: { host: '2001:db8::7', port: 9462 } })[3]!, /\[2001:db8::7\]:9462/);
  t.is(lines({ ...hardened, metrics: 'off' })[3], 'ok listener metrics: off');
  t.like(trustPosture({ ...hardened, webhook: { host: '192.0.2.7', port: 9000, secretProblem: 'no webhook secret' } })[4], { level: 'fail' });
  t.like(trustPosture({ ...hardened, peer: { ...hardened.peer, listen: null } })[5], { level: 'warn', name: 'listener peer' });
  for (const h of ['127.0.0.1', '127.1.2.3', '::1', 'localhost']) t.true(isLoopback(h), h);
  for (const h of ['0.0.0.0', '::', '192.0.2.1', '2001:db8::1', '128.0.0.1']) t.false(isLoopback(h), h);
});
