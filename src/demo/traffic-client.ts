// A bounded traffic generator that runs INSIDE the lab's client namespace (started by traffic.ts through
// nsenter) and prints one JSON result on stdout. The lab's backends name themselves in every reply
// (`backend=<name> ...`), so each request tells which backend its flow reached.
//
//   node traffic-client.js '<json job>'
//
// Jobs (every loop is bounded in count and time):
//   burst  — `count` HTTP requests, each on a new TCP connection, source addresses taken in turn from `sources`;
//            optional fixed source ports (`ports`) so the same flows can be sent again later.
//   flows  — `flows` long-lived keep-alive TCP connections, each sending a request every `intervalMs` for
//            `durationMs`; reports per connection the backends seen and the failures (a connection that broke
//            is not reopened: it counts as not surviving).
//   udp    — `count` datagrams from fresh sockets, answered by the backends' UDP echo.
import { connect, type Socket } from 'node:net';
import { createSocket } from 'node:dgram';
import { existsSync } from 'node:fs';

export interface FlowRecord {
  src: string;
  sport: number;
  backend: string | null;
  error?: string;
}

export interface BurstJob { kind: 'burst'; host: string; port: number; count: number; concurrency?: number; sources: string[]; ports?: number[]; timeoutMs?: number; path?: string }
export interface FlowsJob {
  kind: 'flows'; host: string; port: number; flows: number; durationMs: number; intervalMs: number; sources: string[]; timeoutMs?: number;
  /** Stop early (before durationMs) once this file exists: the caller decides when the interesting part is over. */
  stopFile?: string;
  /** Fixed source ports, one per flow (flow i from sources[i % n] and ports[i], as a burst with the same lists). */
  ports?: number[];
}
export interface UdpJob { kind: 'udp'; host: string; port: number; count: number; sources: string[]; timeoutMs?: number }
export type TrafficJob = BurstJob | FlowsJob | UdpJob;

export interface BurstResult { kind: 'burst'; records: FlowRecord[] }
export interface FlowResult { src: string; sport: number; backends: string[]; requests: number; failures: number; firstError?: string; survived: boolean }
export interface FlowsResult { kind: 'flows'; flows: FlowResult[] }
export interface UdpResult { kind: 'udp'; records: FlowRecord[] }
export type TrafficResult = BurstResult | FlowsResult | UdpResult;

const BACKEND_RE = /backend=([A-Za-z0-9._-]+)/;

/** One HTTP/1.1 request on a fresh connection with `Connection: close`, so the server closes first and the
 * client keeps no TIME_WAIT: the same (source, port) may be reused for the same flow moments later. */
