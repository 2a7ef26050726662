// The SSHSIG signature format (OpenSSH PROTOCOL.sshsig), as `ssh-keygen -Y sign -n git` writes it for
// git's gpg.format=ssh: parse the armored block, check magic, version, namespace and hash algorithm, rebuild
// the signed data and verify it with Node's crypto. Also the signing side, for the nodes' own commits.
import { createHash, sign as cryptoSign, verify as cryptoVerify, type KeyObject } from 'node:crypto';
import { SignatureFormatError, WireReader, wireString, wireUint32, wireMpint } from './ssh-wire.js';
import { EC_CURVES, parseSshPublicKey, UnsupportedAlgorithmError, type SshPublicKey } from './ssh-key.js';

const MAGIC = Buffer.from('SSHSIG', 'latin1');
const BEGIN = '-----BEGIN SSH SIGNATURE-----';
const END = '-----END SSH SIGNATURE-----';
export const GIT_NAMESPACE = 'git';
/** Far above any real signature (a 16384-bit RSA key and signature armor to ~6 KiB). */
export const MAX_SSHSIG_ARMOR = 16 * 1024;
const HASHES = new Set(['sha256', 'sha512']);

export interface SshSignature {
  publicKey: SshPublicKey;
  namespace: string;
  hashAlgorithm: string;
  sigFormat: string; // ssh-ed25519, ecdsa-sha2-nistp256, rsa-sha2-256, rsa-sha2-512
  sigBlob: Buffer;
}

export function isSshSignature(armored: string): boolean {
  return armored.trimStart().startsWith(BEGIN);
}

/** Parses an armored SSHSIG; throws SignatureFormatError / UnsupportedAlgorithmError with the reason. */
export function parseSshSignature(armored: string): SshSignature {
  if (armored.length > MAX_SSHSIG_ARMOR) throw new SignatureFormatError(`SSH signature of ${armored.length} bytes exceeds ${MAX_SSHSIG_ARMOR}`);
  const text = armored.trim();
  if (!text.startsWith(BEGIN) || !text.endsWith(END)) throw new SignatureFormatError('SSH signature: missing BEGIN/END armor lines');
  const body = text.slice(BEGIN.length, text.length - END.length).replace(/\s+/g, '');
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(body)) throw new SignatureFormatError('SSH signature: armor is not base64');
  const r = new WireReader(Buffer.from(body, 'base64'), 'SSH signature');
  if (!r.bytes(6).equals(MAGIC)) throw new SignatureFormatError('SSH signature: bad magic (not SSHSIG)');
  const version = r.uint32();
  if (version !== 1) throw new UnsupportedAlgorithmError(`SSH signature version ${version} (only 1 is known)`);
  const publicKey = parseSshPublicKey(Buffer.from(r.string(4096)));
  const namespace = r.text();
  r.string(256); // reserved
  const hashAlgorithm = r.text();
  if (!HASHES.has(hashAlgorithm)) throw new UnsupportedAlgorithmError(`SSH signature hash algorithm '${hashAlgorithm}'`);
  const sig = new WireReader(Buffer.from(r.string(4096)), 'SSH signature blob');
  r.end();
  const sigFormat = sig.text();
  const sigBlob = Buffer.from(sig.string(4096));
  sig.end();
  return { publicKey, namespace, hashAlgorithm, sigFormat, sigBlob };
}

/** The bytes SSHSIG actually signs: magic, namespace, reserved, hash algorithm, H(message). */
function signedData(namespace: string, hashAlgorithm: string, message: Uint8Array): Buffer {
  const digest = createHash(hashAlgorithm).update(message).digest();
  return Buffer.concat([MAGIC, wireString(namespace), wireString(''), wireString(hashAlgorithm), wireString(digest)]);
}

