// Status write-back over real git http-backend: ten concurrent writers lose nothing; schema; history.
import test from 'ava';
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { HttpRemote, LocalRemote } from '../../src/reconciler/source/git-remote.js';
import { StatusWriter } from '../../src/reconciler/status/status-writer.js';
import { parseStatus, type NodeStatus } from '../../src/reconciler/status/status-doc.js';
import { readAllStatuses, readHistory, lbDigestsAgree } from '../../src/reconciler/status/status-report.js';
import { git, servedRepo, commitFiles, tempDir, nodeStatus } from '../reconcile-helpers.js';

const sampleStatus = (node: string, applied: string | null, digest = 'a'.repeat(64)): NodeStatus => nodeStatus(node, applied, { digest });

const schema = JSON.parse(readFileSync(new URL('../../schemas/status.schema.json', import.meta.url), 'utf8'));
const ajv = new Ajv2020({ allErrors: true });
(addFormats as unknown as (a: Ajv2020) => void)(ajv);
const validate = ajv.compile(schema);

test('ten nodes writing status at once over HTTP lose nothing', async (t) => {
  const repo = await servedRepo();
  const caches: string[] = [];
  try {
    const rev = await commitFiles(repo.work, { 'a.yaml': 'x: 1\n' }, 'config');
    await git(repo.work, 'push', '-q', 'origin', 'main');
    const writers = await Promise.all(
      Array.from({ length: 10 }, async (_, i) => {
        const cache = await tempDir(`cache${i}`);
        caches.push(cache);
        // ten writers racing one git http-backend on a 2-core machine: a fetch may take longer than the daemon's 10 s
        return new StatusWriter({ remote: new HttpRemote(repo.url, cache, undefined, 60_000), branch: 'gitlb-status', node: `lb-${i}` });
      }),
    );
    const results = await Promise.all(writers.map((w, i) => w.write(sampleStatus(`lb-${i}`, rev), 'test')));
    t.true(results.some((r) => r.attempts > 1), 'the writers really raced');
    // Every file is on the branch, as the git CLI sees it.
    await git(repo.work, 'fetch', '-q', 'origin', 'gitlb-status');
    const files = (await git(repo.work, 'ls-tree', '--name-only', 'FETCH_HEAD', 'status/')).split('\n').sort();
    t.deepEqual(files, Array.from({ length: 10 }, (_, i) => `status/lb-${i}.yaml`).sort());
    t.is(Number(await git(repo.work, 'rev-list', '--count', 'FETCH_HEAD')), 10, 'one commit per write');
    const authors = (await git(repo.work, 'log', '--format=%an', 'FETCH_HEAD')).split('\n').sort();
    t.deepEqual(authors, Array.from({ length: 10 }, (_, i) => `lb-${i}`).sort());
    for (let i = 0; i < 10; i++) {
      const s = parseStatus(await git(repo.work, 'show', `FETCH_HEAD:status/lb-${i}.yaml`));
      t.true(validate(s), JSON.stringify(validate.errors));
      t.is(s.appliedRevision, rev);
    }
    // The config branch is untouched by status writes.
    t.is(await git(repo.work, 'ls-remote', 'origin', 'refs/heads/main'), `${rev}\trefs/heads/main`);
    // Read back through the report helpers.
    const statuses = await readAllStatuses(new HttpRemote(repo.url, caches[0]!), 'gitlb-status');
    t.is(statuses.length, 10);
    t.true(lbDigestsAgree(statuses));
  } finally {
    await repo.cleanup();
    for (const c of caches) rmSync(c, { recursive: true, force: true });
  }
});

test('history lists each node\'s applied revisions in order; digests that differ at one revision are flagged', async (t) => {
  const repo = await servedRepo();
  const cache = await tempDir('hist');
  try {
    const r1 = await commitFiles(repo.work, { 'a.yaml': 'x: 1\n' }, 'one');
    const r2 = await commitFiles(repo.work, { 'a.yaml': 'x: 2\n' }, 'two');
    await git(repo.work, 'push', '-q', 'origin', 'main');
    const remote = new HttpRemote(repo.url, cache);
    const w1 = new StatusWriter({ remote, branch: 'gitlb-status', node: 'lb-1' });
    const w2 = new StatusWriter({ remote, branch: 'gitlb-status', node: 'lb-2' });
    await w1.write(sampleStatus('lb-1', r1), 't');
    await w2.write(sampleStatus('lb-2', r1), 't');
    await w1.write(sampleStatus('lb-1', r1), 't'); // same revision again: not a new history entry
    await w1.write(sampleStatus('lb-1', r2, 'b'.repeat(64)), 't');
    const cache2 = await tempDir('hist2');
    const h = await readHistory(new HttpRemote(repo.url, cache2), 'gitlb-status').finally(() => rmSync(cache2, { recursive: true, force: true }));
    t.deepEqual(
      h.map((e) => [e.node, e.revision]),
      [['lb-1', r1], ['lb-2', r1], ['lb-1', r2]],
    );
    // lb-1 serves r2 with another digest, lb-2 still r1: a rolling change, not a disagreement (digests are
    // compared at the same revision); lb-2 at r2 with a third digest is one.
    t.true(lbDigestsAgree(await readAllStatuses(remote, 'gitlb-status')), 'different revisions are not compared');
    await w2.write(sampleStatus('lb-2', r2, 'c'.repeat(64)), 't');
    t.false(lbDigestsAgree(await readAllStatuses(remote, 'gitlb-status')), 'lb-1 and lb-2 serve r2 with different digests');
  } finally {
    await repo.cleanup();
    rmSync(cache, { recursive: true, force: true });
  }
});

