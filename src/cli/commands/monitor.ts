// `gitlb monitor`: what XDP did to each frame, which tcpdump cannot show (frames that xdp_lb transmits, redirects
// or drops never reach the kernel's capture points). One line per frame as received and as sent on, with the
// verdict, or a pcap file for tcpdump/Wireshark (`-w`). While it runs, the node's link runs xdp_lb_monitor.o over
// the same maps (src/bpf/monitor/index.ts); on exit the original program is back.
import { closeSync, openSync, writeSync } from 'node:fs';
import { defineCommand, InvalidArgumentError } from '../command.js';
import { lbPinDir } from '../lb-pin-dir.js';
import { MONITOR_SNAPLEN, XdpMonitor, pcapHeader, pcapRecord, summarizeFrame, type MonitorSample } from '../../bpf/monitor/index.js';
import { XDP_ACTIONS } from '../../bpf/monitor/sample.js';

interface MonitorOptions {
  node?: string;
  pinRoot: string;
  count: number;
  duration: number;
  write?: string;
  point: 'both' | 'entry' | 'exit';
  action?: string[];
  quiet: boolean;
}

function positiveInt(max: number) {
  return (text: string): number => {
    const n = Number(text);
    if (!Number.isInteger(n) || n < 0 || n > max) throw new InvalidArgumentError(`'${text}' is not an integer between 0 and ${max}`);
    return n;
  };
}

function actions(text: string): string[] {
  const list = text.split(',').map((a) => a.trim().toUpperCase()).filter(Boolean);
  for (const a of list)
    if (!(XDP_ACTIONS as readonly string[]).includes(a)) throw new InvalidArgumentError(`'${a}' is not one of ${XDP_ACTIONS.join(', ')}`);
  return list;
}

function clock(wallMs: number): string {
  const d = new Date(wallMs);
  const us = String(Math.floor((wallMs % 1000) * 1000)).padStart(6, '0');
  return `${d.toISOString().slice(11, 19)}.${us}`;
}

/** A sample's frame pairs with the exit of the same run: entries are kept until their exit decides the filter. */
function selected(s: MonitorSample, o: MonitorOptions, lastEntryVerdict: string | null): boolean {
  if (o.point !== 'both' && s.point !== o.point) return false;
  if (!o.action) return true;
  return o.action.includes(s.point === 'exit' ? s.action! : lastEntryVerdict ?? '');
}

export const command = defineCommand<MonitorOptions>({
  name: 'monitor',
  summary: "what XDP did to each frame on this lb node: as received and as sent on, with the verdict (or a pcap file)",
  description: `tcpdump cannot see frames that xdp_lb transmits (TX), redirects or drops: they never reach the kernel's
capture points. While gitlb monitor runs, the node's XDP link runs xdp_lb_monitor.o: the same program over the same
maps (connection table, rings, counters), which also hands each frame to this command as it arrived and as it leaves
(the first ${MONITOR_SNAPLEN} bytes), with the verdict. The swap in and out is the link's atomic compare-and-swap: no
frame goes unhandled, and a program the daemon put in meanwhile is never replaced. Without monitoring the node runs
xdp_lb.o, which carries no sampling code at all.

Each frame costs a copy to user space while monitoring: watch a busy node with --count or --duration, or write a
pcap (-w) and filter it with tcpdump -r FILE 'expression'.`,
  exitStatus: 'Exit status: 0 stopped (--count, --duration, Ctrl-C); 1 no data plane pinned here, or it could not be watched; 2 usage error.',
  define: (cmd) => cmd
    .option('--node <name>', 'the node whose data plane to watch (default: the only lb node pinned under --pin-root)')
    .option('--pin-root <dir>', 'bpffs root the daemon pins under', '/sys/fs/bpf/gitlb')
    .option('-c, --count <n>', 'stop after n frames (0: no limit)', positiveInt(10_000_000), 0)
    .option('--duration <seconds>', 'stop after this many seconds (0: no limit)', positiveInt(86_400), 0)
    .option('-w, --write <file>', 'write a pcap file (tcpdump, Wireshark) instead of lines; entry and exit frames alike')
    .option('--point <where>', 'both | entry (as received) | exit (as sent on)', (v: string) => {
      if (v !== 'both' && v !== 'entry' && v !== 'exit') throw new InvalidArgumentError(`'${v}' is not both, entry or exit`);
      return v;
    }, 'both')
    .option('--action <list>', `only frames whose verdict is one of these (comma-separated: ${XDP_ACTIONS.join(', ')})`, actions)
    .option('-q, --quiet', 'no summary line at the end', false),
  async run(o) {
    const { dir } = lbPinDir(o);
    const monitor = await XdpMonitor.start(dir);
    const out = o.write ? openSync(o.write, 'w') : null;
    if (out !== null) writeSync(out, pcapHeader(MONITOR_SNAPLEN));
    // bpf_ktime_get_ns is CLOCK_MONOTONIC: map it to wall time once, from this process's own clocks.
    const wallAtMono = Date.now() - Number(process.hrtime.bigint() / 1_000_000n);
    let stop = false;
    const onSignal = () => { stop = true; };
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
    const deadline = o.duration ? Date.now() + o.duration * 1000 : Infinity;
    let frames = 0;
    let lost = 0;
    let detached = false;
    const pendingEntries = new Map<number, MonitorSample>();
    try {
      while (!stop && Date.now() < deadline && (!o.count || frames < o.count)) {
        const r = monitor.poll(100);
        lost += r.lost;
        for (const s of r.samples) {
          if (o.count && frames >= o.count) break;
          // with --action, an entry waits for its exit (same CPU, next sample) to know the verdict
          if (o.action && s.point === 'entry') {
            pendingEntries.set(s.cpu, s);
            continue;
          }
          const entry = s.point === 'exit' ? pendingEntries.get(s.cpu) : undefined;
          if (entry) pendingEntries.delete(s.cpu);
          const batch = entry && selected(entry, o, s.action) ? [entry, s] : [s];
          for (const x of batch) {
            if (!selected(x, o, s.action)) continue;
            const wallMs = wallAtMono + Number(x.monotonicNs) / 1e6;
            if (out !== null) writeSync(out, pcapRecord(x.frame, x.length, wallMs));
            else process.stdout.write(`${clock(wallMs)} ${x.point.padEnd(5)} ${(x.action ?? '').padEnd(8)} ${String(x.length).padStart(5)}B ${summarizeFrame(x.frame)}\n`);
            frames++;
          }
        }
        if (!r.attached) {
          detached = true;
          break;
        }
      }
    } finally {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      const putBack = monitor.stop();
      if (out !== null) closeSync(out);
      if (!o.quiet) {
        const how = detached ? 'the daemon replaced the program meanwhile; its program stays'
          : putBack ? `original program (id ${monitor.originalProgram}) restored` : 'the link runs another program now; left as it is';
        process.stderr.write(`${frames} frames${lost ? `, ${lost} lost (buffer full: narrow with --action or use -w)` : ''}; ${how}\n`);
      }
    }
    return 0;
  },
});
