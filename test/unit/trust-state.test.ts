// The node's trust state, without Git: the local state file (atomic, strict about what it accepts) and the policy
// rules (which policy is in force, what counts as lowering it). The Git side is test/integration/trust-state.test.ts.
import test from 'ava';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readLocalState, readOwnLocalState, writeLocalState } from '../../src/reconciler/state/local-state.js';
import { policyFor, policyLowering } from '../../src/reconciler/verify/revision-check.js';
import type { VerificationPolicy } from '../../src/reconciler/verify/verify-range.js';

const dir = mkdtempSync(join(tmpdir(), 'gitlb-trust-state-'));
test.after.always(() => rmSync(dir, { recursive: true, force: true }));

const REV = 'a'.repeat(40);
const ENFORCE: VerificationPolicy = { mode: 'enforce', formats: ['ssh', 'openpgp'], signersFile: 'trust/allowed_signers' };

test('local state: written atomically (no temporary file left), read back; another node or branch is not this one', async (t) => {
  const file = join(dir, 'state.json');
  await writeLocalState(file, { node: 'lb-1', branch: 'main', appliedRevision: REV, verification: ENFORCE });
  t.deepEqual(readdirSync(dir).filter((f) => f.startsWith('state.json')), ['state.json']);
  t.deepEqual(await readLocalState(file), { node: 'lb-1', branch: 'main', appliedRevision: REV, verification: ENFORCE });
  t.truthy(await readOwnLocalState(file, 'lb-1', 'main'));
  t.is(await readOwnLocalState(file, 'lb-2', 'main'), null);
  t.is(await readOwnLocalState(file, 'lb-1', 'other'), null);
  // A file from before the policy was recorded still names its revision.
  writeFileSync(file, JSON.stringify({ node: 'lb-1', branch: 'main', appliedRevision: REV }));
  t.like(await readLocalState(file), { appliedRevision: REV, verification: undefined });
});

test('local state: anything this daemon did not write counts as no state (never a guess)', async (t) => {
  const file = join(dir, 'bad.json');
  t.is(await readLocalState(join(dir, 'missing.json')), null);
  for (const text of [
    '{not json',
    'null',
    JSON.stringify({ node: 'lb-1', branch: 'main', appliedRevision: 'HEAD' }),
    JSON.stringify({ node: 'lb-1', branch: 'main', appliedRevision: REV.slice(0, 12) }),
    JSON.stringify({ node: 'lb-1', appliedRevision: REV }),
    JSON.stringify({ node: 'lb-1', branch: 'main', appliedRevision: REV, verification: { mode: 'lenient', formats: [], signersFile: null } }),
    JSON.stringify({ node: 'lb-1', branch: 'main', appliedRevision: REV, verification: { mode: 'off', formats: ['x509'], signersFile: null } }),
    JSON.stringify({ node: 'lb-1', branch: 'main', appliedRevision: REV, pad: 'x'.repeat(70_000) }),
  ]) {
    writeFileSync(file, text);
    t.is(await readLocalState(file), null, text.slice(0, 80));
  }
  writeFileSync(file, JSON.stringify({ node: 'lb-1', branch: 'main', appliedRevision: null }));
  t.like(await readLocalState(file), { appliedRevision: null });
});

test('policy in force: the recorded one; without one, enforce with a --trust root, else off', (t) => {
  t.deepEqual(policyFor({ mode: 'warn', formats: ['ssh'], signersFile: 'keys' }, true), { mode: 'warn', formats: ['ssh'], signersFile: 'keys' });
  t.deepEqual(policyFor(null, true), ENFORCE);
  t.is(policyFor(null, false).mode, 'off');
  t.is(policyFor(undefined, true).mode, 'enforce');
});

test('policy lowering: a lower mode, an added format or another signers list; a stricter or equal policy is not', (t) => {
  t.is(policyLowering(ENFORCE, ENFORCE), null);
  t.is(policyLowering(ENFORCE, { ...ENFORCE, mode: 'warn' }), 'mode enforce -> warn');
  t.is(policyLowering({ ...ENFORCE, mode: 'warn' }, { ...ENFORCE, mode: 'off' }), 'mode warn -> off');
  t.is(policyLowering({ ...ENFORCE, mode: 'warn' }, ENFORCE), null, 'raising is not lowering');
  t.is(policyLowering({ ...ENFORCE, formats: ['ssh'] }, ENFORCE), 'formats [ssh] -> [ssh, openpgp]');
  t.is(policyLowering(ENFORCE, { ...ENFORCE, formats: ['ssh'] }), null, 'fewer formats is stricter');
  t.is(policyLowering(ENFORCE, { ...ENFORCE, signersFile: 'other/list' }), 'signersFile trust/allowed_signers -> other/list');
});
