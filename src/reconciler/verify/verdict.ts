// What verifying one commit says: trusted (and by whom), or refused with a reason from a small fixed set
// that status, logs and `gitlb verify` print.
export type VerifyReason =
  | 'unsigned'
  | 'unknown-key'
  | 'bad-signature'
  | 'expired-key'
  | 'revoked-key'
  | 'not-yet-valid'
  | 'format-not-allowed'
  | 'unsupported'
  | 'malformed';

export type SignatureFailure = { ok: false; reason: VerifyReason; detail: string };

export interface CommitVerdict {
  commit: string;
  author: string; // `Name <email>`
  subject: string;
  ok: boolean;
  format?: 'ssh' | 'openpgp';
  signer?: string; // who signed it (principal / user id and key fingerprint), when trusted
  reason?: VerifyReason;
  detail?: string;
}

/** One line for logs and status: `commit 1a2b3c4d5e6f by Name <email>: unknown-key (…)`. */
export function describeVerdict(v: CommitVerdict): string {
  return v.ok
    ? `commit ${v.commit.slice(0, 12)} by ${v.author}: signed by ${v.signer}`
    : `commit ${v.commit.slice(0, 12)} by ${v.author}: ${v.reason}${v.detail ? ` (${v.detail})` : ''}`;
}
