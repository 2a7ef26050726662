// A raw Git commit object split into the signed payload and its signature, the way git does it: the `gpgsig`
// header (and its continuation lines) is removed from the object and what is left is what was signed.
// Pure and bounded: a commit larger than MAX_COMMIT_BYTES or with several signatures is refused by the caller.
export const MAX_COMMIT_BYTES = 1024 * 1024;

export interface SplitCommit {
  payload: Buffer;
  signature: string | null;
  signatureCount: number;
  author: string; // `Name <email>`
  committerTime: number; // seconds
  subject: string;
}

const SIG_HEADERS = new Set(['gpgsig', 'gpgsig-sha256']);

export function splitCommit(raw: Buffer): SplitCommit {
  const headerEnd = raw.indexOf('\n\n');
  const headerBytes = headerEnd < 0 ? raw : raw.subarray(0, headerEnd + 1);
  const lines = headerBytes.toString('latin1').split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  const kept: string[] = [];
  const sigs: string[] = [];
  let author = '';
  let committerTime = 0;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    const sp = line.indexOf(' ');
    const key = sp < 0 ? line : line.slice(0, sp);
    if (SIG_HEADERS.has(key)) {
      const value = [line.slice(sp + 1)];
      while (i + 1 < lines.length && lines[i + 1]!.startsWith(' ')) value.push(lines[++i]!.slice(1));
      if (key === 'gpgsig') sigs.push(value.join('\n'));
      continue;
    }
    kept.push(line);
    if (key === 'author') author = Buffer.from(line.slice(sp + 1).replace(/ \d+ [+-]\d{4}$/, ''), 'latin1').toString('utf8');
    if (key === 'committer') committerTime = Number(/ (\d+) [+-]\d{4}$/.exec(line)?.[1] ?? 0);
  }
  const body = headerEnd < 0 ? Buffer.alloc(0) : raw.subarray(headerEnd + 1);
  const payload = Buffer.concat([Buffer.from(kept.map((l) => `${l}\n`).join(''), 'latin1'), body]);
  const subject = body.subarray(1).toString('utf8').split('\n')[0] ?? '';
  return { payload, signature: sigs[0] ?? null, signatureCount: sigs.length, author, committerTime, subject: subject.slice(0, 200) };
}
