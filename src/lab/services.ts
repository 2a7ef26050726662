// The services a lab runs besides the gitlb daemons: its Git server, the backends' HTTP/UDP servers, BIRD (and FRR
// on the router), Prometheus. Each is recorded in the state file as it starts.
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { waitForPort } from './netns.js';
import { describeProcess, isAlive, nodeScriptArgv, spawnDetached, type LabProcess } from './processes.js';
import { birdc, routerProtocolName, spawnBird, waitForBird, writeBirdConfigs } from './bird.js';
import { GIT_REPO_NAME } from './topology.js';
import { frrSessions, spawnRouterFrr, vtyshConfigure, waitForFrr, writeFrrConfigs } from './frr.js';
import { metricsAddress, prometheusAvailable, startPrometheus } from './prometheus.js';
import { backendHaproxyConfig } from './servers/backend-haproxy.js';
import { fullNs, labNs, PROJECT_ROOT, writeLabState, type LabState } from './state.js';

/** Starts the Git server in the lab's git namespace; resolves when it listens. */
export async function startGitServer(state: LabState, repo: { root: string; bare: string; work: string }): Promise<void> {
  const { ns: short, address, port } = state.plan.git;
  const url = `http://${address}:${port}`;
  state.git = { ...repo, url, repoUrl: `${url}/${GIT_REPO_NAME}` };
  const argv = nodeScriptArgv('servers/git-server', ['--root', repo.root, '--host', address, '--port', String(port)]);
  state.processes.push(spawnDetached('git-server', fullNs(state, short), argv, join(state.stateDir, 'logs', 'git-server.log'), { cwd: PROJECT_ROOT }));
  writeLabState(state);
  await waitForPort(fullNs(state, short), port, 'tcp', { timeoutMs: 30_000 });
}

function describeLabProcess(state: LabState, role: LabProcess['role'], node: string): string {
  // every match: with backendHttp 'haproxy' a backend has two servers (Node for UDP, haproxy for HTTP)
  return state.processes.filter((x) => x.role === role && x.node === node).map((p) => describeProcess(p)).join('');
}

/** Starts every backend's HTTP/UDP server (HTTP by Node or haproxy); resolves when all their ports are bound. */
export async function startBackendServers(state: LabState, http: 'node' | 'haproxy'): Promise<void> {
  for (const s of state.plan.servers) {
    const nodeTcp = http === 'node' ? s.tcpPorts : [];
    const args = ['--name', s.node, ...nodeTcp.flatMap((p) => ['--tcp', String(p)]), ...s.udpPorts.flatMap((p) => ['--udp', String(p)])];
    const argv = nodeScriptArgv('servers/backend', args);
    const logFile = join(state.stateDir, 'logs', `backend-${s.node}.log`);
    state.processes.push(spawnDetached('backend-server', fullNs(state, s.ns), argv, logFile, { node: s.node, cwd: PROJECT_ROOT }));
    if (http === 'haproxy' && s.tcpPorts.length) {
      const cfg = join(state.stateDir, `backend-${s.node}.haproxy.cfg`);
      writeFileSync(cfg, backendHaproxyConfig(s.node, s.tcpPorts));
      // -db: stay in the foreground, so the recorded process is haproxy itself and `lab down` stops it
      const hlog = join(state.stateDir, 'logs', `backend-${s.node}-haproxy.log`);
      state.processes.push(spawnDetached('backend-server', fullNs(state, s.ns), ['haproxy', '-db', '-f', cfg], hlog, { node: s.node }));
    }
  }
  writeLabState(state);
  await Promise.all(
    state.plan.servers.map(async (s) => {
      try {
        for (const p of s.tcpPorts) await waitForPort(fullNs(state, s.ns), p, 'tcp', { timeoutMs: 30_000 });
        for (const p of s.udpPorts) await waitForPort(fullNs(state, s.ns), p, 'udp', { timeoutMs: 30_000 });
      } catch (e) {
        throw new Error(`backend server ${s.node}: ${(e as Error).message}${describeLabProcess(state, 'backend-server', s.node)}`);
      }
    }),
  );
}

/**
 * Starts BIRD on every lb node with BGP settings and the router's daemon (BIRD, or FRR's zebra and bgpd); resolves
 * when each answers on its socket.
 */
