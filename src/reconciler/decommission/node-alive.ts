// Signs that a node's data plane is alive somewhere this host can see, for `gitlb down` when it found nothing
// under the pin root it was given: a wrong --pin-root must not record a live, announcing node as Decommissioned.
import { readFileSync, readdirSync } from 'node:fs';
import { resolve } from 'node:path';
import { runFile } from '../host/run-file.js';

/** The lb XDP program's name as the kernel reports it (src/bpf/progs, SEC("xdp") xdp_lb). */
const GITLB_XDP_PROGS = new Set(['xdp_lb']);

/** One line per sign found: gitlb's XDP program attached to `iface`, a `gitlb run --node <node>` process using
 * `cacheDir` (its --cache-dir, or the default /var/lib/gitlb/<node> when it gives none): that node's daemon. */
export async function nodeAliveEvidence(node: string, iface: string | undefined, cacheDir: string): Promise<string[]> {
  const out: string[] = [];
  if (iface) {
    const r = await runFile('ip', ['-d', '-j', 'link', 'show', 'dev', iface], 10_000);
    try {
      const x = (JSON.parse(r.stdout) as { xdp?: { prog?: { name?: string; id?: number }; attached?: { prog?: { name?: string; id?: number } }[] } }[])[0]?.xdp;
      for (const p of [x?.prog, ...(x?.attached ?? []).map((a) => a.prog)]) {
        if (p?.name && GITLB_XDP_PROGS.has(p.name)) out.push(`gitlb's XDP program ${p.name} (id ${p.id}) is attached to ${iface}`);
      }
    } catch {
      // no such interface or no JSON: no sign either way
    }
  }
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    if (Number(pid) === process.pid) continue;
    let argv: string[];
    try {
      argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    } catch {
      continue; // gone meanwhile
    }
    const run = argv.indexOf('run');
    const at = argv.indexOf('--node');
    const c = argv.indexOf('--cache-dir');
    const itsCache = c > run && argv[c + 1] ? resolve(argv[c + 1]!) : `/var/lib/gitlb/${node}`;
    if (run > 0 && argv.slice(0, run).some((a) => /gitlb|main\.[tj]s$/.test(a)) && at > run && argv[at + 1] === node && itsCache === resolve(cacheDir)) {
      out.push(`a gitlb run --node ${node} process with cache dir ${itsCache} is running (pid ${pid})`);
    }
  }
  return [...new Set(out)];
}