/** The Node signature algorithm and key options for a key type and SSH signature format. */
function algorithmFor(keyType: string, sigFormat: string): { hash: string | null; ec?: { size: number } } {
  if (keyType === 'ssh-ed25519' && sigFormat === 'ssh-ed25519') return { hash: null };
  if (keyType === 'ssh-rsa' && sigFormat === 'rsa-sha2-256') return { hash: 'sha256' };
  if (keyType === 'ssh-rsa' && sigFormat === 'rsa-sha2-512') return { hash: 'sha512' };
  const curve = keyType.startsWith('ecdsa-sha2-') ? EC_CURVES[keyType.slice('ecdsa-sha2-'.length)] : undefined;
  if (curve && sigFormat === keyType) return { hash: curve.hash, ec: { size: curve.size } };
  throw new UnsupportedAlgorithmError(`signature format '${sigFormat}' for a ${keyType} key`);
}

/**
 * Is `sig` a valid signature of `message` in `namespace` by its own embedded public key? Whether that key is
 * trusted is the caller's question (allowed signers).
 */
export function verifySshSignature(sig: SshSignature, message: Uint8Array, namespace = GIT_NAMESPACE): boolean {
  if (sig.namespace !== namespace) throw new SignatureFormatError(`SSH signature namespace '${sig.namespace}', expected '${namespace}'`);
  const alg = algorithmFor(sig.publicKey.type, sig.sigFormat);
  const data = signedData(sig.namespace, sig.hashAlgorithm, message);
  if (alg.ec) {
    // ECDSA signatures are two mpints (r, s): fixed-width big-endian for Node's IEEE P1363 encoding.
    const rs = new WireReader(sig.sigBlob, 'ECDSA signature');
    const parts = [rs.mpint(alg.ec.size + 1), rs.mpint(alg.ec.size + 1)];
    rs.end();
    if (parts.some((p) => p.length > alg.ec!.size)) return false;
    const p1363 = Buffer.concat(parts.map((p) => Buffer.concat([Buffer.alloc(alg.ec!.size - p.length), p])));
    return cryptoVerify(alg.hash, data, { key: sig.publicKey.key, dsaEncoding: 'ieee-p1363' }, p1363);
  }
  return cryptoVerify(alg.hash, data, sig.publicKey.key, sig.sigBlob);
}

/** Signs `message` as `ssh-keygen -Y sign -n git` would; returns the armored SSHSIG. */
export function signSshMessage(privateKey: KeyObject, publicKey: SshPublicKey, message: Uint8Array, namespace = GIT_NAMESPACE): string {
  const hashAlgorithm = 'sha512';
  const data = signedData(namespace, hashAlgorithm, message);
  let sigFormat: string;
  let sigBlob: Buffer;
  if (publicKey.type === 'ssh-ed25519') {
    sigFormat = 'ssh-ed25519';
    sigBlob = cryptoSign(null, data, privateKey);
  } else if (publicKey.type === 'ssh-rsa') {
    sigFormat = 'rsa-sha2-512';
    sigBlob = cryptoSign('sha512', data, privateKey);
  } else {
    const curve = EC_CURVES[publicKey.type.slice('ecdsa-sha2-'.length)];
    if (!curve) throw new UnsupportedAlgorithmError(`cannot sign with a ${publicKey.type} key`);
    sigFormat = publicKey.type;
    const p1363 = cryptoSign(curve.hash, data, { key: privateKey, dsaEncoding: 'ieee-p1363' });
    sigBlob = Buffer.concat([wireMpint(p1363.subarray(0, curve.size)), wireMpint(p1363.subarray(curve.size))]);
  }
  const blob = Buffer.concat([
    MAGIC,
    wireUint32(1),
    wireString(publicKey.blob),
    wireString(namespace),
    wireString(''),
    wireString(hashAlgorithm),
    wireString(Buffer.concat([wireString(sigFormat), wireString(sigBlob)])),
  ]);
  const lines = blob.toString('base64').match(/.{1,70}/g) ?? [];
  return `${BEGIN}\n${lines.join('\n')}\n${END}\n`;
}