test('local repository: status branch written with git\'s lock protocol, visible to the git CLI', async (t) => {
  const dir = await tempDir('local');
  try {
    await git(dir, 'init', '-q', '-b', 'main');
    const rev = await commitFiles(dir, { 'a.yaml': 'x: 1\n' }, 'config');
    const remote = new LocalRemote(dir);
    const writers = Array.from({ length: 4 }, (_, i) => new StatusWriter({ remote, branch: 'gitlb-status', node: `n${i}` }));
    await Promise.all(writers.map((w, i) => w.write(sampleStatus(`n${i}`, rev), 't')));
    const files = (await git(dir, 'ls-tree', '--name-only', 'gitlb-status', 'status/')).split('\n');
    t.is(files.length, 4);
    t.is(await git(dir, 'rev-parse', 'main'), rev, 'config branch untouched');
    t.is(await git(dir, 'status', '--porcelain'), '', 'working tree untouched');
    t.truthy(join(dir));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// A status commit's subject says "applied" only for the write that records that apply: a later write (heartbeat,
// health flip, fetch failure, stop) of a status whose lastAttempt the branch already holds says what it records.
test('status commit subjects say applied only when the write records an apply', async (t) => {
  const repo = await servedRepo();
  const cache = await tempDir('subjects');
  try {
    const r1 = await commitFiles(repo.work, { 'a.yaml': 'x: 1\n' }, 'one');
    await git(repo.work, 'push', '-q', 'origin', 'main');
    const w = new StatusWriter({ remote: new HttpRemote(repo.url, cache), branch: 'gitlb-status', node: 'lb-1' });
    const applied = sampleStatus('lb-1', r1);
    const subject = async () => {
      await git(repo.work, 'fetch', '-q', 'origin', 'gitlb-status');
      return git(repo.work, 'log', '-1', '--format=%s', 'FETCH_HEAD');
    };
    await w.write(applied, 'webhook');
    t.is(await subject(), `status(lb-1): applied ${r1.slice(0, 12)}`);
    await w.write({ ...applied, updatedAt: new Date(Date.now() + 1000).toISOString() }, 'heartbeat');
    t.is(await subject(), `status(lb-1): heartbeat, serving ${r1.slice(0, 12)}`);
    // Stopped on SIGTERM after a fetch outage: the outage and Ready=False/Stopped are in the file, which the schema takes.
    const stopped: NodeStatus = {
      ...applied,
      updatedAt: new Date(Date.now() + 2000).toISOString(),
      fetchOutage: { since: new Date(Date.now() - 60_000).toISOString(), until: new Date().toISOString(), attempts: 7, reason: 'connect ECONNREFUSED' },
      conditions: [{ type: 'Ready', status: 'False', reason: 'Stopped', message: 'gitlb run stopped (stopping on SIGTERM)', lastTransitionTime: new Date().toISOString() }],
    };
    await w.write(stopped, 'stopping on SIGTERM');
    t.is(await subject(), `status(lb-1): stopping on SIGTERM, serving ${r1.slice(0, 12)}`);
    t.true(validate(parseStatus(await git(repo.work, 'show', 'FETCH_HEAD:status/lb-1.yaml'))), JSON.stringify(validate.errors));
    // A new attempt is announced again.
    const failedAt = { revision: r1, result: 'failed' as const, stage: 'apply' as const, reason: 'E2BIG', at: new Date(Date.now() + 3000).toISOString() };
    await w.write({ ...stopped, lastAttempt: failedAt, lastFailure: failedAt }, 'retry');
    t.is(await subject(), `status(lb-1): failed ${r1.slice(0, 12)} at apply`);
  } finally {
    await repo.cleanup();
    rmSync(cache, { recursive: true, force: true });
  }
});
