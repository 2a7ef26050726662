// `<cache-dir>/state.json`: what this node itself last verified and applied. It is the node's trust state (the
// base of the next verification and the policy in force, docs/security.md "Config branch and local state") and
// tells a restarted daemon which revision its pinned maps serve. Only this node writes it, and only after an
// apply; nothing read from Git or from peers ever replaces it. Written atomically and durably: a crash leaves
// either the old or the new file, never a torn one, and a power loss never loses an acknowledged write.
import { open, readFile, rename } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { VerificationPolicy } from '../verify/verify-range.js';

export interface LocalState {
  node: string;
  branch: string;
  /** The last revision this node verified (under the policy then in force) and applied; null: none yet. */
  appliedRevision: string | null;
  /**
   * That revision's `Cluster.spec.verification` (null: the config has none). The policy in force follows from it
   * (policyFor). Absent in files written before it was recorded: the applied config is read from the Git cache
   * (when the cache cannot give it, the policy is enforce: loops/revision-pass.ts, fail closed).
   */
  verification?: VerificationPolicy | null;
}

const OID = /^[0-9a-f]{40}$/;
const MAX_STATE_BYTES = 64 * 1024;

function isPolicy(v: unknown): v is VerificationPolicy {
  const p = v as VerificationPolicy;
  return (
    typeof p === 'object' && p !== null && ['off', 'warn', 'enforce'].includes(p.mode) &&
    Array.isArray(p.formats) && p.formats.every((f) => f === 'ssh' || f === 'openpgp') &&
    (p.signersFile === null || typeof p.signersFile === 'string')
  );
}

/** The file's state, or null when it is missing, unreadable or not a state this daemon wrote (never a guess). */
export async function readLocalState(file: string): Promise<LocalState | null> {
  let s: LocalState;
  try {
    const text = await readFile(file, 'utf8');
    if (text.length > MAX_STATE_BYTES) return null;
    s = JSON.parse(text) as LocalState;
  } catch {
    return null;
  }
  if (typeof s !== 'object' || s === null || typeof s.node !== 'string' || typeof s.branch !== 'string') return null;
  if (s.appliedRevision !== null && !(typeof s.appliedRevision === 'string' && OID.test(s.appliedRevision))) return null;
  if (s.verification !== undefined && s.verification !== null && !isPolicy(s.verification)) return null;
  return s;
}

/** The state this node recorded for `node` and `branch` (a state of another node or branch is not this one's). */
export async function readOwnLocalState(file: string, node: string, branch: string): Promise<LocalState | null> {
  const s = await readLocalState(file);
  return s && s.node === node && s.branch === branch ? s : null;
}

/** Write to a temporary file, fsync it, rename it over the old one, fsync the directory (the rename itself). */
export async function writeLocalState(file: string, s: LocalState): Promise<void> {
  const tmp = `${file}.tmp`;
  const fh = await open(tmp, 'w', 0o600);
  try {
    await fh.writeFile(JSON.stringify(s) + '\n');
    await fh.sync();
  } finally {
    await fh.close();
  }
  await rename(tmp, file);
  const dir = await open(dirname(file), 'r');
  try {
    await dir.sync();
  } finally {
    await dir.close();
  }
}
