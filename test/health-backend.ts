// A test backend for health checks, run inside a backend namespace: `node --import tsx test/health-backend.ts
// <tcp|http> <port>`. Prints `listening` once bound. The HTTP server answers:
//   /status/NNN       -> status NNN
//   /flap/<name>      -> 200, 500, 200, 500, ... (one alternation per request, counted per name)
//   /slow/<ms>        -> 200 after <ms>; prints `peak N` whenever concurrent requests reach a new maximum
//   /hang             -> never answers
//   anything else     -> 200
import net from 'node:net';
import http from 'node:http';

const [kind, portText] = process.argv.slice(2);
const port = Number(portText);

if (kind === 'tcp') {
  const server = net.createServer((s) => {
    s.on('error', () => {});
    s.end();
  });
  server.listen(port, '::', () => console.log('listening'));
} else {
  const flaps = new Map<string, number>();
  let concurrent = 0;
  let peak = 0;
  const server = http.createServer((req, res) => {
    const url = req.url ?? '/';
    let m: RegExpMatchArray | null;
    if ((m = url.match(/^\/status\/(\d{3})$/))) {
      res.writeHead(Number(m[1])).end();
    } else if ((m = url.match(/^\/flap\/(\w+)$/))) {
      const n = flaps.get(m[1]!) ?? 0;
      flaps.set(m[1]!, n + 1);
      res.writeHead(n % 2 === 0 ? 200 : 500).end();
    } else if ((m = url.match(/^\/slow\/(\d+)$/))) {
      concurrent++;
      if (concurrent > peak) {
        peak = concurrent;
        console.log(`peak ${peak}`);
      }
      setTimeout(() => {
        concurrent--;
        res.writeHead(200).end();
      }, Number(m[1]));
    } else if (url === '/hang') {
      // never answer
    } else {
      res.writeHead(200).end();
    }
  });
  server.listen(port, '::', () => console.log('listening'));
}