export async function startBirds(state: LabState, log: (s: string) => void): Promise<void> {
  const b = state.plan.bird!;
  const frr = b.router === 'frr';
  writeBirdConfigs(state.stateDir, b, { router: !frr });
  const routerNs = fullNs(state, state.plan.router.ns);
  const who = [...(frr ? [] : [{ name: 'router', ns: routerNs }]), ...b.lbs.map((l) => ({ name: l.node, ns: fullNs(state, l.ns) }))];
  for (const w of who) state.processes.push(spawnBird(state.stateDir, w.name, w.ns));
  writeLabState(state);
  if (frr) {
    writeFrrConfigs(state.stateDir, b);
    try {
      state.processes.push(...(await spawnRouterFrr(state.stateDir, routerNs)));
    } finally {
      writeLabState(state);
    }
    await waitForFrr(state.stateDir, 'bgpd');
  }
  await Promise.all(who.map((w) => waitForBird(state.stateDir, w.name)));
  log(`${frr ? 'FRR (zebra, bgpd) on the router, ' : ''}BIRD running on ${who.map((w) => w.name).join(', ')}: ${b.sessions.length} BGP sessions to the router (AS ${b.routerAsn})`);
}

/** The router's BGP sessions (FRR labs): lb address -> state, from bgpd. */
export async function routerSessions(state: LabState): Promise<Record<string, string>> {
  if (state.plan.bird?.router !== 'frr') throw new Error('routerSessions: the lab router does not run FRR');
  return frrSessions(state.stateDir);
}

/**
 * Shuts the router's BGP sessions to lb node `node` (`up` false) or opens them again, at the router's daemon (BIRD:
 * `disable`/`enable` of its protocols; FRR: `neighbor ... shutdown`): the router drops or takes that node's paths
 * whatever the node itself does, as an upstream operator would (a restarted lb daemon reloading its BIRD cannot undo
 * it). Throws when the daemon refuses.
 */
export async function setRouterSessions(state: LabState, node: string, up: boolean): Promise<void> {
  const b = state.plan.bird;
  if (!b) throw new Error('setRouterSessions: the lab routes statically (no BGP)');
  const sessions = b.sessions.filter((s) => s.node === node);
  if (!sessions.length) throw new Error(`setRouterSessions: no BGP session to ${node}`);
  if (b.router === 'frr') {
    const r = await vtyshConfigure(state.stateDir, 'bgpd', [`router bgp ${b.routerAsn}`, ...sessions.map((s) => `${up ? 'no ' : ''}neighbor ${s.lbAddress} shutdown`)]);
    if (r.code !== 0 || r.stdout.trim()) throw new Error(`vtysh neighbor shutdown: ${(r.stdout + r.stderr).trim() || `exit ${r.code}`}`);
    return;
  }
  for (const s of sessions) {
    const r = await birdc(state.stateDir, 'router', [up ? 'enable' : 'disable', routerProtocolName(s.node, s.family)]);
    if (r.code !== 0 || !/abled/.test(r.stdout)) throw new Error(`birdc ${up ? 'enable' : 'disable'} ${routerProtocolName(s.node, s.family)}: ${(r.stdout + r.stderr).trim()}`);
  }
}

/**
 * Starts BIRD again for `who` (`router` or an lb node) after it was stopped or killed, like a supervisor would.
 * Resolves when it answers on its socket.
 */
export async function restartBird(state: LabState, who: string): Promise<LabProcess> {
  if (who === 'router' && state.plan.bird?.router === 'frr') throw new Error('restartBird: the lab router runs FRR, not BIRD');
  const ns = who === 'router' ? fullNs(state, state.plan.router.ns) : labNs(state, who);
  const proc = spawnBird(state.stateDir, who, ns);
  state.processes.push(proc);
  writeLabState(state);
  await waitForBird(state.stateDir, who);
  return proc;
}

/** Prometheus in the router namespace, scraping every daemon (once per lab; skipped when not installed). */
export async function startLabPrometheus(state: LabState, log: (line: string) => void): Promise<void> {
  if (state.processes.some((p) => p.role === 'prometheus' && isAlive(p))) return;
  if (!prometheusAvailable()) {
    log('prometheus is not installed (make deps installs it): the lab runs without one');
    return;
  }
  const targets = state.plan.nodes.flatMap((n) => {
    const address = metricsAddress(n.addresses);
    return address ? [{ node: n.name, role: n.role, address }] : [];
  });
  const rules = join(PROJECT_ROOT, 'deploy', 'prometheus', 'gitlb-rules.yml');
  const proc = await startPrometheus({ ns: fullNs(state, state.plan.router.ns), dir: join(state.stateDir, 'prometheus'), targets,
    rulesFile: existsSync(rules) ? rules : null });
  state.processes.push(proc);
  writeLabState(state);
  log(`prometheus in ${fullNs(state, state.plan.router.ns)} on http://127.0.0.1:9090, scraping ${targets.length} daemons every 2 s`);
}
