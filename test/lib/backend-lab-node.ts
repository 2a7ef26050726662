// Runs INSIDE a test network namespace (`ip netns exec NS node --import tsx test/lib/backend-lab-node.ts ...`),
// because interface names resolve in the caller's namespace. Two roles:
//   backend <json>: what the daemon does on a backend node: converge(withBackendVips(openBackendDataPlane()), desired)
//                   (maps, TC programs, local VIPs); links and maps stay pinned after exit.
//   client <json>:  attaches the test-only LB emulator (test/bpf/tc_lab_client.c) to the client's veth.
// Prints one JSON line with the result.
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { BpfObject, queryTc } from '../../src/bpf/libbpf.js';
import { openBackendDataPlane } from '../../src/bpf/backend/index.js';
import { withBackendVips } from '../../src/reconciler/host/backend-vips.js';
import type { DesiredState } from '../../src/render/state.js';
import { addrBytes } from './packets-backend.js';
import { applyTo } from './converge.js';

export interface BackendNodeArgs {
  pinRoot: string;
  stateFile: string;
  desired: DesiredState;
}

export interface LabTarget {
  vip: string;
  family: 4 | 6;
  port: number;
  protocol: 'TCP' | 'UDP';
  real: string;
  outerSrc: string;
  targetPort: number;
  mode: 'ipip' | 'ipopt';
}

export interface ClientArgs {
  objectPath: string;
  pinRoot: string;
  interface: string;
  targets: LabTarget[];
}

async function backend(a: BackendNodeArgs) {
  const dp = await openBackendDataPlane({ pinRoot: a.pinRoot, interface: a.desired.interface });
  try {
    // Exactly what `gitlb run` does for a backend node (src/cli/commands/run.ts).
    const report = await applyTo(withBackendVips(dp, { stateFile: a.stateFile, nodeInterface: a.desired.interface }), a.desired);
    const owned = existsSync(a.stateFile) ? (JSON.parse(readFileSync(a.stateFile, 'utf8')) as { device: string | null; addresses: string[] }) : null;
    const device = owned?.device ?? 'lo';
    const shown = JSON.parse(execFileSync('ip', ['-j', 'addr', 'show', 'dev', device], { encoding: 'utf8' })) as Array<{ addr_info: Array<{ local: string }> }>;
    const tc = { ingress: queryTc(a.desired.interface, 'ingress'), egress: queryTc(a.desired.interface, 'egress') };
    return {
      report,
      owned,
      device,
      deviceAddrs: shown.flatMap((l) => l.addr_info.map((x) => x.local)),
      entries: dp.readVipEntries(),
      attached: dp.attached,
      tc,
      counters: await dp.counters(),
      live: await dp.readLive(),
    };
  } finally {
    dp.close();
  }
}

async function client(a: ClientArgs) {
  const obj = await BpfObject.load(a.objectPath, { pinRoot: a.pinRoot });
  try {
    const m = obj.map('lab_targets');
    for (const t of a.targets) {
      const k = Buffer.alloc(20);
      addrBytes(t.vip).copy(k, 0);
      k.writeUInt16BE(t.port, 16);
      k[18] = t.protocol === 'TCP' ? 6 : 17;
      k[19] = t.family;
      const v = Buffer.alloc(36);
      addrBytes(t.real).copy(v, 0);
      addrBytes(t.outerSrc).copy(v, 16);
      v.writeUInt16BE(t.targetPort, 32);
      v[34] = t.mode === 'ipip' ? 1 : 2;
      m.update(k, v);
    }
    const link = obj.program('lab_client_egress').attachTc(a.interface, 'egress', join(a.pinRoot, 'lab_client_link'));
    link.close();
    return { attached: true };
  } finally {
    obj.close();
  }
}

const [role, json] = process.argv.slice(2);
const run = role === 'backend' ? backend(JSON.parse(json!)) : role === 'client' ? client(JSON.parse(json!)) : Promise.reject(new Error(`unknown role ${role}`));
run.then(
  (r) => {
    // be_vips entries carry CLOCK_MONOTONIC stamps (bigint): printed as decimal strings
    process.stdout.write(`${JSON.stringify(r, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v))}\n`);
  },
  (e: Error) => {
    process.stderr.write(`${e.stack ?? e}\n`);
    process.exit(1);
  },
);
