// The closed set of error codes (src/errors.ts): every decision of the reconciler follows a code, none reads an
// error's message text. Pure checks of the set and its reactions, the translation points (the data plane's
// errnos, the Git deadline, the peer channel), and a scan of src/ for decisions taken on message text.
import test from 'ava';
import { readFileSync, readdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  ERROR_CLASSES, ERROR_CODES, GitlbError, asRevisionError, classOf, conditionOf, errorCode, fromDataPlane, isErrorCode,
  isRevisionErrorCode, reactionTo, type ErrorCode,
} from '../../src/errors.js';
import { CONDITION_REASONS } from '../../src/reconciler/status/conditions.js';
import { PlanCapacityError } from '../../src/render/ops-plan.js';
import { einval } from '../../src/bpf/dataplane/validate.js';
import { DeadlineError, isStopped, withDeadline } from '../../src/reconciler/source/deadline.js';
import { PeerError, REJECT_REASONS } from '../../src/reconciler/peer/errors.js';
import { parseListen } from '../../src/reconciler/triggers/webhook.js';
import { readSecretFile } from '../../src/reconciler/secrets/secret-file.js';
import { buildMaglevTable, maglevSeedFromBase64, MAX_TABLE_SIZE } from '../../src/render/maglev.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const CODES = Object.keys(ERROR_CODES) as ErrorCode[];

test('the set is closed: every code has a class of the fixed list and a condition reason of the status, or none', (t) => {
  t.true(CODES.length > 0);
  for (const code of CODES) {
    t.true(ERROR_CLASSES.includes(classOf(code)), code);
    const c = conditionOf(code);
    if (c !== null) t.true((CONDITION_REASONS as readonly string[]).includes(c), `${code}: ${c}`);
    t.is(isRevisionErrorCode(code), c !== null, code);
  }
  t.true(isErrorCode('CapacityExceeded'));
  for (const foreign of ['EINVAL', 'ENOSPC', 'NotFoundError', 'toString', '__proto__', '']) t.false(isErrorCode(foreign), foreign);
});

test('each class decides retry, stall and revert; the code alone decides, whatever the message says', (t) => {
  const expected = {
    retry: { retry: true, revert: false, record: true },
    permanent: { retry: false, revert: false, record: true },
    capacity: { retry: false, revert: false, record: true },
    verification: { retry: false, revert: false, record: true },
    input: { retry: false, revert: true, record: true },
    stopped: { retry: false, revert: false, record: false },
  } as const;
  for (const code of CODES) t.deepEqual(reactionTo(code), expected[classOf(code)], code);
  // Only the revision's own content is reverted; a node-local or trust failure never is.
  t.deepEqual(CODES.filter((c) => isRevisionErrorCode(c) && reactionTo(c).revert).sort(), ['ConfigInvalid', 'HealthGateFailed', 'RenderFailed']);
  t.deepEqual(CODES.filter((c) => classOf(c) === 'retry' && isRevisionErrorCode(c)).sort(),
    ['ApplyFailed', 'BranchNotFound', 'FetchFailed', 'GitObjectMissing', 'GitTimeout', 'HistoryUnreadable', 'ReadbackMismatch']);
  // A message cannot change the code: words of another class's failure do not move it.
  const e = new GitlbError('ApplyFailed', 'EINVAL ENOSPC capacity exceeded: cannot represent, not retried');
  t.is(e.class, 'retry');
  t.is(fromDataPlane(e), e);
});

test('the data plane: its own refusals are typed; a kernel errno is translated in one place, anything else is retried', (t) => {
  const cap = new PlanCapacityError('lb_rings: no free entry for new service web2 (2): 1 of 1 in use');
  t.like(cap, { code: 'CapacityExceeded', errno: 'ENOSPC', name: 'PlanCapacityError' });
  t.is(cap.class, 'capacity');
  const refused = t.throws(() => einval('services[web].ring[0]: real id 999 is not in reals'));
  t.like(refused, { code: 'DataPlaneRefused', errno: 'EINVAL', message: 'services[web].ring[0]: real id 999 is not in reals' });
  t.is(errorCode(refused), 'DataPlaneRefused');

  const errno = (code: string, message: string) => Object.assign(new Error(message), { code });
  t.like(fromDataPlane(errno('EINVAL', 'lb_vips: bad value')), { code: 'DataPlaneRefused', errno: 'EINVAL', message: 'lb_vips: bad value' });
  t.like(fromDataPlane(errno('ENOSPC', 'lb_reals full')), { code: 'CapacityExceeded', errno: 'ENOSPC' });
  // benign: a map another writer filled between plan and apply (E2BIG), memory pressure: undone and retried
  for (const e of ['E2BIG', 'ENOMEM', 'EBUSY']) t.like(fromDataPlane(errno(e, `vip.put: ${e}`)), { code: 'ApplyFailed', errno: e }, e);
  t.like(fromDataPlane(new Error('no code at all')), { code: 'ApplyFailed', message: 'no code at all' });
  t.is(fromDataPlane('a string').message, 'a string');
  // a typed error that is no revision failure is not taken for one
  t.like(fromDataPlane(new GitlbError('Stopped', 'stopping')), { code: 'ApplyFailed', message: 'stopping' });
  const cause = errno('ENOMEM', 'x');
  t.is(fromDataPlane(cause).cause, cause, 'the foreign error stays readable as cause');
});

