// `gitlb top`: a live per-service and per-real view of the local node's data plane (like `ipvsadm -Ln --rate`),
// read from its pinned maps; names, health and table shares come from the node's daemon when its /metrics answers.
import { defineCommand, InvalidArgumentError, UsageError } from '../command.js';
import { readLbStats, type LbStats } from '../../bpf/dataplane/pinned-stats.js';
import { lbPinDir } from '../lb-pin-dir.js';
import { parsePromText } from '../../reconciler/metrics/prom-text.js';
import { DEFAULT_METRICS_LISTEN } from '../../reconciler/metrics/index.js';
import { daemonViewOf, formatDrops, formatTop, type DaemonView } from '../../reconciler/top/view.js';

interface TopOptions {
  node?: string;
  pinRoot: string;
  interval: number;
  once: boolean;
  metrics: string;
  drops: boolean;
  all: boolean;
}

function seconds(text: string): number {
  const s = Number(text);
  if (!(s >= 0.1 && s <= 3600)) throw new InvalidArgumentError(`'${text}' is not a number of seconds between 0.1 and 3600`);
  return s;
}

/** The daemon's view, or null when its /metrics does not answer within a second. */
async function daemonView(url: string): Promise<DaemonView | null> {
  if (url === 'off') return null;
  try {
    const res = await fetch(`${url.replace(/\/+$/, '')}/metrics`, { signal: AbortSignal.timeout(1000) });
    if (!res.ok) return null;
    const text = await res.text();
    return daemonViewOf(parsePromText(text.slice(0, 16 << 20)));
  } catch {
    return null;
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export const command = defineCommand<TopOptions>({
  name: 'top',
  summary: 'live per-service and per-real rates of the local lb node (pinned maps), like ipvsadm -Ln --rate',
  description: `Reads the counters of this node's pinned XDP data plane every --interval seconds and shows, per service
(its VIP listeners) and per real: packets/s, bytes/s, new connections/s and totals, with drops by reason and the
connection-table and SNAT occupancy. Service names, each real's health and its share of the Maglev table come from
the node's running daemon (its /metrics); without it the view still works, naming services by id.`,
  exitStatus: 'Exit status: 0 stopped (Ctrl-C) or, with --once, printed; 1 no data plane pinned here (or unreadable); 2 usage error.',
  define: (cmd) => cmd
    .option('--node <name>', 'the node whose pins to read (default: the only lb node pinned under --pin-root)')
    .option('--pin-root <dir>', 'bpffs root the daemon pins under', '/sys/fs/bpf/gitlb')
    .option('--interval <seconds>', 'seconds between readings (rates are over this window)', seconds, 1)
    .option('--once', 'print one view (two readings --interval apart) and exit, for scripts', false)
    .option('--metrics <url|off>', "the daemon's metrics endpoint, for names, health and table shares", `http://${DEFAULT_METRICS_LISTEN}`)
    .option('--drops', 'the per-drop-reason view: each reason\'s drops/s, share and total (reasons as gitlb_drops_total names them)', false)
    .option('--all', 'with --drops: also the reasons that never dropped a packet', false),
  async run(o) {
    if (o.all && !o.drops) throw new UsageError('--all goes with --drops (the per-drop-reason view)');
    const { node, dir } = lbPinDir(o);
    const read = (): LbStats => {
      const s = readLbStats(dir);
      if (!s) throw new Error(`the data plane under ${dir} went away`);
      return s;
    };
    let prev = read();
    let prevAt = performance.now();
    let stop = false;
    const onSignal = () => { stop = true; };
    process.once('SIGINT', onSignal);
    try {
      for (;;) {
        await sleep(o.interval * 1000);
        const cur = read();
        // the drops view needs no names from the daemon
        const daemon = o.drops ? null : await daemonView(o.metrics);
        const now = performance.now();
        const input = { prev, cur, seconds: (now - prevAt) / 1000, daemon, node, at: new Date() };
        const view = o.drops ? formatDrops({ ...input, all: o.all }) : formatTop(input);
        if (o.once) {
          process.stdout.write(view);
          return 0;
        }
        // home and clear, then the view: one screen, redrawn in place
        process.stdout.write(`\x1b[H\x1b[2J${view}`);
        prev = cur;
        prevAt = now;
        if (stop) return 0;
      }
    } finally {
      process.off('SIGINT', onSignal);
    }
  },
});
