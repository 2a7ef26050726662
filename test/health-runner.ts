// Runs a real HealthChecker inside an lb namespace, as the lb daemon would: `node --import tsx test/health-runner.ts
// <maxInFlight> [vipInterface]`, model JSON on the first stdin line. Writes JSON lines: {"type":"ready"}, then {"type":"change",...}
// for every state flip; answers a stdin line `snapshot` with {"type":"snapshot", ...} (and its own reply latency),
// `suspect <address>` with {"type":"suspected","pulled":n} (checker.suspect, as the passive poll calls it).
import { createInterface } from 'node:readline';
import { HealthChecker, HealthService } from '../src/reconciler/health/index.js';
import { renderDesiredState } from '../src/render/desired.js';
import { vipProbeRouter } from '../src/reconciler/health/vip-router.js';
import type { ConfigModel } from '../src/render/model.js';

const maxInFlight = Number(process.argv[2] ?? 64);
// via: vip checks leave through the daemon's own router (TC egress program on this interface), as in the daemon
const vipInterface = process.argv[3];
const vipRouter = vipInterface ? vipProbeRouter(() => vipInterface) : undefined;
const checker = new HealthChecker({ maxInFlight, vipRouter });
const out = (o: unknown) => process.stdout.write(JSON.stringify(o) + '\n');
checker.onChange((e) => out({ type: 'change', ...e, observedAt: Date.now() }));

let configured = false;
const lines = createInterface({ input: process.stdin });
lines.on('line', (line) => {
  if (!configured) {
    checker.update(JSON.parse(line) as ConfigModel);
    checker.start();
    configured = true;
    out({ type: 'ready' });
    return;
  }
  if (line.startsWith('judge ')) {
    // {before: model, after: model, share}: settle on `before`, render it, then judge `after` with a HealthService.
    const { before, after, share } = JSON.parse(line.slice(6)) as { before: ConfigModel; after: ConfigModel; share: number };
    const svc = new HealthService({ node: 'lb1' });
    void (async () => {
      svc.update(before);
      await svc.settled(before, 5000);
      const prev = renderDesiredState(before, 'lb1', svc.view());
      const gate = svc.postApplyGate({ maxCapacityLossShare: share });
      const started = Date.now();
      const result = await gate({ revision: 'test', before: prev, after: prev, model: after });
      await svc.checker.stop();
      out({ type: 'judge', ...result, tookMs: Date.now() - started });
    })();
    return;
  }
  if (line.startsWith('update ')) {
    checker.update(JSON.parse(line.slice(7)) as ConfigModel);
    out({ type: 'updated' });
    return;
  }
  if (line.startsWith('suspect ')) {
    // passive evidence against a real, as the daemon's passive poll hands it over
    out({ type: 'suspected', pulled: checker.suspect(line.slice(8)) });
    return;
  }
  if (line === 'snapshot') {
    const asked = performance.now();
    const snap = checker.snapshot();
    out({ type: 'snapshot', snapshot: snap, observations: checker.observations(), replyMs: performance.now() - asked });
  }
});
const exit = () => void checker.stop().then(() => (vipRouter?.close(), process.exit(0)));
lines.on('close', exit);
process.on('SIGTERM', exit);
// The checker's timers are unref'd; this keeps the process alive like the daemon's own loop would.
setInterval(() => {}, 1 << 30);
