// `gitlb capture`'s command line: bad filters are usage errors naming the option and what is wrong (exit 2, before
// anything touches the kernel), `gitlb monitor` is the same command, and the help names every filter.
import test from 'ava';
import { gitlbInProcess as inProcess } from '../helpers/cli-repo.js';

test.serial('bad filters exit 2 naming the option; monitor is an alias of capture', async (t) => {
  const cases: Array<[string[], RegExp]> = [
    [['--vip', 'example.com'], /--vip 'example\.com': 'example\.com' is not an IPv4 or IPv6 address/],
    [['--vip', '203.0.113.10:70000'], /the port must be 1\.\.65535/],
    [['--client', '192.0.2.0/24:80'], /a client is an address or prefix, without a port/],
    [['--client', '192.0.2.0/40'], /prefix length must be 0\.\.32/],
    [['--reason', 'drop_everything'], /--reason 'drop_everything': not a counter/],
    [['--action', 'REJECT'], /--action 'REJECT': not one of ABORTED, DROP, PASS, TX, REDIRECT/],
    [['--sample', '0'], /'0' is not an integer between 1 and/],
    [['--rate', '-5'], /'-5' is not an integer between 0 and/],
    [['--format', 'json'], /'json' is not pcapng or pcap/],
  ];
  for (const [args, message] of cases) {
    const r = await inProcess(['capture', '--pin-root', '/nonexistent', ...args]);
    t.is(r.code, 2, args.join(' '));
    t.regex(r.stderr, message, args.join(' '));
  }
  const alias = await inProcess(['monitor', '--vip', 'example.com']);
  t.is(alias.code, 2);
  t.regex(alias.stderr, /--vip 'example\.com'/);
  const help = await inProcess(['monitor', '--help']);
  t.is(help.code, 0);
  t.regex(help.stdout, /^Usage: gitlb capture\|monitor /);
  for (const o of ['--vip', '--client', '--real', '--reason', '--action', '--sample', '--rate', '--burst', '--write', '--format']) t.regex(help.stdout, new RegExp(o));
});

test.serial('good filters get as far as the data plane: none pinned here is a runtime failure (exit 1), not a usage error', async (t) => {
  const r = await inProcess(['capture', '--pin-root', '/nonexistent-gitlb-pins', '--vip', '[2001:db8::10]:443/tcp', '--client', '192.0.2.0/24',
    '--reason', 'drop_no_real,snat_drop_table_full', '--action', 'drop', '--sample', '10', '--rate', '50', '--burst', '5']);
  t.is(r.code, 1, r.stderr);
  t.regex(r.stderr, /no lb data plane pinned under \/nonexistent-gitlb-pins/);
});
