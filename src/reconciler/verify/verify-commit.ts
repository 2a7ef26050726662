// One commit against a set of trusted signers: split the object (commit-object.ts), recognise the signature
// format, verify it (SSHSIG or OpenPGP) and check the key is trusted and valid now. Never throws for anything
// found in the commit: every problem becomes a refusal with a reason.
import { MAX_COMMIT_BYTES, splitCommit } from './commit-object.js';
import { isSshSignature, parseSshSignature, verifySshSignature, GIT_NAMESPACE } from './sshsig.js';
import { isPgpSignature, verifyPgpSignature } from './openpgp-verify.js';
import { UnsupportedAlgorithmError } from './ssh-key.js';
import type { Trust } from './trust.js';
import type { CommitVerdict, SignatureFailure } from './verdict.js';

export type SignatureFormat = 'ssh' | 'openpgp';

export interface VerifyOptions {
  formats: ReadonlySet<SignatureFormat>;
  now: Date;
}

type Checked = { ok: true; format: SignatureFormat; signer: string } | (SignatureFailure & { format?: SignatureFormat });

function checkSsh(armored: string, payload: Buffer, trust: Trust, now: Date): Checked {
  let sig;
  try {
    sig = parseSshSignature(armored);
  } catch (err) {
    const reason = err instanceof UnsupportedAlgorithmError ? 'unsupported' : 'malformed';
    return { ok: false, format: 'ssh', reason, detail: (err as Error).message };
  }
  const fp = sig.publicKey.fingerprint;
  const entries = trust.ssh.filter((s) => s.key.blob.equals(sig.publicKey.blob));
  if (!entries.length) return { ok: false, format: 'ssh', reason: 'unknown-key', detail: `SSH key ${fp} is not an allowed signer` };
  let valid: boolean;
  try {
    valid = verifySshSignature(sig, payload, GIT_NAMESPACE);
  } catch (err) {
    const reason = err instanceof UnsupportedAlgorithmError ? 'unsupported' : 'malformed';
    return { ok: false, format: 'ssh', reason, detail: (err as Error).message };
  }
  if (!valid) return { ok: false, format: 'ssh', reason: 'bad-signature', detail: `signature by ${fp} does not match the commit` };
  // The key may be listed several times (principals, windows): any entry that admits it now is enough.
  const usable = entries.filter((e) => !e.namespaces || e.namespaces.includes(GIT_NAMESPACE));
  if (!usable.length) return { ok: false, format: 'ssh', reason: 'unknown-key', detail: `SSH key ${fp} is not allowed to sign in namespace '${GIT_NAMESPACE}'` };
  const current = usable.find((e) => (!e.validAfter || now >= e.validAfter) && (!e.validBefore || now < e.validBefore));
  if (!current) {
    const expired = usable.some((e) => e.validBefore && now >= e.validBefore);
    return expired
      ? { ok: false, format: 'ssh', reason: 'expired-key', detail: `SSH key ${fp} is valid only before ${usable.map((e) => e.validBefore?.toISOString()).filter(Boolean).join(', ')}` }
      : { ok: false, format: 'ssh', reason: 'not-yet-valid', detail: `SSH key ${fp} is not valid yet` };
  }
  return { ok: true, format: 'ssh', signer: `${current.principals.join(',')} (SSH ${fp})` };
}

export async function verifyCommitRaw(oid: string, raw: Buffer, trust: Trust, o: VerifyOptions): Promise<CommitVerdict> {
  if (raw.length > MAX_COMMIT_BYTES)
    return { commit: oid, author: '(unknown)', subject: '', ok: false, reason: 'malformed', detail: `commit object of ${raw.length} bytes exceeds ${MAX_COMMIT_BYTES}` };
  const c = splitCommit(raw);
  const base = { commit: oid, author: c.author || '(unknown)', subject: c.subject };
  let checked: Checked;
  if (c.signatureCount > 1) checked = { ok: false, reason: 'malformed', detail: `${c.signatureCount} signature headers` };
  else if (!c.signature) checked = { ok: false, reason: 'unsigned', detail: 'the commit carries no signature' };
  else if (isSshSignature(c.signature))
    checked = o.formats.has('ssh') ? checkSsh(c.signature, c.payload, trust, o.now) : { ok: false, format: 'ssh', reason: 'format-not-allowed', detail: 'SSH signatures are not accepted by the policy' };
  else if (isPgpSignature(c.signature))
    checked = o.formats.has('openpgp')
      ? { format: 'openpgp', ...(await verifyPgpSignature(c.signature, c.payload, trust.pgp, o.now)) }
      : { ok: false, format: 'openpgp', reason: 'format-not-allowed', detail: 'OpenPGP signatures are not accepted by the policy' };
  else checked = { ok: false, reason: 'unsupported', detail: `unrecognised signature block '${c.signature.split('\n')[0]!.slice(0, 60)}'` };
  return checked.ok ? { ...base, ok: true, format: checked.format, signer: checked.signer } : { ...base, ...checked };
}
