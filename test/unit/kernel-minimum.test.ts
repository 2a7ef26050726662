// The kernel a node needs (src/reconciler/doctor/kernel-minimum.ts, `gitlb doctor`'s kernel line): the release
// comparison, the verdict per role, and the table kept equal to docs/deploy.md and to what the BPF sources use.
import test from 'ava';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { KERNEL_FEATURES, atLeast, judgeKernel, minimumKernel, parseKernelRelease, versionText } from '../../src/reconciler/doctor/kernel-minimum.js';

test('release texts: major and minor, distribution suffixes ignored; unreadable ones are null', (t) => {
  t.deepEqual(parseKernelRelease('6.1.0-18-amd64'), [6, 1]);
  t.deepEqual(parseKernelRelease('5.15.0-91-generic'), [5, 15]);
  t.deepEqual(parseKernelRelease('5.14.0-362.8.1.el9_3.x86_64'), [5, 14]);
  t.deepEqual(parseKernelRelease('6.18'), [6, 18]);
  t.is(parseKernelRelease('linux'), null);
  t.is(parseKernelRelease(''), null);
});

test('version comparison: numeric, not textual (5.9 < 5.10 < 5.11, 5.19 < 6.0)', (t) => {
  t.true(atLeast([5, 10], [5, 9]));
  t.false(atLeast([5, 9], [5, 10]));
  t.true(atLeast([5, 11], [5, 11]));
  t.false(atLeast([5, 10], [5, 11]));
  t.true(atLeast([6, 0], [5, 19]));
  t.false(atLeast([4, 20], [5, 2]));
});

test('minimum per role: lb nodes 5.11, backend nodes 5.8 (CAP_BPF, CAP_PERFMON), both (role unknown) 5.11', (t) => {
  t.is(versionText(minimumKernel(['lb'])), '5.11');
  t.is(versionText(minimumKernel(['backend'])), '5.8');
  t.is(versionText(minimumKernel(['lb', 'backend'])), '5.11');
});

test('an lb node below 5.11 fails, naming each missing feature and what optional paths lack too', (t) => {
  const v = judgeKernel('5.10.0-28-amd64', 'lb');
  t.is(v.level, 'fail');
  t.regex(v.detail, /lb nodes need 5\.11 or newer; missing: bpf_ktime_get_coarse_ns \(5\.11\)/);
  t.regex(v.detail, /also missing for optional paths: .*lookup_and_delete.*snat listeners/);
  t.notRegex(v.detail, /tcx/, 'tcx has a fallback: never named as missing');
  t.is(judgeKernel('5.8.0', 'lb').level, 'fail');
  t.regex(judgeKernel('5.8.0', 'lb').detail, /XDP through BPF links \(BPF_LINK_CREATE\) \(5\.9\).*BPF_F_INNER_MAP.*\(5\.10\)/);
});

test('a backend node below 5.8 fails: the doctor needs CAP_BPF and CAP_PERFMON, which older kernels lack', (t) => {
  const v = judgeKernel('5.4.0-150-generic', 'backend');
  t.is(v.level, 'fail');
  t.regex(v.detail, /backend nodes need 5\.8 or newer; missing: CAP_BPF and CAP_PERFMON \(capabilities\) \(5\.8\)/);
  t.notRegex(v.detail, /RINGBUF|BPF_LINK_CREATE/, 'lb-only features are not named for a backend node');
});

