// SSH public keys (the wire blob of RFC 4253 §6.6 / RFC 5656 / RFC 8709) turned into Node KeyObjects.
// Only the algorithms git's SSH signing produces with ordinary keys: Ed25519, ECDSA P-256/384/521 and RSA.
// Security-key (sk-*) and certificate types are refused by name.
import { createHash, createPublicKey, type KeyObject } from 'node:crypto';
import { SignatureFormatError, WireReader } from './ssh-wire.js';

export interface SshPublicKey {
  type: string; // e.g. ssh-ed25519, ecdsa-sha2-nistp256, ssh-rsa
  blob: Buffer; // the wire encoding (what fingerprints and allowed_signers compare)
  key: KeyObject;
  fingerprint: string; // SHA256:base64 (unpadded), as ssh-keygen -l prints
}

export class UnsupportedAlgorithmError extends Error {
  override name = 'UnsupportedAlgorithmError';
}

export const EC_CURVES: Record<string, { crv: string; size: number; hash: string }> = {
  nistp256: { crv: 'P-256', size: 32, hash: 'sha256' },
  nistp384: { crv: 'P-384', size: 48, hash: 'sha384' },
  nistp521: { crv: 'P-521', size: 66, hash: 'sha512' },
};

/** RSA keys below this many bits are refused (OpenSSH's own floor is 1024; 2048 is the modern minimum). */
export const MIN_RSA_BITS = 2048;
const MAX_RSA_BITS = 16384;

const b64u = (b: Buffer) => b.toString('base64url');

export function sshFingerprint(blob: Buffer): string {
  return `SHA256:${createHash('sha256').update(blob).digest('base64').replace(/=+$/, '')}`;
}

/** Parses a public key blob; throws SignatureFormatError or UnsupportedAlgorithmError with a reason. */
export function parseSshPublicKey(blob: Buffer): SshPublicKey {
  const r = new WireReader(blob, 'public key');
  const type = r.text();
  let key: KeyObject;
  if (type === 'ssh-ed25519') {
    const pk = r.string(64);
    if (pk.length !== 32) throw new SignatureFormatError('public key: Ed25519 key is not 32 bytes');
    key = createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: b64u(pk) }, format: 'jwk' });
  } else if (type.startsWith('ecdsa-sha2-')) {
    const curveName = r.text();
    const curve = EC_CURVES[curveName];
    if (!curve || type !== `ecdsa-sha2-${curveName}`) throw new UnsupportedAlgorithmError(`unsupported ECDSA curve '${curveName}'`);
    const q = r.string(1 + 2 * curve.size);
    if (q.length !== 1 + 2 * curve.size || q[0] !== 4) throw new SignatureFormatError('public key: ECDSA point is not an uncompressed point of the curve');
    key = keyOrFormatError(() =>
      createPublicKey({
        key: { kty: 'EC', crv: curve.crv, x: b64u(q.subarray(1, 1 + curve.size)), y: b64u(q.subarray(1 + curve.size)) },
        format: 'jwk',
      }),
    );
  } else if (type === 'ssh-rsa') {
    const e = r.mpint(16);
    const n = r.mpint(MAX_RSA_BITS / 8 + 1);
    const bits = n.length * 8 - (n.length ? Math.clz32(n[0]!) - 24 : 0);
    if (bits < MIN_RSA_BITS) throw new UnsupportedAlgorithmError(`RSA key of ${bits} bits is below the ${MIN_RSA_BITS}-bit minimum`);
    key = keyOrFormatError(() => createPublicKey({ key: { kty: 'RSA', n: b64u(n), e: b64u(e) }, format: 'jwk' }));
  } else throw new UnsupportedAlgorithmError(`unsupported key type '${type}'`);
  r.end();
  return { type, blob, key, fingerprint: sshFingerprint(blob) };
}

function keyOrFormatError(make: () => KeyObject): KeyObject {
  try {
    return make();
  } catch (err) {
    throw new SignatureFormatError(`public key: ${(err as Error).message}`);
  }
}

/** `ssh-ed25519 AAAA... [comment]` as in authorized_keys / allowed_signers / *.pub. */
export function parseSshPublicKeyText(type: string, base64: string): SshPublicKey {
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(base64) || base64.length > 4096) throw new SignatureFormatError('public key: not base64');
  const k = parseSshPublicKey(Buffer.from(base64, 'base64'));
  if (k.type !== type) throw new SignatureFormatError(`public key: declared '${type}' but the key is '${k.type}'`);
  return k;
}
