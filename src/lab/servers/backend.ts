// A lab backend: HTTP servers and UDP echo services that name the backend in every response, so traffic tests
// can see which backend a flow reached. Runs inside a backend's namespace, started by the lab.
//
//   node backend.js --name be-1 --tcp 80 --tcp 8080 --udp 9000
//
// HTTP: every path answers 200 with `backend=<name> local=<ip>:<port> client=<ip>:<port>\n` and a
//       `X-Backend: <name>` header; `/healthz` answers `ok backend=<name>\n`.
// UDP:  every datagram is answered with `backend=<name> echo=<payload>`.
//
// UDP replies must leave from the address the datagram was sent to (the VIP, for DSR), and Node's dgram has no
// IP_PKTINFO. So besides one wildcard socket per port, the server binds a socket to each local address and
// rescans the interfaces every second, because VIPs are added to `lo` while it runs. The kernel delivers a
// datagram to the most specific bound socket, whose replies then carry that address as their source.
import { createServer } from 'node:http';
import { createSocket, type Socket } from 'node:dgram';
import { networkInterfaces } from 'node:os';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: {
    name: { type: 'string' },
    tcp: { type: 'string', multiple: true, default: [] },
    udp: { type: 'string', multiple: true, default: [] },
  },
});
const name = values.name;
if (!name) {
  process.stderr.write('backend: --name is required\n');
  process.exit(2);
}
const toPort = (s: string) => {
  const n = Number(s);
  if (!Number.isInteger(n) || n < 1 || n > 65535) throw new Error(`backend: bad port '${s}'`);
  return n;
};
const tcpPorts = values.tcp!.map(toPort);
const udpPorts = values.udp!.map(toPort);

const stripMapped = (a: string | undefined) => (a ?? '').replace(/^::ffff:/, '');
const hostPort = (a: string | undefined, p: number | undefined) => {
  const ip = stripMapped(a);
  return ip.includes(':') ? `[${ip}]:${p}` : `${ip}:${p}`;
};

for (const port of tcpPorts) {
  const server = createServer((req, res) => {
    const body =
      req.url === '/healthz'
        ? `ok backend=${name}\n`
        : `backend=${name} local=${hostPort(req.socket.localAddress, req.socket.localPort)} client=${hostPort(req.socket.remoteAddress, req.socket.remotePort)}\n`;
    res.writeHead(200, { 'Content-Type': 'text/plain', 'X-Backend': name, 'Content-Length': Buffer.byteLength(body) });
    res.end(body);
    req.resume();
  });
  server.keepAliveTimeout = 5000;
  // '::' without ipv6Only accepts IPv4 too (as mapped addresses).
  server.listen({ port, host: '::', ipv6Only: false });
  server.on('error', (e) => {
    process.stderr.write(`backend ${name}: tcp/${port}: ${e.message}\n`);
    process.exit(1);
  });
}

const udpSockets = new Map<string, Socket>(); // key: `${addr}|${port}`

function bindUdp(addr: string, port: number): void {
  const key = `${addr}|${port}`;
  if (udpSockets.has(key)) return;
  const v6 = addr.includes(':');
  const sock = createSocket({ type: v6 ? 'udp6' : 'udp4', reuseAddr: true, ipv6Only: v6 && addr !== '::' ? true : false });
  udpSockets.set(key, sock);
  sock.on('message', (msg, rinfo) => {
    const reply = Buffer.concat([Buffer.from(`backend=${name} echo=`), msg.subarray(0, 1400)]);
    sock.send(reply, rinfo.port, rinfo.address);
  });
  sock.on('error', (e) => {
    // An address that vanished (a VIP removed) is not fatal; forget the socket and let the rescan retry.
    process.stderr.write(`backend ${name}: udp ${addr}:${port}: ${e.message}\n`);
    sock.close();
    udpSockets.delete(key);
  });
  sock.bind(port, addr);
}

function localAddresses(): string[] {
  const out: string[] = [];
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) {
      if (a.family === 'IPv6' && a.address.startsWith('fe80')) continue; // link-local needs a scope; skip
      out.push(a.address);
    }
  }
  return out;
}

function rescanUdp(): void {
  const wanted = new Set(['::', ...localAddresses()]);
  for (const [key, sock] of udpSockets) {
    if (!wanted.has(key.split('|')[0]!)) {
      sock.close();
      udpSockets.delete(key);
    }
  }
  for (const port of udpPorts) for (const addr of wanted) bindUdp(addr, port);
}

if (udpPorts.length) {
  rescanUdp();
  setInterval(rescanUdp, 1000);
}

const stop = () => process.exit(0);
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
process.stdout.write(`backend ${name} serving tcp ${tcpPorts.join(',') || '-'} udp ${udpPorts.join(',') || '-'}\n`);
