// The node's own signing key (--signing-key FILE): an unencrypted OpenSSH private key (Ed25519, ECDSA,
// RSA) or an armored OpenPGP private key. Status and automatic-revert commits are signed with it, in the
// same formats git writes, so other nodes verify them like any commit.
import { createPrivateKey, type KeyObject } from 'node:crypto';
import * as openpgp from 'openpgp';
import { WireReader, SignatureFormatError } from './ssh-wire.js';
import { EC_CURVES, parseSshPublicKey, type SshPublicKey } from './ssh-key.js';
import { signSshMessage } from './sshsig.js';
import { GitlbError } from '../../errors.js';

export interface CommitSigner {
  format: 'ssh' | 'openpgp';
  /** Public identity for logs: key fingerprint. */
  describe: string;
  /** The armored signature of a commit payload (the commit object without its gpgsig header). */
  sign(payload: Uint8Array): Promise<string>;
}

const SSH_BEGIN = '-----BEGIN OPENSSH PRIVATE KEY-----';
const SSH_END = '-----END OPENSSH PRIVATE KEY-----';
const b64u = (b: Buffer) => b.toString('base64url');

/** Parses an unencrypted openssh-key-v1 private key into a Node KeyObject and its SSH public key. */
export function parseOpenSshPrivateKey(text: string): { privateKey: KeyObject; publicKey: SshPublicKey } {
  const t = text.trim();
  if (!t.startsWith(SSH_BEGIN) || !t.endsWith(SSH_END)) throw new SignatureFormatError('not an OpenSSH private key');
  const r = new WireReader(Buffer.from(t.slice(SSH_BEGIN.length, t.length - SSH_END.length).replace(/\s+/g, ''), 'base64'), 'SSH private key');
  if (r.bytes(15).toString('latin1') !== 'openssh-key-v1\0') throw new SignatureFormatError('SSH private key: bad magic');
  const cipher = r.text();
  r.text(); // kdf name
  r.string(); // kdf options
  if (cipher !== 'none') throw new SignatureFormatError('the SSH signing key is passphrase-protected; give the daemon an unencrypted key file readable only by it');
  if (r.uint32() !== 1) throw new SignatureFormatError('SSH private key: expected exactly one key');
  const publicKey = parseSshPublicKey(Buffer.from(r.string(4096)));
  const p = new WireReader(Buffer.from(r.string(65536)), 'SSH private key');
  if (p.uint32() !== p.uint32()) throw new SignatureFormatError('SSH private key: check bytes differ');
  const type = p.text();
  if (type !== publicKey.type) throw new SignatureFormatError('SSH private key: private and public parts differ');
  let jwk: Record<string, string>;
  if (type === 'ssh-ed25519') {
    const pub = p.string(64);
    const priv = p.string(128);
    jwk = { kty: 'OKP', crv: 'Ed25519', x: b64u(pub), d: b64u(priv.subarray(0, 32)) };
  } else if (type.startsWith('ecdsa-sha2-')) {
    const curve = EC_CURVES[p.text()]!;
    const q = p.string(1 + 2 * curve.size);
    const d = p.mpint(curve.size + 1);
    jwk = {
      kty: 'EC',
      crv: curve.crv,
      x: b64u(q.subarray(1, 1 + curve.size)),
      y: b64u(q.subarray(1 + curve.size)),
      d: b64u(Buffer.concat([Buffer.alloc(curve.size - d.length), d])),
    };
  } else if (type === 'ssh-rsa') {
    const [n, e, d, iqmp, pp, q] = [p.mpint(), p.mpint(), p.mpint(), p.mpint(), p.mpint(), p.mpint()];
    const big = (b: Buffer) => BigInt(`0x${b.toString('hex') || '0'}`);
    const bytes = (v: bigint) => {
      const hex = v.toString(16);
      return Buffer.from(hex.length % 2 ? `0${hex}` : hex, 'hex');
    };
    jwk = {
      kty: 'RSA',
      n: b64u(n!),
      e: b64u(e!),
      d: b64u(d!),
      p: b64u(pp!),
      q: b64u(q!),
      dp: b64u(bytes(big(d!) % (big(pp!) - 1n))),
      dq: b64u(bytes(big(d!) % (big(q!) - 1n))),
      qi: b64u(iqmp!),
    };
  } else throw new SignatureFormatError(`SSH private key type '${type}' is not supported`);
  return { privateKey: createPrivateKey({ key: jwk, format: 'jwk' }), publicKey };
}

/** Loads --signing-key: OpenSSH or OpenPGP, told apart by the armor. */
export async function loadSigningKey(text: string, file: string): Promise<CommitSigner> {
  if (text.includes(SSH_BEGIN)) {
    let parsed;
    try {
      parsed = parseOpenSshPrivateKey(text);
    } catch (err) {
      throw new GitlbError('InvalidOption', `${file}: ${(err as Error).message}`, { field: '--signing-key' });
    }
    const { privateKey, publicKey } = parsed;
    return {
      format: 'ssh',
      describe: `SSH ${publicKey.fingerprint}`,
      sign: async (payload) => signSshMessage(privateKey, publicKey, payload),
    };
  }
  if (text.includes('-----BEGIN PGP PRIVATE KEY BLOCK-----')) {
    let key: openpgp.PrivateKey;
    try {
      key = await openpgp.readPrivateKey({ armoredKey: text });
    } catch (err) {
      throw new GitlbError('InvalidOption', `${file}: ${(err as Error).message}`, { field: '--signing-key' });
    }
    if (!key.isDecrypted()) throw new GitlbError('InvalidOption', `${file}: the OpenPGP signing key is passphrase-protected; give the daemon an unprotected key readable only by it`, { field: '--signing-key' });
    return {
      format: 'openpgp',
      describe: `OpenPGP ${key.getFingerprint().toUpperCase()}`,
      sign: async (payload) =>
        (await openpgp.sign({ message: await openpgp.createMessage({ binary: payload }), signingKeys: key, detached: true, format: 'armored' })) as string,
    };
  }
  throw new GitlbError('InvalidOption', `${file}: neither an OpenSSH private key nor an armored OpenPGP private key`, { field: '--signing-key' });
}
