// The HTTP remote's deadline is --git-timeout, also on a reused keep-alive connection: Node gives a parked socket
// the server's `Keep-Alive: timeout=5` hint minus 1 s as its idle timeout and kept it for the next request, so a
// Git server slower than 4 s on a reused connection failed with "Request timed out" whatever the deadline was.
// The server is git's own http-backend behind a proxy that holds chosen ref advertisements.
import test from 'ava';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { openRemote } from '../../src/reconciler/source/git-remote.js';
import { slowProxy } from '../helpers/slow-git-proxy.js';
import { commitFiles, configFiles, git, servedRepo, tempDir } from '../reconcile-helpers.js';

test('a slow answer (5 s) on a reused keep-alive connection waits for the deadline (60 s), not the server\'s keep-alive hint', async (t) => {
  const r = await servedRepo();
  const proxy = await slowProxy(r.server.url);
  const cache = await tempDir('keepalive');
  try {
    const first = await commitFiles(r.work, configFiles(['lb-1'], ['198.51.100.2']), 'config');
    await git(r.work, 'push', '-q', 'origin', 'main');
    const remote = openRemote(`${proxy.url}/config.git`, { cacheDir: join(cache, 'git'), timeoutMs: 60_000 });
    t.is(await remote.fetch('main'), first);
    // At once (the parked connection lives 4 s): the next fetch's advertisement is held 5 s.
    proxy.hold(() => true, 5000);
    t.is(await remote.fetch('main'), first);
    t.true(proxy.lastAdvertReused, 'the held advertisement came on a connection of the first fetch');
  } finally {
    await proxy.close();
    await r.cleanup();
    rmSync(cache, { recursive: true, force: true });
  }
});
