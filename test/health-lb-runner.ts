// A minimal health-aware lb node for the end-to-end health test, run inside an lb namespace:
//   node --import tsx test/health-lb-runner.ts <configDir> <node> <interface> <pinRoot>
// Loads the config, opens the real XDP data plane, checks the reals with a HealthService, and re-renders and
// applies on every health flip (what the daemon does, without Git). JSON lines out: change, applied.
import { rmSync } from 'node:fs';
import { loadConfigModel } from '../src/lab/load-config.js';
import { openLbDataPlane } from '../src/bpf/dataplane/index.js';
import { renderDesiredState } from '../src/render/desired.js';
import { HealthService } from '../src/reconciler/health/index.js';
import { vipProbeRouter } from '../src/reconciler/health/vip-router.js';
import { applyTo } from './lib/converge.js';

const [configDir, node, iface, pinRoot] = process.argv.slice(2) as [string, string, string, string];
const out = (o: unknown) => process.stdout.write(JSON.stringify(o) + '\n');

const model = await loadConfigModel(configDir);
const dp = await openLbDataPlane({ pinRoot, interface: iface, xdpMode: 'generic' });
// as in the daemon: via: vip checks (the default for dsr l2/ipip) leave through the TC programs on the interface,
// attached on first use
const vipRouter = vipProbeRouter(() => iface);
const health = new HealthService({ node, vipRouter, log: { warn: (m) => out({ type: 'warn', m }) } });

let applying: Promise<void> = Promise.resolve();
const apply = (why: string) => {
  applying = applying.then(async () => {
    const desired = renderDesiredState(model, node, health.view());
    const report = await applyTo(dp, desired);
    out({
      type: 'applied', why, at: Date.now(), report,
      services: desired.services.map((s) => ({ name: s.name, digest: s.digest, reals: s.reals.map((r) => `${r.address}:${r.healthy ? 'up' : 'down'}:${r.entries}`) })),
    });
  }).catch((e) => out({ type: 'error', message: String((e as Error).stack ?? e) }));
  return applying;
};

health.onChange((e) => {
  out({ type: 'change', ...e, observedAt: Date.now() });
  void apply(`${e.service}/${e.address} ${e.from} -> ${e.to}`);
});
health.update(model);
await apply('start');

const shutdown = async () => {
  await health.checker.stop();
  vipRouter.close();
  await applying;
  dp.close();
  rmSync(pinRoot, { recursive: true, force: true }); // the pins (program link, maps) are this test's only
  process.exit(0);
};
process.on('SIGTERM', () => void shutdown());
process.stdin.on('end', () => void shutdown());
process.stdin.resume();
