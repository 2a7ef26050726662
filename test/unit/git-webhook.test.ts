// Triggers: webhook authentication and filtering, coalescing of triggers, poll schedules.
import test from 'ava';
import { request } from 'node:http';
import { startWebhook, githubSignature, parseListen, safeEqual } from '../../src/reconciler/triggers/webhook.js';
import { SerialRunner } from '../../src/reconciler/triggers/serial-runner.js';
import { startSchedule, intervalMs, validateSchedule } from '../../src/reconciler/triggers/schedule.js';

function post(url: string, body: Buffer | string, headers: Record<string, string>): Promise<{ status: number; text: string }> {
  return new Promise((ok, fail) => {
    const data = Buffer.from(body);
    const req = request(url, { method: 'POST', headers: { 'content-type': 'application/json', 'content-length': String(data.length), ...headers } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => ok({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString() }));
    });
    req.on('error', (err: NodeJS.ErrnoException) => (err.code === 'ECONNRESET' || err.code === 'EPIPE' ? ok({ status: 413, text: 'reset' }) : fail(err)));
    req.end(data);
  });
}

const SECRET = 'webhook-test-secret';

test('webhook: GitHub and GitLab deliveries trigger; bad signatures, other branches and big bodies do not', async (t) => {
  const triggers: string[] = [];
  const hook = await startWebhook({ host: '127.0.0.1', port: 0, secret: SECRET, branch: 'main', onTrigger: (s) => triggers.push(s), maxBodyBytes: 4096 });
  try {
    const body = JSON.stringify({ ref: 'refs/heads/main', after: 'abc' });
    const good = await post(hook.url, body, { 'x-hub-signature-256': githubSignature(SECRET, Buffer.from(body)) });
    t.is(good.status, 202);
    t.deepEqual(triggers, ['webhook (github)']);

    const bad = await post(hook.url, body, { 'x-hub-signature-256': githubSignature('wrong', Buffer.from(body)) });
    t.is(bad.status, 401);
    const tampered = await post(hook.url, body.replace('abc', 'abd'), { 'x-hub-signature-256': githubSignature(SECRET, Buffer.from(body)) });
    t.is(tampered.status, 401);
    const unsigned = await post(hook.url, body, {});
    t.is(unsigned.status, 401);
    t.is(triggers.length, 1, 'refused deliveries trigger nothing');

    const gitlab = await post(hook.url, body, { 'x-gitlab-token': SECRET });
    t.is(gitlab.status, 202);
    const gitlabBad = await post(hook.url, body, { 'x-gitlab-token': SECRET + 'x' });
    t.is(gitlabBad.status, 401);
    t.deepEqual(triggers, ['webhook (github)', 'webhook (gitlab)']);

    // The status branch never triggers a config reconcile.
    const statusPush = JSON.stringify({ ref: 'refs/heads/gitlb-status' });
    const ignored = await post(hook.url, statusPush, { 'x-hub-signature-256': githubSignature(SECRET, Buffer.from(statusPush)) });
    t.is(ignored.status, 202);
    t.regex(ignored.text, /ignored/);
    t.is(triggers.length, 2);

    const big = Buffer.alloc(8192, 0x61);
    const tooBig = await post(hook.url, big, { 'x-hub-signature-256': githubSignature(SECRET, big) });
    t.is(tooBig.status, 413);
    t.is(triggers.length, 2);
    t.deepEqual(hook.stats, { accepted: 2, rejected: 5, ignored: 1 });
  } finally {
    await hook.close();
  }
});

test('safeEqual and listen parsing', (t) => {
  t.true(safeEqual('abc', 'abc'));
  t.false(safeEqual('abc', 'abd'));
  t.false(safeEqual('abc', 'abcd'));
  t.deepEqual(parseListen('127.0.0.1:9000'), { host: '127.0.0.1', port: 9000 });
  t.deepEqual(parseListen('[::1]:80'), { host: '::1', port: 80 });
  t.throws(() => parseListen('9000'));
});

test('triggers arriving during a run coalesce into one follow-up run', async (t) => {
  const runs: string[] = [];
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const runner = new SerialRunner({
    reconcile: async (why) => {
      runs.push(why);
      if (runs.length === 1) await gate;
    },
    drift: async () => {
      runs.push('drift');
    },
  });
  runner.trigger('reconcile', 'first');
  for (let i = 0; i < 20; i++) runner.trigger('reconcile', `burst ${i}`);
  runner.trigger('drift', 'd');
  release();
  await runner.idle();
  t.is(runs.length, 3);
  t.is(runs[0], 'first');
  t.true(runs[1]!.startsWith('burst 0, burst 1'), 'one follow-up reconcile for the whole burst');
  t.is(runs[2], 'drift', 'drift after the reconcile');
  t.is(runner.stats.coalesced, 19);
});

