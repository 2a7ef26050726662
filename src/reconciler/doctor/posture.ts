// A node's trust posture, as `gitlb doctor` reports it (docs/security.md, "Checking a node's posture"): which
// verification policy is in force, what the verification starts from, whether peer messages are authenticated, and
// which addresses the node's listeners expose, unauthenticated ones on a non-loopback address warned about. Pure:
// doctor.ts gathers the facts (local state, trust file, peer secret, the branch head's config, the flags).
import { isIP } from 'node:net';
import type { CheckResult } from './doctor.js';
import { policyFor } from '../verify/revision-check.js';
import type { VerificationPolicy } from '../verify/verify-range.js';
import type { HealthAgreementMode } from '../../render/model.js';

export interface HostPort {
  host: string;
  port: number;
}

export interface PostureFacts {
  /** `--trust FILE`: its keys, or why it cannot be used. */
  trust?: { file: string; keys: number } | { file: string; error: string };
  /** `<cache-dir>/state.json`: absent, this node's (with the recorded policy), or another node's or branch's. */
  localState: { file: string } & ({ kind: 'absent' } | { kind: 'own'; revision: string | null; policy?: VerificationPolicy | null } | { kind: 'foreign'; node: string; branch: string });
  trustFrom?: string;
  /** The branch head's `Cluster.spec.verification` (null: none); undefined when the head was not read. */
  headVerification?: VerificationPolicy | null;
  headHealthMode?: HealthAgreementMode;
  role?: 'lb' | 'backend';
  peer: { secretFile?: string; secretProblem?: string; keyFile?: string; keyProblem?: string; listen?: HostPort | null };
  metrics: HostPort | 'off';
  webhook?: HostPort & { secretProblem?: string };
}

const ok = (name: string, detail: string): CheckResult => ({ level: 'ok', name, detail });
const warn = (name: string, detail: string): CheckResult => ({ level: 'warn', name, detail });
const fail = (name: string, detail: string): CheckResult => ({ level: 'fail', name, detail });

const short = (oid: string) => oid.slice(0, 12);

/** 127.0.0.0/8, ::1 and localhost: reachable from this host only. */
export function isLoopback(host: string): boolean {
  if (host === 'localhost' || host === '::1') return true;
  return isIP(host) === 4 && host.startsWith('127.');
}

function isWildcard(host: string): boolean {
  return host === '0.0.0.0' || host === '::' || host === '';
}

function shown(a: HostPort): string {
  return isIP(a.host) === 6 ? `[${a.host}]:${a.port}` : `${a.host}:${a.port}`;
}

/** The policy the next verification runs under, and where it comes from (revision-check.ts policyFor). */
function policyInForce(f: PostureFacts): { policy: VerificationPolicy; from: string } {
  let policy: VerificationPolicy;
  let from: string;
  if (f.localState.kind === 'own' && f.localState.policy !== undefined) {
    policy = policyFor(f.localState.policy, !!f.trust);
    from = `recorded in ${f.localState.file} with ${f.localState.revision ? short(f.localState.revision) : 'no revision'}`;
  } else if (f.localState.kind === 'own') {
    // A state file from before the policy was recorded: the applied revision's config decides.
    policy = policyFor(f.headVerification ?? null, !!f.trust);
    from = `not recorded in ${f.localState.file} (an older file): the applied config decides; as the branch head`;
  } else {
    policy = policyFor(undefined, !!f.trust);
    from = 'nothing verified yet: the first revision is judged by it';
  }
  return { policy, from };
}

function verification(f: PostureFacts): CheckResult {
  const name = 'verification';
  if (f.trust && 'error' in f.trust) return fail(name, `--trust ${f.trust.file}: ${f.trust.error}`);
  const root = f.trust ? `, root --trust ${f.trust.file} (${f.trust.keys} key${f.trust.keys === 1 ? '' : 's'})` : ', no --trust root';
  const { policy, from } = policyInForce(f);
  const head = f.headVerification === undefined ? '' : `; the branch head asks for ${f.headVerification ? f.headVerification.mode : 'off (no verification section)'}`;
  const detail = `mode ${policy.mode} in force (${from})${root}${head}`;
  if (policy.mode === 'enforce') return ok(name, detail);
  return warn(name, `${detail}: ${policy.mode === 'off' ? 'commits are not verified' : 'unverified commits are applied with a warning'}; whoever can push to the branch steers the data plane`);
}