test('stage fallbacks keep a typed code and the message; an untyped error takes the stage\'s own code', (t) => {
  const missing = new GitlbError('GitObjectMissing', 'Could not find 0123.');
  t.is(asRevisionError(missing, 'ConfigInvalid'), missing, 'an object the cache lacks is retried, not blamed on the config');
  t.like(asRevisionError(new Error('x.yaml: bad'), 'ConfigInvalid'), { code: 'ConfigInvalid', message: 'x.yaml: bad' });
  t.like(asRevisionError(new PeerError('lb-2', 'health', 'timeout', 'no answer'), 'RenderFailed'), { code: 'RenderFailed' });
  const at = { file: 'services/web.yaml', line: 3, col: 7 };
  t.like(new GitlbError('ConfigInvalid', 'services/web.yaml:3:7: error: bad', { at, field: 'spec.reals' }), { at, field: 'spec.reals' });
});

test('Git deadlines and stops are typed: a stop is recognised by its code, a timeout is retried', async (t) => {
  const timeout = await t.throwsAsync(withDeadline('fetch of main from http://x', 20, () => new Promise(() => {})));
  t.true(timeout instanceof DeadlineError);
  t.like(timeout, { code: 'GitTimeout', message: 'fetch of main from http://x timed out after 20 ms' });
  t.false(isStopped(timeout));
  const stop = new AbortController();
  stop.abort();
  const stopped = await t.throwsAsync(withDeadline('fetch of main', 1000, () => Promise.resolve(1), stop.signal));
  t.like(stopped, { code: 'Stopped', message: 'fetch of main not started: stopping' });
  t.true(isStopped(stopped));
  // benign: an error whose text says "stopping" is not a stop
  t.false(isStopped(new Error('stopping')));
  t.false(isStopped(Object.assign(new Error('x'), { code: 'ESTOPPED' })));
});

test('peer channel: no answer is PeerUnreachable (retry), a refusal is PeerRejected; messages and reasons unchanged', (t) => {
  for (const reason of ['unreachable', 'timeout'] as const)
    t.like(new PeerError('lb-2', 'health', reason, 'x'), { code: 'PeerUnreachable', reason, message: 'peer lb-2: health: x' });
  for (const reason of [...REJECT_REASONS, 'unknown-peer', 'refused'] as const) {
    const e = new PeerError('lb-2', 'health', reason, 'y');
    t.like(e, { code: 'PeerRejected', reason }, reason);
    t.is(e.class, 'verification');
  }
});

test('option, config and render errors carry their code and field; their messages are what they were', (t) => {
  t.like(t.throws(() => parseListen('nowhere', '--metrics')), { code: 'InvalidOption', field: '--metrics', message: "--metrics: expected ADDR:PORT, got 'nowhere'" });
  t.like(t.throws(() => parseListen('127.0.0.1:70000', '--webhook')), { code: 'InvalidOption', field: '--webhook', message: '--webhook: port 70000 out of range' });
  t.deepEqual(parseListen('[2001:db8::1]:9464', '--metrics'), { host: '2001:db8::1', port: 9464 }, 'benign: a good address parses');
  const dir = fileURLToPath(new URL('.', import.meta.url));
  t.like(t.throws(() => readSecretFile(dir, '--peer-secret-file', () => {})),
    { code: 'InvalidOption', field: '--peer-secret-file', message: `--peer-secret-file ${dir}: cannot read: is a directory, not a file` });
  t.like(t.throws(() => readSecretFile(join(dir, 'no-such-file'), '--peer-secret-file', () => {})),
    { code: 'InvalidOption', message: `--peer-secret-file ${join(dir, 'no-such-file')}: cannot read: no such file` });
  t.like(t.throws(() => maglevSeedFromBase64('not base64!')), { code: 'ConfigInvalid', field: 'maglev.seed' });
  t.like(t.throws(() => buildMaglevTable([], 16, 1)), { code: 'RenderFailed', message: `maglev: table size 16 must be a prime below ${MAX_TABLE_SIZE + 1}` });
});

/** Every .ts file under src/. */
function sources(dir = join(ROOT, 'src')): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = join(dir, e.name);
    return e.isDirectory() ? sources(p) : e.name.endsWith('.ts') ? [p] : [];
  });
}