test('poll schedules: seconds and cron with seconds, jittered', async (t) => {
  t.is(intervalMs('30'), 30_000);
  t.is(intervalMs('2m'), 120_000);
  t.is(intervalMs('*/30 * * * * *'), null);
  t.notThrows(() => validateSchedule('*/30 * * * * *'));
  t.throws(() => validateSchedule('every now and then'));
  let ticks = 0;
  const s = startSchedule({ spec: '0.2', onTick: () => ticks++, jitterShare: 0.5 });
  let cronTicks = 0;
  const c = startSchedule({ spec: '* * * * * *', onTick: () => cronTicks++, jitterShare: 0.1 });
  await new Promise((r) => setTimeout(r, 2300));
  s.stop();
  c.stop();
  t.true(ticks >= 6 && ticks <= 12, `interval ticks ${ticks}`);
  t.true(cronTicks >= 1 && cronTicks <= 3, `cron ticks ${cronTicks}`);
});

test('webhook: only push events for the config branch trigger; other events 202 with the reason, malformed bodies 400', async (t) => {
  const triggers: string[] = [];
  const hook = await startWebhook({ host: '127.0.0.1', port: 0, secret: SECRET, branch: 'main', onTrigger: (s) => triggers.push(s) });
  const github = (body: string, event?: string) =>
    post(hook.url, body, { 'x-hub-signature-256': githubSignature(SECRET, Buffer.from(body)), ...(event ? { 'x-github-event': event } : {}) });
  try {
    const push = JSON.stringify({ ref: 'refs/heads/main', after: 'abc' });
    const ping = await github(JSON.stringify({ zen: 'Keep it logically awesome.', hook_id: 1 }), 'ping');
    t.deepEqual([ping.status, ping.text.trim()], [202, "ignored: event 'ping' (only pushes trigger)"]);
    const issues = await github(JSON.stringify({ action: 'opened', ref: 'refs/heads/main' }), 'issues');
    t.deepEqual([issues.status, issues.text.trim()], [202, "ignored: event 'issues' (only pushes trigger)"]);
    const notJson = await github('payload=%7B%7D', 'push');
    t.deepEqual([notJson.status, notJson.text.trim()], [400, 'malformed body: not JSON']);
    const notObject = await github('[1,2]', 'push');
    t.is(notObject.status, 400);
    const tag = await github(JSON.stringify({ ref: 'refs/tags/v1' }), 'push');
    t.deepEqual([tag.status, tag.text.trim()], [202, 'ignored: push of refs/tags/v1, not a branch']);
    const other = await github(JSON.stringify({ ref: 'refs/heads/feature' }), 'push');
    t.deepEqual([other.status, other.text.trim()], [202, 'ignored: push to feature, not main']);
    const noRef = await github(JSON.stringify({ zen: 'x' }));
    t.deepEqual([noRef.status, noRef.text.trim()], [202, 'ignored: not a push (no ref)']);
    t.deepEqual(triggers, [], 'nothing but a push to main triggers');

    t.is((await github(push, 'push')).status, 202);
    const gitlabIssue = await post(hook.url, push, { 'x-gitlab-token': SECRET, 'x-gitlab-event': 'Issue Hook' });
    t.deepEqual([gitlabIssue.status, gitlabIssue.text.trim()], [202, "ignored: event 'Issue Hook' (only pushes trigger)"]);
    t.is((await post(hook.url, push, { 'x-gitlab-token': SECRET, 'x-gitlab-event': 'Push Hook' })).status, 202);
    t.deepEqual(triggers, ['webhook (github)', 'webhook (gitlab)']);
    t.deepEqual(hook.stats, { accepted: 2, rejected: 2, ignored: 6 });
  } finally {
    await hook.close();
  }
});

test('webhook: rejected deliveries are logged at a bounded rate, a summary line with the counts for the rest', async (t) => {
  const lines: string[] = [];
  const triggers: string[] = [];
  const hook = await startWebhook({ host: '127.0.0.1', port: 0, secret: SECRET, branch: 'main', onTrigger: (s) => triggers.push(s), log: { warn: (m) => lines.push(m) } });
  const body = JSON.stringify({ ref: 'refs/heads/main' });
  try {
    // Benign first: one misconfigured sender is told at once, with the reason.
    t.is((await post(hook.url, body, { 'x-hub-signature-256': 'sha256=00' })).status, 401);
    t.deepEqual(lines, ['webhook rejected from 127.0.0.1: bad X-Hub-Signature-256']);
    // The attack: 200 forged deliveries, 50 at a time (few enough to fit the 10 s window on a loaded machine).
    for (let i = 0; i < 4; i++) {
      await Promise.all(Array.from({ length: 50 }, (_, j) => post(hook.url, body, j % 2 ? { 'x-gitlab-token': 'forged' } : {})));
    }
    t.is(lines.length, 5, 'the first five of the window one by one, the rest counted');
    // A good delivery is not held up by the counting.
    t.is((await post(hook.url, body, { 'x-hub-signature-256': githubSignature(SECRET, Buffer.from(body)) })).status, 202);
    t.deepEqual(triggers, ['webhook (github)']);
  } finally {
    await hook.close(); // flushes the summary (else written when the 10 s window ends)
  }
  t.is(lines.length, 6);
  t.is(lines[5], 'webhook rejected: 196 more in the last 10 s, not shown one by one (98 bad X-Gitlab-Token; 98 no X-Hub-Signature-256 or X-Gitlab-Token header) from 1 address');
  t.is(hook.stats.rejected, 201);
});