function trustRoot(f: PostureFacts): CheckResult {
  const name = 'trust root';
  const s = f.localState;
  if (s.kind === 'own' && s.revision) {
    const tf = f.trustFrom ? ` (--trust-from ${short(f.trustFrom)} is not used: the node has state)` : '';
    return ok(name, `local state: ${s.file} verified ${short(s.revision)}; new commits are verified from there${tf}`);
  }
  const foreign = s.kind === 'foreign' ? `${s.file} belongs to node '${s.node}' branch '${s.branch}' and is ignored; ` : '';
  if (f.trustFrom) return ok(name, `${foreign}--trust-from ${short(f.trustFrom)}: its history counts as verified until this node has state of its own`);
  const { policy } = policyInForce(f);
  if (policy.mode === 'off') return ok(name, `${foreign}none: no local state and no --trust-from (verification is off: nothing to start from)`);
  return warn(name, `${foreign}none: no local state and no --trust-from; the history is verified from the root commit ` +
    `(unsigned history is ${policy.mode === 'enforce' ? 'refused' : 'applied with warnings'}; give --trust-from COMMIT)`);
}

function peerAuth(f: PostureFacts): CheckResult {
  const name = 'peer auth';
  if (f.peer.keyFile) {
    if (f.peer.keyProblem) return fail(name, `${f.peer.keyProblem}; gitlb run refuses to start`);
    return ok(name, `every peer message signed with this node's key (${f.peer.keyFile}) and checked against the sender's Node spec.peerKey: no shared secret`);
  }
  if (f.peer.secretFile) {
    if (f.peer.secretProblem) return fail(name, `${f.peer.secretProblem}; gitlb run refuses to start`);
    return ok(name, `every peer message authenticated (HMAC with the cluster secret in ${f.peer.secretFile})`);
  }
  if (f.headHealthMode === 'consensus' && f.role !== 'backend')
    return fail(name, 'the config asks for consensus health but no --peer-secret-file or --peer-key is given: gitlb run refuses to start (votes must be authenticated)');
  return ok(name, f.role === 'backend' ? 'backend node: no peer channel' : 'no --peer-secret-file or --peer-key: no peer channel (health agreement local, no connection sync)');
}

/** One line per listener: where it binds, whether what it serves is authenticated, and whether that is a problem. */
function listeners(f: PostureFacts): CheckResult[] {
  const out: CheckResult[] = [];
  const line = (name: string, a: HostPort, authenticated: string | null, serves: string): CheckResult => {
    const where = isWildcard(a.host) ? `${shown(a)} (every interface)` : shown(a);
    if (authenticated) return ok(name, `${where}: ${serves}, authenticated (${authenticated})${isLoopback(a.host) ? ', loopback only' : ''}`);
    if (isLoopback(a.host)) return ok(name, `${where}: ${serves}, unauthenticated, loopback only`);
    return warn(name, `${where}: ${serves}, unauthenticated and reachable from the network: bind it to the address its clients use and firewall it to them, or to 127.0.0.1`);
  };
  if (f.metrics === 'off') out.push(ok('listener metrics', 'off'));
  else out.push(line('listener metrics', f.metrics, null, '/metrics and /healthz, read-only (service names, reals, health)'));
  if (f.webhook) {
    if (f.webhook.secretProblem) out.push(fail('listener webhook', `${shown(f.webhook)}: ${f.webhook.secretProblem}; gitlb run refuses to start`));
    else out.push(line('listener webhook', f.webhook, 'shared secret', 'push notifications (a fetch trigger)'));
  } else out.push(ok('listener webhook', 'none (no --webhook): the node polls'));
  if ((f.peer.secretFile || f.peer.keyFile) && f.role !== 'backend') {
    if (f.peer.listen) out.push(line('listener peer', f.peer.listen, f.peer.keyFile ? 'node keys' : 'cluster secret', 'health votes and connection sync'));
    else out.push(warn('listener peer', "no --peer-listen and no address in this node's Node document: gitlb run cannot start the peer channel"));
  }
  return out;
}

export function trustPosture(f: PostureFacts): CheckResult[] {
  return [verification(f), trustRoot(f), peerAuth(f), ...listeners(f)];
}
