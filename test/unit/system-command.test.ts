// nsArgv's command resolution (src/lab/netns.ts): under npx or an npm script node_modules/.bin comes first on PATH,
// and ava's dependency @vercel/nft installs a file tracer there as `nft` that exits 0 whatever it is given; a
// firewall rule a test believed installed was not (the rejoin test's peer block, found that way).
import test from 'ava';
import { existsSync } from 'node:fs';
import { nsArgv, systemCommand } from '../../src/lab/netns.js';

test('nft is the system\'s, never the tracer in node_modules/.bin, whatever PATH says', (t) => {
  const nft = systemCommand('nft');
  t.false(nft.includes('node_modules'), nft);
  if (existsSync('/usr/sbin/nft') || existsSync('/sbin/nft')) t.regex(nft, /^\/(usr\/)?s?bin\/nft$/);
  t.deepEqual(nsArgv('glb1-lb1', ['nft', 'list', 'ruleset']), ['nsenter', '--net=/run/netns/glb1-lb1', '--', nft, 'list', 'ruleset']);
});

test('benign: other commands keep their bare names (PATH decides as before)', (t) => {
  t.is(systemCommand('ip'), 'ip');
  t.deepEqual(nsArgv('glb1-lb1', ['ip', '-j', 'link'], { sysfs: true }), ['ip', 'netns', 'exec', 'glb1-lb1', 'ip', '-j', 'link']);
});
