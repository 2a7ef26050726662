// A traffic client for the end-to-end health test, run in the client namespace:
//   node --import tsx test/health-client.ts <vip> <port>
// Commands on stdin (one per line), answers as JSON lines:
//   open <n>             open n keep-alive connections, one request each  -> {type:'opened', backends:[...]}
//   probe                one more request on each kept connection        -> {type:'probed', results:[...]}
//   burst <count> <gap>  <count> new connections, one every <gap> ms      -> {type:'flow', ...} each, then {type:'burst-done'}
// Every request is bounded by a 1 s timeout; counts are bounded by the caller.
import net from 'node:net';
import { createInterface } from 'node:readline';

const [vip, portText] = process.argv.slice(2) as [string, string];
const port = Number(portText);
const out = (o: unknown) => process.stdout.write(JSON.stringify(o) + '\n');

/** Sends one GET on `sock` and resolves with the backend named in the reply, or an error text. */
function request(sock: net.Socket): Promise<string> {
  return new Promise((resolve) => {
    let buf = '';
    const done = (v: string) => {
      clearTimeout(timer);
      sock.off('data', onData);
      sock.off('error', onErr);
      sock.off('close', onClose);
      resolve(v);
    };
    const onData = (b: Buffer) => {
      buf += b.toString('latin1');
      const m = /\r\n\r\n[\s\S]*backend=(\S+)/.exec(buf);
      if (m && buf.endsWith('\n')) done(m[1]!);
    };
    const onErr = (e: NodeJS.ErrnoException) => done(`error:${e.code ?? e.message}`);
    const onClose = () => done('error:closed');
    const timer = setTimeout(() => done('error:timeout'), 3000);
    sock.on('data', onData);
    sock.once('error', onErr);
    sock.once('close', onClose);
    sock.write(`GET / HTTP/1.1\r\nHost: ${vip}\r\nConnection: keep-alive\r\n\r\n`);
  });
}

function connect(): Promise<net.Socket | string> {
  return new Promise((resolve) => {
    const sock = net.connect({ host: vip, port });
    const timer = setTimeout(() => (sock.destroy(), resolve('error:connect-timeout')), 1000);
    sock.once('connect', () => (clearTimeout(timer), resolve(sock)));
    sock.once('error', (e: NodeJS.ErrnoException) => (clearTimeout(timer), resolve(`error:${e.code ?? e.message}`)));
  });
}

const kept: net.Socket[] = [];
createInterface({ input: process.stdin }).on('line', async (line) => {
  const [cmd, a, b] = line.split(' ');
  if (cmd === 'open') {
    const backends: string[] = [];
    for (let i = 0; i < Number(a); i++) {
      const s = await connect();
      if (typeof s === 'string') { backends.push(s); continue; }
      s.on('error', () => {});
      kept.push(s);
      backends.push(await request(s));
    }
    out({ type: 'opened', backends });
  } else if (cmd === 'probe') {
    out({ type: 'probed', results: await Promise.all(kept.map((s) => request(s))) });
  } else if (cmd === 'burst') {
    const count = Math.min(Number(a), 2000), gap = Math.max(Number(b), 1);
    const flows: Promise<void>[] = [];
    for (let i = 0; i < count; i++) {
      const start = Date.now();
      flows.push((async () => {
        const s = await connect();
        const result = typeof s === 'string' ? s : await request(s);
        if (typeof s !== 'string') s.destroy();
        out({ type: 'flow', start, end: Date.now(), result });
      })());
      await new Promise((r) => setTimeout(r, gap));
    }
    await Promise.all(flows);
    out({ type: 'burst-done' });
  }
});
process.stdin.on('end', () => {
  for (const s of kept) s.destroy();
  process.exit(0);
});
