// A client namespace and an lb namespace joined by one veth, for tests that run xdp_lb on the lb side under UDP
// traffic to a VIP (re-attach, resize, monitor). The client routes the VIP via the lb's fixed MAC; the lb knows the
// reals' MACs (permanent neighbours) and forwards; packets to the VIP that reach the lb's stack (no XDP program
// handled them) are counted by an nftables netdev ingress rule on the lb's interface, which runs after XDP.
// Only documentation addresses; the caller removes the namespaces (cleanupRun, deleteNetns) in its teardown.
import { spawn } from 'node:child_process';
import { createNetns, nsArgv, run, systemCommand, vethPair } from '../../src/lab/netns.js';

export const VIP = '203.0.113.10';
export const PORT = 53;
export const LB_MAC = '02:00:00:00:0c:01';
/** The reals' addresses and the MACs the lb's neighbour table gives them. */
export const REAL_MACS: Record<string, string> = { '198.51.100.11': '02:00:00:00:01:11', '198.51.100.12': '02:00:00:00:01:12' };

/** Client `c0` (198.51.100.2) in `nsC`, lb `l0` (198.51.100.1) in `nsL`; `nftTable` names the counting table. */
export async function setupVipVethLab(nsC: string, nsL: string, nftTable: string): Promise<void> {
  await createNetns(nsC);
  await createNetns(nsL);
  await vethPair({ ns: nsC, name: 'c0', addrs: ['198.51.100.2/24'] }, { ns: nsL, name: 'l0', addrs: ['198.51.100.1/24'] });
  await run(['ip', '-n', nsL, 'link', 'set', 'dev', 'l0', 'address', LB_MAC]);
  await run(['ip', '-n', nsC, 'neigh', 'replace', '198.51.100.1', 'lladdr', LB_MAC, 'dev', 'c0', 'nud', 'permanent']);
  await run(['ip', '-n', nsC, 'route', 'add', `${VIP}/32`, 'via', '198.51.100.1', 'dev', 'c0']);
  for (const [ip, mac] of Object.entries(REAL_MACS))
    await run(['ip', '-n', nsL, 'neigh', 'replace', ip, 'lladdr', mac, 'dev', 'l0', 'nud', 'permanent']);
  // bpf_fib_lookup refuses to forward when forwarding is off
  await run(['ip', 'netns', 'exec', nsL, 'sysctl', '-q', '-w', 'net.ipv4.ip_forward=1']);
  await run(['ip', 'netns', 'exec', nsL, systemCommand('nft'), '-f', '-'], {
    input: `table netdev ${nftTable} {\n  chain in {\n    type filter hook ingress device "l0" priority 0;\n    ip daddr ${VIP} counter\n  }\n}\n` });
}

/** Packets to the VIP that reached the lb's stack so far. */
export async function passedToStack(nsL: string, nftTable: string): Promise<number> {
  const r = await run(['ip', 'netns', 'exec', nsL, systemCommand('nft'), '-j', 'list', 'chain', 'netdev', nftTable, 'in']);
  const rule = (JSON.parse(r.stdout).nftables as Array<Record<string, any>>).find((x) => x['rule'])!['rule'];
  return (rule.expr as Array<Record<string, any>>).find((e) => e['counter'])!['counter'].packets as number;
}

// Paced UDP sender from one socket (one flow), bounded: at most `limit` datagrams and 60 s. Prints "go" after 100
// datagrams, keeps sending until its stdin ends (or the limit), then prints {"sent": n}.
const SENDER = `
const s = require('dgram').createSocket('udp4');
const [vip, port, limit] = process.argv.slice(1);
let stop = false;
process.stdin.on('end', () => { stop = true; });
process.stdin.resume();
const deadline = Date.now() + 60000;
const payload = Buffer.alloc(32);
const send = () => new Promise((res, rej) => s.send(payload, Number(port), vip, (e) => (e ? rej(e) : res())));
(async () => {
  let sent = 0;
  while (sent < Number(limit) && !(stop && sent >= 100) && Date.now() < deadline) {
    await send();
    sent++;
    if (sent === 100) process.stdout.write('go\\n');
    if (sent % 20 === 0) await new Promise((r) => setTimeout(r, 1));
  }
  s.close();
  process.stdout.write(JSON.stringify({ sent }) + '\\n');
})().catch((e) => { console.error(String(e)); process.exit(1); });
`;

/** Sends to the VIP from `nsC` while `during` runs (or `limit` datagrams, at least 100 before `during` starts
 * when limit >= 100); resolves with the count sent and what `during` returned. */
export async function withUdpTraffic<T>(nsC: string, limit: number, during: () => Promise<T>): Promise<{ sent: number; result: T }> {
  const [cmd, ...args] = nsArgv(nsC, [process.execPath, '-e', SENDER, VIP, String(PORT), String(limit)]);
  const child = spawn(cmd!, args, { stdio: ['pipe', 'pipe', 'pipe'] });
  try {
    let out = '';
    let err = '';
    child.stderr.on('data', (d) => (err += d));
    const exited = new Promise<number>((resolve) => child.on('close', (code) => resolve(code ?? -1)));
    const going = new Promise<void>((resolve, reject) => {
      child.stdout.on('data', (d) => {
        out += d;
        if (out.includes('go\n') || out.includes('"sent"')) resolve();
      });
      void exited.then((code) => reject(new Error(`sender exited ${code} before sending: ${err}`)));
    });
    if (limit >= 100) await going;
    const result = await during();
    child.stdin.end();
    const code = await exited;
    if (code !== 0) throw new Error(`sender exited ${code}: ${err}`);
    return { sent: (JSON.parse(out.trim().split('\n').at(-1)!) as { sent: number }).sent, result };
  } finally {
    if (child.exitCode === null) child.kill('SIGKILL');
  }
}
