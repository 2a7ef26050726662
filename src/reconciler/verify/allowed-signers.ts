// The trust file format: an SSH `allowed_signers` file (ssh-keygen(1), ALLOWED SIGNERS) in which armored
// OpenPGP public key blocks may also appear. One format for the daemon's --trust root and for the repository's
// signers list. Pure: text in, entries and per-line problems out.
import { parseSshPublicKeyText, type SshPublicKey } from './ssh-key.js';

export interface AllowedSigner {
  principals: string[]; // named as the signer; not matched against the committer (git does not either)
  namespaces: string[] | null; // null: any namespace
  validAfter: Date | null;
  validBefore: Date | null;
  key: SshPublicKey;
  source: string; // file:line
}

export interface TrustText {
  ssh: AllowedSigner[];
  pgpArmored: { text: string; source: string }[];
  problems: string[]; // `file:line: reason`; the line is ignored
}

/** Trust files are small lists of keys; anything bigger is refused before parsing. */
export const MAX_TRUST_BYTES = 1024 * 1024;
const MAX_LINE = 16 * 1024;
const PGP_BEGIN = '-----BEGIN PGP PUBLIC KEY BLOCK-----';
const PGP_END = '-----END PGP PUBLIC KEY BLOCK-----';

/** Splits on blanks, keeping double-quoted runs together (quotes kept; options carry them). */
function fields(line: string): string[] {
  const out: string[] = [];
  let cur = '';
  let quoted = false;
  for (const ch of line) {
    if (ch === '"') quoted = !quoted;
    if (!quoted && (ch === ' ' || ch === '\t')) {
      if (cur) out.push(cur);
      cur = '';
    } else cur += ch;
  }
  if (quoted) throw new Error('unterminated quote');
  if (cur) out.push(cur);
  return out;
}

function isKeyType(s: string): boolean {
  return /^(ssh-|ecdsa-|sk-)[a-z0-9@.-]+$/.test(s);
}

/** `YYYYMMDD[HHMM[SS]][Z]`; read as UTC (documented: ssh-keygen reads it as local time without Z). */
export function parseSshTime(s: string): Date {
  const m = /^(\d{4})(\d{2})(\d{2})(?:(\d{2})(\d{2})(\d{2})?)?Z?$/.exec(s);
  if (!m) throw new Error(`bad time '${s}' (expected YYYYMMDD[HHMM[SS]][Z])`);
  const [, y, mo, d, h = '0', mi = '0', sec = '0'] = m;
  const t = new Date(Date.UTC(+y!, +mo! - 1, +d!, +h, +mi, +sec));
  if (Number.isNaN(t.getTime()) || t.getUTCDate() !== +d!) throw new Error(`bad time '${s}'`);
  return t;
}

/** Options field: comma-separated, values optionally quoted (quoted values may hold commas). */
function parseOptions(s: string): Pick<AllowedSigner, 'namespaces' | 'validAfter' | 'validBefore'> {
  const out: Pick<AllowedSigner, 'namespaces' | 'validAfter' | 'validBefore'> = { namespaces: null, validAfter: null, validBefore: null };
  const re = /([a-z-]+)(?:=("([^"]*)"|[^,]*))?(?:,|$)/gy;
  let m: RegExpExecArray | null;
  let consumed = 0;
  while (consumed < s.length && (m = re.exec(s))) {
    consumed = re.lastIndex;
    const [, name, raw, quotedValue] = m;
    const value = quotedValue ?? raw;
    if (name === 'cert-authority') throw new Error('cert-authority lines are not supported');
    if (value === undefined) throw new Error(`option '${name}' needs a value`);
    if (name === 'namespaces') out.namespaces = value.split(',').map((n) => n.trim()).filter(Boolean);
    else if (name === 'valid-after') out.validAfter = parseSshTime(value);
    else if (name === 'valid-before') out.validBefore = parseSshTime(value);
    else throw new Error(`unknown option '${name}'`);
  }
  if (consumed !== s.length) throw new Error(`cannot parse options '${s.slice(0, 80)}'`);
  return out;
}

function parseSignerLine(line: string, source: string): AllowedSigner {
  const f = fields(line);
  if (f.length < 3) throw new Error('expected: principals [options] key-type base64-key [comment]');
  const principalsField = f[0]!.replace(/^"|"$/g, '');
  const principals = principalsField.split(',').filter(Boolean);
  if (!principals.length) throw new Error('no principals');
  let i = 1;
  let opts: Pick<AllowedSigner, 'namespaces' | 'validAfter' | 'validBefore'> = { namespaces: null, validAfter: null, validBefore: null };
  if (!isKeyType(f[1]!)) {
    opts = parseOptions(f[1]!);
    i = 2;
  }
  const type = f[i];
  const b64 = f[i + 1];
  if (!type || !b64) throw new Error('missing key');
  if (type.startsWith('sk-')) throw new Error(`security-key type '${type}' is not supported`);
  return { principals, ...opts, key: parseSshPublicKeyText(type, b64), source };
}

/** Parses a trust file's text; `name` is used in problem locations (`name:line`). */
export function parseTrustText(text: string, name: string): TrustText {
  const out: TrustText = { ssh: [], pgpArmored: [], problems: [] };
  if (text.length > MAX_TRUST_BYTES) {
    out.problems.push(`${name}: larger than ${MAX_TRUST_BYTES} bytes; ignored`);
    return out;
  }
  const lines = text.split(/\r?\n/);
  for (let n = 0; n < lines.length; n++) {
    const line = lines[n]!.trim();
    const where = `${name}:${n + 1}`;
    if (line === PGP_BEGIN) {
      const start = n;
      while (n < lines.length && lines[n]!.trim() !== PGP_END) n++;
      if (n === lines.length) {
        out.problems.push(`${where}: OpenPGP key block without '${PGP_END}'`);
        break;
      }
      out.pgpArmored.push({ text: lines.slice(start, n + 1).map((l) => l.trim()).join('\n') + '\n', source: where });
      continue;
    }
    if (!line || line.startsWith('#')) continue;
    if (line.length > MAX_LINE) {
      out.problems.push(`${where}: line longer than ${MAX_LINE} characters`);
      continue;
    }
    try {
      out.ssh.push(parseSignerLine(line, where));
    } catch (err) {
      out.problems.push(`${where}: ${(err as Error).message}`);
    }
  }
  return out;
}
