// The peer channel's key: the cluster's peer secret, read from a file, judged, and turned into a MAC key.
//
// Why a shared secret and not each node's SSH key: a DaemonSet mounts one Secret on every lb node, with no config
// change and no per-node provisioning; per-node keys would need a key per node listed in the config before the first
// vote. The price is that any holder of the secret can speak as any lb node, so the secret goes to lb nodes only
// (backends never exchange votes). docs/security.md, "Peers".
//
// The rule for a secret (peerSecretProblem), checked at start so a weak secret never runs:
//   - at least 256 bits by its alphabet: 64 hex digits, 43 base64 characters, or 32 bytes of other text;
//   - at least 16 distinct characters, 10 for hex (catches 'aaaa…', '0101…', a word typed twice);
//   - not a repetition of a shorter string (catches 'abcdabcd…').
// These catch mistakes, not a clever low-entropy choice: generate it with `head -c 32 /dev/urandom | base64`.
import { createHmac, hkdfSync, timingSafeEqual } from 'node:crypto';
import { readSecretFile, type Warn } from '../secret-file.js';

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

/** Signs and checks the channel's messages. `mac` is a lowercase hex string. */
export interface PeerAuth {
  readonly scheme: 'hmac-sha256';
  mac(data: string): string;
  verify(data: string, mac: string): boolean;
}

/** The MAC key is derived (HKDF) from the secret, so the secret itself never keys anything else by accident. */
export function secretAuth(secret: string): PeerAuth {
  const problem = peerSecretProblem(secret);
  if (problem) throw new Error(`peer secret ${problem}`);
  const key = Buffer.from(hkdfSync('sha256', Buffer.from(secret, 'utf8'), 'gitlb', 'gitlb peer channel v1', 32));
  const mac = (data: string) => createHmac('sha256', key).update(data, 'utf8').digest('hex');
  return {
    scheme: 'hmac-sha256',
    mac,
    verify(data, given) {
      if (!/^[0-9a-f]{64}$/.test(given)) return false;
      return timingSafeEqual(Buffer.from(mac(data), 'hex'), Buffer.from(given, 'hex'));
    },
  };
}

/** Reads and judges the secret file; throws `<option> <file>: ...` (never the content) when it cannot be used. */
export function loadPeerSecretFile(file: string, option = '--peer-secret-file', warn?: Warn): PeerAuth {
  const secret = readSecretFile(file, option, warn).trim();
  const problem = peerSecretProblem(secret);
  if (problem) throw new Error(`${option} ${file}: the peer secret ${problem}; ${GENERATE_HINT}`);
  return secretAuth(secret);
}
