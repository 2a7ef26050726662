// The peer channel's keys, two ways (docs/security.md, "Peers"):
//   - the cluster's peer secret (--peer-secret-file), read from a file, judged, and turned into a MAC key: the
//     shipped default, since a DaemonSet mounts one Secret on every lb node with no per-node provisioning; any
//     holder can speak as any lb node, so it goes to lb nodes only;
//   - each lb node's own ed25519 key (--peer-key, an OpenSSH private key; its public half is the Node document's
//     spec.peerKey): every message is signed by its sender and checked against the sender's key in the applied
//     config, so no shared secret exists and a compromised lb node can speak only for itself.
//
// The rule for a secret (peerSecretProblem), checked at start so a weak secret never runs:
//   - at least 256 bits by its alphabet: 64 hex digits, 43 base64 characters, or 32 bytes of other text;
//   - at least 16 distinct characters, 10 for hex (catches 'aaaa…', '0101…', a word typed twice);
//   - not a repetition of a shorter string (catches 'abcdabcd…').
// These catch mistakes, not a clever low-entropy choice: generate it with `head -c 32 /dev/urandom | base64`.
import { createHmac, hkdfSync, sign as edSign, timingSafeEqual, verify as edVerify, type KeyObject } from 'node:crypto';
import { readSecretFile, type Warn } from '../secrets/secret-file.js';
import { parseOpenSshPrivateKey } from '../verify/signing-key.js';
import { parseSshPublicKeyText, type SshPublicKey } from '../verify/ssh-key.js';
import { GitlbError } from '../../errors.js';

export const MIN_SECRET_BITS = 256;
export const MIN_DISTINCT_CHARS = 16;
export const MIN_DISTINCT_HEX_DIGITS = 10;
export const GENERATE_HINT = 'generate one with: head -c 32 /dev/urandom | base64';

/** Bits a character of the text's alphabet carries at most (hex 4, base64 6, anything else 8). */
function bitsPerChar(text: string): number {
  if (/^[0-9a-fA-F]+$/.test(text)) return 4;
  if (/^[A-Za-z0-9+/_-]+={0,2}$/.test(text)) return 6;
  return 8;
}

/** The shortest period p < length with text[i] === text[i - p] for all i, or 0 when the text does not repeat. */
function repeatPeriod(text: string): number {
  for (let p = 1; p <= text.length / 2; p++) {
    let repeats = true;
    for (let i = p; i < text.length && repeats; i++) repeats = text[i] === text[i - p];
    if (repeats) return p;
  }
  return 0;
}

/** Why `secret` (the file's text, trimmed) cannot be the peer secret, or undefined when it can. Never echoes it. */
export function peerSecretProblem(secret: string): string | undefined {
  const bytes = Buffer.byteLength(secret, 'utf8');
  const bits = secret.replace(/=+$/, '').length * bitsPerChar(secret);
  if (bytes === 0) return 'is empty';
  if (bits < MIN_SECRET_BITS)
    return `holds at most ${bits} bits (${secret.length} characters); at least ${MIN_SECRET_BITS} are needed: 64 hex digits, 43 base64 characters or 32 bytes`;
  const distinct = new Set(secret).size;
  // 64 random hex digits show all 16 digits nearly always, but not always: hex needs 10.
  const needed = bitsPerChar(secret) === 4 ? MIN_DISTINCT_HEX_DIGITS : MIN_DISTINCT_CHARS;
  if (distinct < needed) return `has only ${distinct} distinct characters (at least ${needed}): not random`;
  const period = repeatPeriod(secret);
  if (period) return `repeats a ${period}-character pattern: not random`;
  return undefined;
}

/** Signs and checks the channel's messages: a MAC or a signature, as lowercase hex. */
export interface PeerAuth {
  readonly scheme: 'hmac-sha256' | 'ssh-ed25519';
  /** This node's MAC or signature over `data`. */
  sign(data: string): string;
  /** Whether `sig` over `data` was made by `from` (a shared secret cannot tell holders apart: any holder passes). */
  verify(from: string, data: string, sig: string): boolean;
}