// A decision taken on message text: matching an error's message (or a variable holding it) with includes,
// startsWith, a regex...; comparing it with a literal; or a decision on the errnos src/errors.ts translates.
const TEXT_DECISIONS: RegExp[] = [
  /\.message\)?\s*\.(includes|startsWith|endsWith|match|matchAll|search|indexOf)\(/,
  /\.test\([^)]*(\.message\b|\bmessage\b|\bmsg\b|errorText\()/,
  /\b(message|msg)\s*[!=]==?\s*['"`]/,
  /\bmsg\.(includes|startsWith|endsWith|match)\(/,
  /errorText\([^)]*\)\s*\.(includes|startsWith|endsWith|match)\(/,
];
// Decisions the reconciler and the CLI take go through errorCode()/fromDataPlane(), never an errno or a library's
// error name read on their own (the kernel feature fallbacks of src/bpf/ read errnos at the syscall they wrap).
const AD_HOC_CODES = /\bcode\s*[!=]==?\s*'(EINVAL|ENOSPC|ETIMEDOUT|ESTOPPED|NotFoundError)'|code:\s*'(EINVAL|ENOSPC|ETIMEDOUT|ESTOPPED)'/;
const AD_HOC_SCOPE = /^src\/(reconciler|cli)\//;
// Translation points at a foreign library's boundary and text that is not an error's: named, each with why.
const ALLOWED: Record<string, string> = {
  'src/reconciler/revert/rollback.ts': 'matches commit messages (Revert "..."), not error text',
  'src/bpf/errors.ts': "names a native error's map once (formatting), decides nothing",
  'src/reconciler/source/git-objects.ts': "translates isomorphic-git's NotFoundError into GitObjectMissing",
  'src/reconciler/source/git-remote.ts': "translates isomorphic-git's NotFoundError (a branch the server lacks) at the Git boundary",
  'src/reconciler/verify/openpgp-verify.ts': 'labels an openpgp.js failure (which has no error codes) for the verdict; every label refuses the commit',
};

function stripComment(line: string): string {
  const i = line.search(/(^|\s)\/\/|^\s*\*/);
  return i < 0 ? line : line.slice(0, i);
}

test('no decision in src/ is taken on message text or on an ad-hoc code (a grep of the sources)', (t) => {
  const found: string[] = [];
  const allowedSeen = new Set<string>();
  for (const file of sources()) {
    const rel = relative(ROOT, file).split('\\').join('/');
    const lines = readFileSync(file, 'utf8').split('\n');
    lines.forEach((raw, i) => {
      const line = stripComment(raw);
      const hit = TEXT_DECISIONS.some((re) => re.test(line)) || (AD_HOC_SCOPE.test(rel) && AD_HOC_CODES.test(line));
      if (!hit) return;
      if (ALLOWED[rel]) allowedSeen.add(rel);
      else found.push(`${rel}:${i + 1}: ${raw.trim()}`);
    });
  }
  t.deepEqual(found, [], found.join('\n'));
  // the allow list names only files that still need it (a stale entry would hide a new decision there)
  t.deepEqual([...allowedSeen].sort(), Object.keys(ALLOWED).sort());
});

test('the grep sees what it must refuse, and lets ordinary code through', (t) => {
  const flags = (line: string) => TEXT_DECISIONS.some((re) => re.test(line)) || AD_HOC_CODES.test(line);
  for (const bad of [
    "if ((err as Error).message.includes('not found')) return null;",
    'if (/revoked/i.test(message)) return x;',
    "permanent: code === 'EINVAL' || code === 'ENOSPC'",
    "if (msg.startsWith('--metrics')) throw e;",
    "if ((err as { code?: string }).code === 'NotFoundError') return null;",
    "throw Object.assign(new Error(m), { code: 'ENOSPC' });",
    "if (errorText(err).includes('timed out')) retry();",
    "if (message === 'stopping') return;",
  ]) t.true(flags(bad), bad);
  for (const fine of [
    "if (errorCode(err) === 'GitObjectMissing') return null;",
    "log.warn(`fetch failed: ${(err as Error).message}`);",
    "const e = fromDataPlane(err); if (reactionTo(e.code).retry) later();",
    "if (/^[0-9a-f]{40}$/.test(text)) return text;",
  ]) t.false(flags(fine), fine);
});

test('docs/reconciler.md lists every code with its class, once', (t) => {
  const doc = readFileSync(join(ROOT, 'docs/reconciler.md'), 'utf8');
  const rows = [...doc.matchAll(/^\| `(\w+)` \| (\w+) \|/gm)].map((m) => [m[1]!, m[2]!] as const).filter(([c]) => isErrorCode(c) || /^[A-Z]/.test(c));
  const documented = rows.filter(([c]) => isErrorCode(c));
  t.deepEqual(documented.map(([c]) => c).sort(), [...CODES].sort(), 'every code documented, none unknown');
  for (const [code, cls] of documented) t.is(cls, classOf(code as ErrorCode), code);
});
