// Test client (run inside the lab's client namespace): sends an exact number of UDP datagrams to VIP:PORT over
// FLOWS flows (one source port each, PER_FLOW datagrams per flow, each awaiting its echo) and prints, as one JSON
// line, how many datagrams went to each backend (the backend names itself in every echo).
//   node --import tsx test/udp-flows-client.ts VIP PORT FLOWS PER_FLOW
import { createSocket } from 'node:dgram';

const [vip, port, flows, perFlow] = [process.argv[2]!, Number(process.argv[3]), Number(process.argv[4]), Number(process.argv[5])];

async function flow(): Promise<{ backend: string | null; sent: number }> {
  const sock = createSocket(vip.includes(':') ? 'udp6' : 'udp4');
  let backend: string | null = null;
  let waiter: (() => void) | null = null;
  sock.on('message', (msg) => {
    const m = /^backend=([^ ]+) /.exec(msg.toString());
    if (m) backend = m[1]!;
    waiter?.();
  });
  let sent = 0;
  for (let i = 0; i < perFlow; i++) {
    const echoed = new Promise<void>((resolve) => {
      waiter = resolve;
      setTimeout(resolve, 1000); // a lost echo still counts as sent: the lb saw the datagram either way
    });
    await new Promise<void>((resolve, reject) => sock.send(`datagram ${i}`, port, vip, (e) => (e ? reject(e) : resolve())));
    sent++;
    await echoed;
  }
  sock.close();
  return { backend, sent };
}

const byBackend: Record<string, number> = {};
let sent = 0;
for (let f = 0; f < flows; f++) {
  const r = await flow();
  sent += r.sent;
  const key = r.backend ?? 'no-echo';
  byBackend[key] = (byBackend[key] ?? 0) + r.sent;
}
process.stdout.write(JSON.stringify({ sent, byBackend }) + '\n');
