// `gitlb top` under `ip netns exec`: that remounts /sys, so /sys/fs/bpf is an empty directory of a fresh sysfs and
// the host's pins are not visible. top must say so (the text `gitlb run` and `gitlb doctor` use, with the shell
// commands to fix it), not "no lb data plane pinned". A namespace this test creates; nothing is pinned or attached.
import test from 'ava';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { createNetns, deleteNetns, nsName } from '../../src/lab/netns.js';

const run = promisify(execFile);
const MAIN = join(import.meta.dirname, '..', '..', 'src', 'cli', 'main.ts');

test('gitlb top under ip netns exec explains the remounted /sys instead of "nothing pinned"', async (t) => {
  const ns = nsName('top');
  await createNetns(ns);
  try {
    const r = await run('ip', ['netns', 'exec', ns, process.execPath, '--import', 'tsx', MAIN, 'top', '--once', '--metrics', 'off'], { timeout: 300_000 }).then(
      () => ({ code: 0, stderr: '' }),
      (e: { code?: number; stderr?: string }) => ({ code: e.code, stderr: e.stderr ?? '' }),
    );
    t.is(r.code, 1, r.stderr);
    t.regex(r.stderr, /\/sys\/fs\/bpf is not the host's bpffs in this mount namespace \(ip netns exec remounts \/sys\)/);
    t.regex(r.stderr, /nsenter --net=\/run\/netns\/NS/);
    t.regex(r.stderr, /mkdir -p \/run\/gitlb\/bpffs && mount -t bpf bpf \/run\/gitlb\/bpffs`, then --pin-root \/run\/gitlb\/bpffs\/gitlb/);
    t.notRegex(r.stderr, /no lb data plane pinned|mountBpffs/);
  } finally {
    await deleteNetns(ns);
  }
});
