// Trusted signers: SSH allowed-signers entries and OpenPGP public keys, loaded from trust files
// (allowed-signers.ts). The daemon's --trust file is the root; the repository's signers list extends it.
import * as openpgp from 'openpgp';
import { parseTrustText, type AllowedSigner } from './allowed-signers.js';

export interface Trust {
  ssh: AllowedSigner[];
  pgp: openpgp.PublicKey[];
  problems: string[];
}

export const EMPTY_TRUST: Trust = { ssh: [], pgp: [], problems: [] };
/** Keys per trust file; a list is for a team, not a keyring dump. */
const MAX_PGP_KEYS = 256;

/** Reads a trust file's text into keys. Lines that do not parse are ignored and reported in `problems`. */
export async function loadTrust(text: string, name: string): Promise<Trust> {
  const t = parseTrustText(text, name);
  const pgp: openpgp.PublicKey[] = [];
  for (const block of t.pgpArmored) {
    try {
      const keys = await openpgp.readKeys({ armoredKeys: block.text });
      for (const k of keys) {
        if (k.isPrivate()) {
          t.problems.push(`${block.source}: a private key block in a trust file is ignored`);
          continue;
        }
        if (pgp.length >= MAX_PGP_KEYS) {
          t.problems.push(`${block.source}: more than ${MAX_PGP_KEYS} OpenPGP keys; the rest are ignored`);
          break;
        }
        pgp.push(k as openpgp.PublicKey);
      }
    } catch (err) {
      t.problems.push(`${block.source}: OpenPGP key block: ${(err as Error).message}`);
    }
  }
  return { ssh: t.ssh, pgp, problems: t.problems };
}

const sshId = (s: AllowedSigner) => s.key.blob.toString('base64');
const pgpId = (k: openpgp.PublicKey) => k.getFingerprint();

export function unionTrust(...sets: Trust[]): Trust {
  return {
    ssh: sets.flatMap((s) => s.ssh),
    pgp: sets.flatMap((s) => s.pgp),
    problems: sets.flatMap((s) => s.problems),
  };
}

/** Keys present in every set (a merge commit is judged by the signers all its parents agree on). */
export function intersectTrust(sets: Trust[]): Trust {
  if (!sets.length) return EMPTY_TRUST;
  const [first, ...rest] = sets;
  const sshIn = rest.map((s) => new Set(s.ssh.map(sshId)));
  const pgpIn = rest.map((s) => new Set(s.pgp.map(pgpId)));
  return {
    ssh: first!.ssh.filter((k) => sshIn.every((ids) => ids.has(sshId(k)))),
    pgp: first!.pgp.filter((k) => pgpIn.every((ids) => ids.has(pgpId(k)))),
    problems: [],
  };
}

/** An entry's identity for "does the other list hold it": the key and what limits it (namespaces, validity); the
 *  principals are only names. For OpenPGP the whole key as written, so a copy without its revocation differs. */
const sshEntryId = (s: AllowedSigner) =>
  [sshId(s), s.namespaces ? [...s.namespaces].sort().join(',') : '*', s.validAfter?.getTime() ?? '', s.validBefore?.getTime() ?? ''].join(' ');
const pgpEntryId = (k: openpgp.PublicKey) => Buffer.from(k.write()).toString('base64');

/** Where `next` trusts more than `current`: its entries `current` does not hold identically (file:line or fingerprint). */
export function trustAdded(current: Trust, next: Trust): string[] {
  const ssh = new Set(current.ssh.map(sshEntryId));
  const pgp = new Set(current.pgp.map(pgpEntryId));
  return [
    ...next.ssh.filter((s) => !ssh.has(sshEntryId(s))).map((s) => `${s.principals.join(',')} (${s.source})`),
    ...next.pgp.filter((k) => !pgp.has(pgpEntryId(k))).map((k) => `OpenPGP ${k.getFingerprint().toUpperCase()}`),
  ];
}
