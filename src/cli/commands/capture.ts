// `gitlb capture` (alias `gitlb monitor`): what XDP did to the frames an operator asks about, which tcpdump cannot
// show (frames that xdp_lb transmits, redirects or drops never reach the kernel's capture points). The filters,
// sampling and rate bound run inside the program (src/bpf/include/lb_capture.h); each captured frame is shown as
// received and as sent on with its verdict (the real it went to, the drop reason), or written to a pcapng file
// whose packet comments carry the verdict. While it runs, the node's link runs xdp_lb_capture.o over the same maps
// (src/bpf/capture/index.ts); on exit the original program is back.
import { closeSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { defineCommand, InvalidArgumentError, UsageError } from '../command.js';
import { lbPinDir } from '../lb-pin-dir.js';
import { openCaptureFile } from '../capture-file.js';
import {
  CAPTURE_SNAPLEN, NO_FILTER, PinnedCapture, pcapHeader, pcapRecord, pcapngHeader, pcapngPacket, summarizeFrame, verdictText,
  type CaptureRecord,
} from '../../bpf/capture/index.js';
import { parseActions, parseAddressMatch, parseCounters, type AddressMatch } from '../../bpf/capture/filter.js';
import { BACKEND_COUNTER_BITS, TC_VERDICTS, XDP_ACTIONS } from '../../bpf/capture/record.js';
import { isBackendPinRoot } from '../../bpf/dataplane/pinned-stats.js';

interface CaptureOptions {
  node?: string;
  pinRoot: string;
  count: number;
  duration: number;
  write?: string;
  format: 'pcapng' | 'pcap';
  point: 'both' | 'entry' | 'exit';
  vip: AddressMatch[];
  client: AddressMatch[];
  real: string[];
  reason?: string;
  action?: string;
  sample: number;
  rate: number;
  burst?: number;
  quiet: boolean;
}

const DEFAULT_RATE = 1000;

function intIn(min: number, max: number) {
  return (text: string): number => {
    const n = Number(text);
    if (!/^\d+$/.test(text) || !Number.isInteger(n) || n < min || n > max) throw new InvalidArgumentError(`'${text}' is not an integer between ${min} and ${max}`);
    return n;
  };
}

const usage = <T>(f: (text: string) => T) => (text: string): T => {
  try {
    return f(text);
  } catch (e) {
    throw new InvalidArgumentError((e as Error).message);
  }
};

const collect = <T>(parse: (text: string) => T) => (text: string, previous: T[] = []): T[] => [...previous, parse(text)];

function clock(wallNs: bigint): string {
  const ms = Number(wallNs / 1_000_000n);
  const us = String((wallNs / 1000n) % 1_000_000n).padStart(6, '0');
  return `${new Date(ms).toISOString().slice(11, 19)}.${us}`;
}

export const command = defineCommand<CaptureOptions>({
  name: 'capture',
  summary: 'capture what XDP (lb node) or TC (backend node) does, filtered in the program: frames as received and sent, verdict per frame (lines or pcapng)',
  description: `tcpdump cannot see frames that xdp_lb transmits (TX), redirects or drops: they never reach the kernel's
capture points. While gitlb capture runs, the node's XDP link runs xdp_lb_capture.o: the same program over the same
maps (connection table, rings, counters), which also hands the frames the filters select to this command, as they
arrived and as they leave (the first ${CAPTURE_SNAPLEN} bytes of each), with the verdict: the real a frame went to,
the drop or pass reason, every counter it moved. The swap in and out is the link's atomic compare-and-swap: no frame
goes unhandled, and a program the daemon put in meanwhile is never replaced. Without a capture the node runs
xdp_lb.o, which carries no capture code at all. \`gitlb monitor\` is the same command.

Filters run inside the program, so a frame nobody asked for is never copied: --vip and --client (any of up to 4
each) on the addresses as received, --real on the real chosen, --reason on the counters moved (drop_no_real,
drop_martian, snat_drop_table_full, tx, ...), --action on the XDP verdict. Of the frames matching every filter,
--sample N keeps 1 in N (at random) and --rate bounds what is captured per second (a token bucket in the program,
default ${DEFAULT_RATE}/s; --rate 0: no bound); the summary counts what matched and was not captured.

On a backend node (--node naming its pin directory under --pin-root) the same capture runs in its TC programs
(tc_backend_capture.o in both tcx links): each frame as it reached the program and as the program hands it on
(decapsulated, the DSR option stripped, a reply rewritten), with the TC verdict and the backend counters it moved;
--reason and --action take the backend's names, --vip, --client and --real do not apply.

-w FILE writes pcapng: two packets per frame (received: inbound, sent: outbound), each with the verdict as its
comment (Wireshark: frame.comment; tcpdump -r reads the file, without the comments). --format pcap writes classic
pcap instead (no verdicts).`,
  exitStatus: 'Exit status: 0 stopped (--count, --duration, Ctrl-C); 1 no data plane pinned here, or it could not be captured; 2 usage error.',
  define: (cmd) => {
    cmd
      .alias('monitor')
      .option('--node <name>', 'the node whose data plane to capture (default: the only lb node pinned under --pin-root)')
      .option('--pin-root <dir>', 'bpffs root the daemon pins under', '/sys/fs/bpf/gitlb')
      .option('-c, --count <n>', 'stop after n captured frames (0: no limit)', intIn(0, 10_000_000), 0)
      .option('--duration <seconds>', 'stop after this many seconds (0: no limit)', intIn(0, 86_400), 0)
      .option('-w, --write <file>', 'write a pcapng file (verdicts as packet comments) instead of lines')
      .option('--format <format>', 'pcapng | pcap (classic, no verdicts) for --write', (v: string) => {
        if (v !== 'pcapng' && v !== 'pcap') throw new InvalidArgumentError(`'${v}' is not pcapng or pcap`);
        return v;
      }, 'pcapng')
      .option('--point <where>', 'both | entry (as received) | exit (as sent on; entry frames are then not copied)', (v: string) => {
        if (v !== 'both' && v !== 'entry' && v !== 'exit') throw new InvalidArgumentError(`'${v}' is not both, entry or exit`);
        return v;
      }, 'both')
      .option('--vip <addr>', 'frames to this destination: address or prefix, optionally :port[/tcp|/udp] ([v6]:port); repeat for more',
        collect(usage((t) => parseAddressMatch(t, '--vip', true))), [])
      .option('--client <prefix>', 'frames from this source address or prefix; repeat for more', collect(usage((t) => parseAddressMatch(t, '--client', false))), [])
      .option('--real <addr>', 'frames the balancer sent to this real (its address); repeat for more', collect((t: string) => t), [])
      .option('--reason <counters>', 'frames that moved any of these counters (comma-separated: drop_no_real, drop_martian, tx, snat_new, ...; on a backend decap_ipip4, reply4_rewrite, decap_not_allowed, ...)')
      .option('--action <list>', `frames whose verdict is one of these (comma-separated: ${XDP_ACTIONS.join(', ')}; on a backend ${TC_VERDICTS.join(', ')})`)
      .option('--sample <n>', 'capture 1 in n of the matching frames, at random', intIn(1, 0xffffffff), 1)
      .option('--rate <per-second>', 'capture at most this many frames per second (0: no bound)', intIn(0, 1_000_000_000), DEFAULT_RATE)
      .option('--burst <n>', 'frames the rate bound lets through at once (default: rate / 10, at least 1)', intIn(1, 1_000_000))
      .option('-q, --quiet', 'no summary line at the end', false);
  },
  async run(o) {
    // a backend node (--node naming its pin directory): its TC programs, with its own counters and verdicts
    const backendDir = o.node && isBackendPinRoot(join(o.pinRoot, o.node)) ? join(o.pinRoot, o.node) : null;
    const asUsage = <T>(f: () => T): T => {
      try {
        return f();
      } catch (e) {
        throw new UsageError((e as Error).message);
      }
    };
    const counters = o.reason ? asUsage(() => parseCounters(o.reason!, backendDir ? BACKEND_COUNTER_BITS : undefined)) : [];
    const actions = o.action ? asUsage(() => parseActions(o.action!, backendDir ? TC_VERDICTS : undefined)) : [];
    const filter = {
      ...NO_FILTER, vips: o.vip, clients: o.client, counters, actions, sampleN: o.sample,
      rate: o.rate, burst: o.burst ?? Math.max(1, Math.floor(o.rate / 10)), entry: o.point !== 'exit',
    };
    if (backendDir && (o.vip.length || o.client.length || o.real.length))
      throw new UsageError('--vip, --client and --real select frames of an lb node; a backend\'s capture takes --reason, --action, --sample and --rate');
    const { node, dir } = backendDir ? { node: o.node!, dir: backendDir } : lbPinDir(o);
    // the file before the capture program goes in: a refused file leaves the link as it was
    const out = o.write ? openCaptureFile(o.write) : null;
    let capture;
    try {
      capture = backendDir ? await PinnedCapture.backend(dir, filter) : await PinnedCapture.xdp(dir, filter, o.real);
    } catch (e) {
      if (out !== null) closeSync(out);
      throw e;
    }
    if (out !== null) writeSync(out, o.format === 'pcap' ? pcapHeader(CAPTURE_SNAPLEN) : pcapngHeader(CAPTURE_SNAPLEN, `${backendDir ? 'tc' : 'xdp'}:${node}`));
    // bpf_ktime_get_ns is CLOCK_MONOTONIC, like process.hrtime: map it to wall time once
    const wallOffsetNs = BigInt(Date.now()) * 1_000_000n - process.hrtime.bigint();
    let stop = false;
    const onSignal = () => { stop = true; };
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
    const deadline = o.duration ? Date.now() + o.duration * 1000 : Infinity;
    const realNames = new Map<number, string | undefined>();
    const realName = (id: number) => {
      if (!realNames.has(id)) realNames.set(id, capture.capture.realAddress(id));
      return realNames.get(id);
    };
    let frames = 0;
    let lost = 0;
    let detached = false;
    const emit = (r: CaptureRecord) => {
      const wallNs = wallOffsetNs + r.monotonicNs;
      const verdict = verdictText(r, realName);
      const parts: Array<['entry' | 'exit', Buffer, number]> = [];
      if (o.point !== 'exit' && r.entry) parts.push(['entry', r.entry, r.entryLength]);
      if (o.point !== 'entry') parts.push(['exit', r.exit, r.exitLength]);
      // on an lb node a frame comes in and goes out (or is dropped); a backend's ingress hands it in to the host
      // both times, its egress sends it out both times
      const direction = (point: 'entry' | 'exit') => (r.hook === 'tc-ingress' || (r.hook === 'xdp' && point === 'entry') ? 'inbound' : 'outbound');
      for (const [point, bytes, length] of parts) {
        if (out !== null && o.format === 'pcap') writeSync(out, pcapRecord(bytes, length, Number(wallNs / 1000n) / 1000));
        else if (out !== null) writeSync(out, pcapngPacket(bytes, length, wallNs, direction(point), `${point}: ${verdict}`));
        else {
          const tail = point === 'exit' ? ` | ${verdict}` : '';
          const where = r.hook === 'xdp' ? '' : `${r.hook} `;
          process.stdout.write(`${clock(wallNs)} ${where}${point.padEnd(5)} ${(point === 'exit' ? r.action : '').padEnd(8)} ${String(length).padStart(5)}B ${summarizeFrame(bytes)}${tail}\n`);
        }
      }
    };
    let stats;
    let putBack = false;
    try {
      while (!stop && Date.now() < deadline && (!o.count || frames < o.count)) {
        const r = capture.poll(100);
        lost += r.lost;
        for (const rec of r.records) {
          if (o.count && frames >= o.count) break;
          emit(rec);
          frames++;
        }
        if (!r.attached) {
          detached = true;
          break;
        }
        // the poll blocks this thread: let the signal handlers run between polls
        await new Promise((resolve) => setImmediate(resolve));
      }
    } finally {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      ({ putBack, stats } = capture.stop());
      if (out !== null) closeSync(out);
    }
    if (!o.quiet) {
      const ids = capture.originalPrograms.join(', ');
      const how = detached ? 'the daemon replaced the program meanwhile; its program stays'
        : putBack ? `original program${capture.originalPrograms.length > 1 ? 's' : ''} (id ${ids}) restored` : 'a link runs another program now; left as it is';
      const notCaptured = stats.matched - stats.captured;
      process.stderr.write(`${frames} frames shown or written; the program saw ${stats.seen}, ${stats.matched} matched, ` +
        `${stats.captured} captured, ${notCaptured} not captured (${stats.sampled_out} sampled out, ${stats.rate_limited} over the rate bound, ` +
        `${stats.output_failed} refused by a full buffer)${lost ? `, ${lost} lost in the buffer` : ''}; ${how}\n`);
    }
    return 0;
  },
});
