// OpenPGP detached signatures over a commit payload (git's default gpg.format), verified with openpgp.js.
// Besides the signature itself the signing key must be valid *now* (not expired, not revoked): a key that
// has been retired must not keep admitting new commits that carry an old signing time.
import * as openpgp from 'openpgp';
import type { SignatureFailure } from './verdict.js';

/** Signing clocks run a little ahead of ours at times: a signature up to this far in the future still counts. */
const CLOCK_SKEW_MS = 10 * 60_000;

/** An armored detached signature is a few hundred bytes; far bigger is not one. */
export const MAX_PGP_SIGNATURE = 64 * 1024;

export type PgpResult = { ok: true; signer: string } | SignatureFailure;

export function isPgpSignature(armored: string): boolean {
  return armored.trimStart().startsWith('-----BEGIN PGP SIGNATURE-----');
}

function keyProblem(message: string): SignatureFailure {
  if (/revoked/i.test(message)) return { ok: false, reason: 'revoked-key', detail: message };
  if (/expired/i.test(message)) return { ok: false, reason: 'expired-key', detail: message };
  return { ok: false, reason: 'bad-signature', detail: message };
}

export async function verifyPgpSignature(armored: string, payload: Uint8Array, keys: openpgp.PublicKey[], now: Date): Promise<PgpResult> {
  if (armored.length > MAX_PGP_SIGNATURE) return { ok: false, reason: 'malformed', detail: `OpenPGP signature of ${armored.length} bytes exceeds ${MAX_PGP_SIGNATURE}` };
  let signature: openpgp.Signature;
  try {
    signature = await openpgp.readSignature({ armoredSignature: armored });
  } catch (err) {
    return { ok: false, reason: 'malformed', detail: `OpenPGP signature: ${(err as Error).message}` };
  }
  const ids = signature.getSigningKeyIDs();
  if (ids.length !== 1) return { ok: false, reason: 'malformed', detail: `OpenPGP signature with ${ids.length} signature packets (expected 1)` };
  const id = ids[0]!;
  const key = keys.find((k) => k.getKeys(id).length > 0);
  if (!key) return { ok: false, reason: 'unknown-key', detail: `OpenPGP key ${id.toHex()} is not trusted` };
  const signer = `${key.getUserIDs()[0] ?? '(no user id)'} (OpenPGP ${key.getFingerprint().toUpperCase()})`;
  try {
    const result = await openpgp.verify({
      message: await openpgp.createMessage({ binary: payload }),
      signature,
      verificationKeys: [key],
      date: new Date(now.getTime() + CLOCK_SKEW_MS),
      expectSigned: false,
    });
    await result.signatures[0]!.verified;
  } catch (err) {
    const message = (err as Error).message;
    if (/unknown|unsupported|not supported/i.test(message)) return { ok: false, reason: 'unsupported', detail: message };
    return keyProblem(message);
  }
  // Valid when signed; is the key still usable now?
  try {
    await key.getSigningKey(id, now);
  } catch (err) {
    return keyProblem((err as Error).message);
  }
  return { ok: true, signer };
}