test('benign: a kernel the node runs on passes; optional paths it lacks are a warning naming the path, never a failure', (t) => {
  t.is(judgeKernel('6.18.0', 'lb').level, 'ok');
  t.is(judgeKernel('6.18.0').level, 'ok');
  const deb12 = judgeKernel('6.1.0-18-amd64', 'lb');
  t.is(deb12.level, 'warn');
  t.regex(deb12.detail, /runs; missing for optional paths only: BPF_FIB_LOOKUP_SRC \(6\.7: dsr-ipip and dsr-gue reals/);
  const ubuntu = judgeKernel('5.15.0-91-generic', 'lb');
  t.is(ubuntu.level, 'warn');
  t.regex(ubuntu.detail, /bpf_xdp_load_bytes \(5\.18: gitlb capture/);
  t.notRegex(ubuntu.detail, /lookup_and_delete/, '5.15 has lookup-and-delete on hash maps');
  t.is(judgeKernel('5.11.0', 'lb').level, 'warn', 'exactly the minimum runs');
  // a backend node does not need the lb program's features
  t.is(judgeKernel('5.10.0-28-amd64', 'backend').level, 'warn');
  t.regex(judgeKernel('5.10.0-28-amd64', 'backend').detail, /IPv4 in IPv6 or IPv6 in IPv4 tunnels/);
  t.is(judgeKernel('5.8.0', 'backend').level, 'warn', 'exactly the backend minimum runs');
  // role unknown: both roles' needs
  t.is(judgeKernel('5.10.0').level, 'fail');
  t.is(judgeKernel('weird').level, 'warn');
});

test('docs/deploy.md "Kernel" lists every feature of the table with its release, and the minimums', (t) => {
  const doc = readFileSync('docs/deploy.md', 'utf8');
  for (const f of KERNEL_FEATURES) t.true(doc.includes(`| ${f.feature} | ${versionText(f.since)} |`), f.feature);
  t.true(doc.includes(`lb nodes need Linux **${versionText(minimumKernel(['lb']))}**`));
  t.true(doc.includes(`backend nodes **${versionText(minimumKernel(['backend']))}**`));
  t.true(readFileSync('README.md', 'utf8').includes(`Linux ${versionText(minimumKernel(['lb']))} or newer on lb nodes`));
});

/** The BPF sources: every helper they call is either one the table names or one older than the lb minimum. */
const bpfSources = () => ['src/bpf/progs', 'src/bpf/include'].flatMap((d) =>
  readdirSync(d).filter((f) => /\.[ch]$/.test(f)).map((f) => readFileSync(join(d, f), 'utf8'))).join('\n');
/** Helpers before 5.2 (docs: bcc kernel-versions.md): no row needed. */
const OLD_HELPERS = new Set(['bpf_map_lookup_elem', 'bpf_map_update_elem', 'bpf_map_delete_elem', 'bpf_skb_load_bytes',
  'bpf_skb_store_bytes', 'bpf_l3_csum_replace', 'bpf_l4_csum_replace', 'bpf_csum_diff', 'bpf_skb_adjust_room',
  'bpf_xdp_adjust_head', 'bpf_xdp_adjust_tail', 'bpf_ktime_get_ns', 'bpf_redirect', 'bpf_perf_event_output',
  'bpf_get_prandom_u32', 'bpf_fib_lookup', 'bpf_spin_lock', 'bpf_spin_unlock']);
/** Helpers of 5.2 .. 5.11 that the table covers through a feature of the same or a later release. */
const COVERED = new Map([['bpf_jiffies64', [5, 5]], ['bpf_ringbuf_reserve', [5, 8]], ['bpf_ringbuf_submit', [5, 8]]] as const);

test('every BPF helper the sources call is accounted for: older than the minimum, or a row of the table', (t) => {
  const src = bpfSources();
  const called = new Set([...src.matchAll(/\b(bpf_[a-z0-9_]+)\(/g)].map((m) => m[1]!)
    .filter((h) => !/^bpf_(htons|ntohs|htonl|ntohl)$/.test(h))); // byte order: macros, not helpers
  const named = KERNEL_FEATURES.map((f) => f.feature).join(' ');
  const lb = minimumKernel(['lb']);
  for (const h of called) {
    if (OLD_HELPERS.has(h) || named.includes(h)) continue;
    const c = COVERED.get(h as never);
    t.truthy(c && atLeast(lb, c as never), `${h}: a helper the kernel table (kernel-minimum.ts) does not account for; add its first release`);
  }
  // and the table's identifiers are still used (a row for a feature nobody uses any more misleads)
  for (const id of ['bpf_ktime_get_coarse_ns', 'BPF_MAP_TYPE_RINGBUF', 'BPF_F_INNER_MAP', 'bpf_xdp_load_bytes', 'BPF_FIB_LOOKUP_SRC',
    'BPF_F_ADJ_ROOM_DECAP_L3_IPV4', 'BPF_ADJ_ROOM_MAC']) t.true(src.includes(id), `${id} is no longer used by the BPF sources`);
  t.true(readFileSync('src/bpf/napi/maps.cc', 'utf8').includes('bpf_map_lookup_and_delete_elem('));
});