function oneRequest(host: string, port: number, src: string, sport: number | undefined, path: string, timeoutMs: number): Promise<FlowRecord> {
  return new Promise((resolve) => {
    let data = '';
    let done = false;
    let boundPort = sport ?? 0;
    const sock = connect({ host, port, localAddress: src, ...(sport ? { localPort: sport } : {}) });
    const finish = (error?: string) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      const m = BACKEND_RE.exec(data);
      resolve({ src, sport: boundPort, backend: m ? m[1]! : null, ...(error && !m ? { error } : {}) });
    };
    const timer = setTimeout(() => finish('timeout'), timeoutMs);
    sock.setEncoding('latin1');
    sock.on('connect', () => {
      boundPort = sock.localPort ?? boundPort; // read now: a destroyed socket no longer knows it
      sock.write(`GET ${path} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
    });
    sock.on('data', (d: string) => (data += d));
    sock.on('end', () => finish(data ? undefined : 'closed without reply'));
    sock.on('error', (e: NodeJS.ErrnoException) => finish(e.code ?? e.message));
  });
}

async function runBurst(job: BurstJob): Promise<BurstResult> {
  const records: FlowRecord[] = new Array(job.count);
  let next = 0;
  const worker = async () => {
    while (next < job.count) {
      const i = next++;
      const src = job.sources[i % job.sources.length]!;
      const sport = job.ports ? job.ports[i] : undefined;
      records[i] = await oneRequest(job.host, job.port, src, sport, job.path ?? '/', job.timeoutMs ?? 2000);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(job.concurrency ?? 16, job.count)) }, worker));
  return { kind: 'burst', records };
}

/** A keep-alive connection that sends a request every intervalMs until the deadline, or until it breaks. */
function runFlow(job: FlowsJob, src: string, deadline: number, sport?: number): Promise<FlowResult> {
  return new Promise((resolve) => {
    const r: FlowResult = { src, sport: 0, backends: [], requests: 0, failures: 0, survived: false };
    let buf = '';
    let waiting = false;
    let reqTimer: NodeJS.Timeout | undefined;
    let tick: NodeJS.Timeout | undefined;
    let done = false;
    const sock: Socket = connect({ host: job.host, port: job.port, localAddress: src, ...(sport ? { localPort: sport } : {}) });
    const finish = (error?: string) => {
      if (done) return;
      done = true;
      clearTimeout(reqTimer);
      clearTimeout(tick);
      if (error) {
        r.failures++;
        r.firstError ??= error;
      }
      r.survived = r.failures === 0 && r.requests > 0;
      sock.destroy();
      resolve(r);
    };
    const send = () => {
      if (done) return;
      if (Date.now() >= deadline || (job.stopFile && existsSync(job.stopFile))) return finish();
      waiting = true;
      r.requests++;
      sock.write(`GET / HTTP/1.1\r\nHost: ${job.host}\r\n\r\n`);
      reqTimer = setTimeout(() => finish('timeout'), job.timeoutMs ?? 2000);
    };
    sock.setEncoding('latin1');
    sock.setNoDelay(true);
    sock.on('connect', () => {
      r.sport = sock.localPort ?? 0;
      send();
    });
    sock.on('data', (d: string) => {
      buf += d;
      // A whole response: headers, then Content-Length bytes of body.
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0 || !waiting) return;
      const len = Number(/content-length:\s*(\d+)/i.exec(buf.slice(0, end))?.[1] ?? 0);
      if (buf.length < end + 4 + len) return;
      const body = buf.slice(end + 4, end + 4 + len);
      buf = buf.slice(end + 4 + len);
      waiting = false;
      clearTimeout(reqTimer);
      const m = BACKEND_RE.exec(body);
      if (!m) return finish('reply without backend name');
      if (r.backends[r.backends.length - 1] !== m[1]) r.backends.push(m[1]!);
      tick = setTimeout(send, job.intervalMs);
    });
    sock.on('end', () => finish('closed by peer'));
    sock.on('error', (e: NodeJS.ErrnoException) => finish(e.code ?? e.message));
  });
}

async function runFlows(job: FlowsJob): Promise<FlowsResult> {
  const deadline = Date.now() + job.durationMs;
  const flows = await Promise.all(
    Array.from({ length: job.flows }, (_, i) => runFlow(job, job.sources[i % job.sources.length]!, deadline, job.ports?.[i])),
  );
  return { kind: 'flows', flows };
}

function oneDatagram(host: string, port: number, src: string, timeoutMs: number, i: number): Promise<FlowRecord> {
  return new Promise((resolve) => {
    const sock = createSocket(host.includes(':') ? 'udp6' : 'udp4');
    let sport = 0;
    const finish = (backend: string | null, error?: string) => {
      clearTimeout(timer);
      try {
        sock.close();
      } catch {
        /* already closed */
      }
      resolve({ src, sport, backend, ...(error ? { error } : {}) });
    };
    const timer = setTimeout(() => finish(null, 'timeout'), timeoutMs);
    sock.on('message', (msg) => {
      const m = BACKEND_RE.exec(msg.toString('latin1'));
      finish(m ? m[1]! : null, m ? undefined : 'reply without backend name');
    });
    sock.on('error', (e: NodeJS.ErrnoException) => finish(null, e.code ?? e.message));
    sock.bind(0, src, () => {
      sport = sock.address().port;
      sock.send(`probe ${i}`, port, host);
    });
  });
}

async function runUdp(job: UdpJob): Promise<UdpResult> {
  const records: FlowRecord[] = [];
  const batch = 16;
  for (let i = 0; i < job.count; i += batch) {
    const n = Math.min(batch, job.count - i);
    records.push(
      ...(await Promise.all(Array.from({ length: n }, (_, k) => oneDatagram(job.host, job.port, job.sources[(i + k) % job.sources.length]!, job.timeoutMs ?? 1000, i + k)))),
    );
  }
  return { kind: 'udp', records };
}

export async function runJob(job: TrafficJob): Promise<TrafficResult> {
  switch (job.kind) {
    case 'burst':
      return runBurst(job);
    case 'flows':
      return runFlows(job);
    case 'udp':
      return runUdp(job);
  }
}

// Run as a script: the job is argv[2]; a hard stop guards against anything unbounded.
if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop()!)) {
  const job = JSON.parse(process.argv[2] ?? '{}') as TrafficJob;
  const hardStop = setTimeout(() => {
    process.stderr.write('traffic-client: hard time limit reached\n');
    process.exit(3);
  }, 120_000);
  hardStop.unref();
  runJob(job).then(
    (r) => {
      process.stdout.write(JSON.stringify(r) + '\n');
      process.exit(0);
    },
    (e: Error) => {
      process.stderr.write(`traffic-client: ${e.message}\n`);
      process.exit(2);
    },
  );
}