/** The MAC key is derived (HKDF) from the secret, so the secret itself never keys anything else by accident. */
export function secretAuth(secret: string): PeerAuth {
  const problem = peerSecretProblem(secret);
  if (problem) throw new GitlbError('InvalidOption', `peer secret ${problem}`);
  const key = Buffer.from(hkdfSync('sha256', Buffer.from(secret, 'utf8'), 'gitlb', 'gitlb peer channel v1', 32));
  const mac = (data: string) => createHmac('sha256', key).update(data, 'utf8').digest('hex');
  return {
    scheme: 'hmac-sha256',
    sign: mac,
    verify(_from, data, given) {
      if (!/^[0-9a-f]{64}$/.test(given)) return false;
      return timingSafeEqual(Buffer.from(mac(data), 'hex'), Buffer.from(given, 'hex'));
    },
  };
}

/** This node's peer key (--peer-key): the private key and its public line, as spec.peerKey must read. */
export interface PeerKey {
  privateKey: KeyObject;
  publicKey: SshPublicKey;
  /** `ssh-ed25519 AAAA…` (no comment). */
  publicLine: string;
}

/** Reads --peer-key: an unencrypted OpenSSH ed25519 private key; throws `<option> <file>: ...` otherwise. */
export function loadPeerKeyFile(file: string, option = '--peer-key', warn?: Warn): PeerKey {
  const text = readSecretFile(file, option, warn);
  let parsed;
  try {
    parsed = parseOpenSshPrivateKey(text);
  } catch (err) {
    throw new GitlbError('InvalidOption', `${option} ${file}: ${(err as Error).message}`);
  }
  if (parsed.publicKey.type !== 'ssh-ed25519') throw new GitlbError('InvalidOption', `${option} ${file}: a ${parsed.publicKey.type} key; the peer channel takes ed25519 keys only (ssh-keygen -t ed25519)`);
  return { ...parsed, publicLine: `ssh-ed25519 ${parsed.publicKey.blob.toString('base64')}` };
}

/** The key part of a `ssh-ed25519 AAAA… [comment]` line, for comparing lines. */
export function peerKeyBlob(line: string): string {
  return line.trim().split(/\s+/)[1] ?? '';
}

/**
 * Per-node signatures: this node signs with `key`; a message from `from` passes only with a signature by the key
 * `publicKeyOf(from)` returns (the sender's spec.peerKey in the applied config; none: nothing from it passes).
 */
export function nodeKeyAuth(key: PeerKey, publicKeyOf: (node: string) => string | undefined): PeerAuth {
  const parsed = new Map<string, KeyObject | null>(); // line -> key (null: unusable), lines change with the config
  const keyOf = (node: string): KeyObject | null => {
    const line = publicKeyOf(node);
    if (!line) return null;
    if (!parsed.has(line)) {
      const [type, b64] = line.trim().split(/\s+/);
      try {
        if (parsed.size > 1024) parsed.clear();
        parsed.set(line, type === 'ssh-ed25519' ? parseSshPublicKeyText(type, b64 ?? '').key : null);
      } catch {
        parsed.set(line, null);
      }
    }
    return parsed.get(line) ?? null;
  };
  return {
    scheme: 'ssh-ed25519',
    sign: (data) => edSign(null, Buffer.from(data, 'utf8'), key.privateKey).toString('hex'),
    verify(from, data, sig) {
      const pub = keyOf(from);
      if (!pub || !/^[0-9a-f]{128}$/.test(sig)) return false;
      return edVerify(null, Buffer.from(data, 'utf8'), pub, Buffer.from(sig, 'hex'));
    },
  };
}

/** Reads and judges the secret file; throws `<option> <file>: ...` (never the content) when it cannot be used. */
export function loadPeerSecretFile(file: string, option = '--peer-secret-file', warn?: Warn): PeerAuth {
  const secret = readSecretFile(file, option, warn).trim();
  const problem = peerSecretProblem(secret);
  if (problem) throw new GitlbError('InvalidOption', `${option} ${file}: the peer secret ${problem}; ${GENERATE_HINT}`);
  return secretAuth(secret);
}
