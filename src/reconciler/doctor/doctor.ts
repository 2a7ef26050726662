// Preflight checks of a node (`gitlb doctor`): can `gitlb run` work here? Each check reports ok, warn or fail with
// one line. Nothing is attached or written: BPF objects are loaded (their maps pinned in a scratch directory that is
// removed again) and closed, Git is fetched into a temporary cache.
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { release } from 'node:os';
import { dirname, join } from 'node:path';
import { runFile } from '../host/run-file.js';
import { sharedSecretProblem } from '../secrets/secret-file.js';
import { loadCredentials, redactUrl } from '../source/credentials.js';
import { isUrl, openRemote } from '../source/git-remote.js';
import { readRevisionFiles } from '../source/git-objects.js';
import { parseConfig } from '../../render/config/index.js';
import { makeTempDir, removeTempDir } from '../temp/temp-dirs.js';
import { netnsExecPinProblem } from '../../bpf/bpffs.js';
import type { ConfigModel } from '../../render/model.js';
import { readLocalState } from '../state/local-state.js';
import { loadTrustFile } from '../verify/load.js';
import { DEFAULT_PEER_PORT, loadPeerKeyFile, loadPeerSecretFile, peerKeyBlob } from '../peer/index.js';
import { DEFAULT_METRICS_LISTEN } from '../metrics/index.js';
import { parseListen } from '../triggers/webhook.js';
import { trustPosture, type PostureFacts } from './posture.js';
import { errorCode } from '../../errors.js';
import { judgeKernel } from './kernel-minimum.js';

export type CheckResult = { level: 'ok' | 'warn' | 'fail'; name: string; detail: string };

export interface DoctorOptions extends PostureOptions {
  interface?: string;
  pinRoot: string;
  repo?: string;
  branch: string;
  node?: string;
  configPath: string;
  credentialsFile?: string;
  webhookSecretFile?: string;
  env: NodeJS.ProcessEnv;
  gitTimeoutMs: number;
}

/** The trust posture's inputs: the options `gitlb run` gets (posture.ts), as `gitlb doctor` takes them too. */
export interface PostureOptions {
  cacheDir?: string;
  trust?: string;
  trustFrom?: string;
  role?: 'lb' | 'backend';
  /** ADDR:PORT or 'off'; default DEFAULT_METRICS_LISTEN, as in gitlb run. */
  metrics?: string;
  webhook?: string;
  peerSecretFile?: string;
  peerKey?: string;
  peerListen?: string;
  peerPort?: number;
}

const ok = (name: string, detail: string): CheckResult => ({ level: 'ok', name, detail });
const warn = (name: string, detail: string): CheckResult => ({ level: 'warn', name, detail });
const fail = (name: string, detail: string): CheckResult => ({ level: 'fail', name, detail });

/** The kernel release against the features a node of this role uses (kernel-minimum.ts: each missing one named). */
function checkKernel(role?: 'lb' | 'backend'): CheckResult {
  const v = judgeKernel(release(), role);
  return { level: v.level, name: 'kernel', detail: v.detail };
}

function checkBtf(): CheckResult {
  return existsSync('/sys/kernel/btf/vmlinux') ? ok('btf', '/sys/kernel/btf/vmlinux present') : warn('btf', 'no /sys/kernel/btf/vmlinux: map layouts are still checked against the objects\' own BTF');
}

function checkBpffs(pinRoot: string): CheckResult {
  const mounts = readFileSync('/proc/self/mounts', 'utf8').split('\n').map((l) => l.split(' '));
  const bpf = mounts.filter((m) => m[2] === 'bpf').map((m) => m[1]!);
  const under = bpf.filter((mp) => pinRoot === mp || pinRoot.startsWith(mp.endsWith('/') ? mp : `${mp}/`)).sort((a, b) => b.length - a.length)[0];
  if (!under) return fail('bpffs', netnsExecPinProblem(pinRoot) ?? `${pinRoot} is not on a bpf filesystem (mount -t bpf bpf /sys/fs/bpf)`);
  return ok('bpffs', `${pinRoot} is on the bpf filesystem mounted at ${under}`);
}

const CAPS: [string, number][] = [
  ['CAP_NET_ADMIN', 12],
  ['CAP_SYS_ADMIN', 21],
  ['CAP_PERFMON', 38],
  ['CAP_BPF', 39],
];

function checkCapabilities(): CheckResult {
  const line = /^CapEff:\s*([0-9a-f]+)$/m.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? '0';
  const eff = BigInt(`0x${line}`);
  const missing = CAPS.filter(([, bit]) => (eff & (1n << BigInt(bit))) === 0n).map(([n]) => n);
  if (missing.length === 0) return ok('capabilities', CAPS.map(([n]) => n).join(' '));
  // All four must be effective. CAP_BPF and CAP_PERFMON exist since 5.8, so this check is why both roles need 5.8
  // (kernel-minimum.ts); the kernel itself would accept CAP_SYS_ADMIN alone for bpf(), but the doctor checks the set
  // the unit grants.
  return fail('capabilities', `missing ${missing.join(' ')} (the systemd unit grants them: deploy/systemd/gitlb.service)`);
}

/** Drivers with native XDP (driver mode) in mainline; others run XDP in generic (skb) mode, correct but slower. */
const NATIVE_XDP_DRIVERS = new Set(['veth', 'virtio_net', 'mlx4_en', 'mlx5_core', 'i40e', 'ice', 'ixgbe', 'ixgbevf', 'igb', 'igc', 'bnxt_en', 'ena', 'nfp', 'qede', 'thunder', 'tun', 'netdevsim', 'hv_netvsc', 'sfc', 'stmmac', 'dpaa2', 'enetc', 'mvneta', 'mvpp2', 'lan966x', 'tsnep', 'xen-netfront', 'bond']);

/** Interface facts from netlink (`ip -j -d link`) and the driver from ethtool: both see this network namespace. */
async function checkInterface(name: string | undefined): Promise<CheckResult[]> {
  if (!name) return [warn('interface', 'no --interface given: not checked')];
  if (!/^[A-Za-z0-9_.-]{1,15}$/.test(name)) return [fail('interface', `'${name}' is not an interface name`)];
  const link = await run('ip', ['-j', '-d', 'link', 'show', 'dev', name]);
  if (link.code !== 0) return [fail('interface', `${name}: no such interface in this network namespace`)];
  const info = (JSON.parse(link.stdout) as { operstate?: string; mtu?: number; linkinfo?: { info_kind?: string } }[])[0] ?? {};
  const state = (info.operstate ?? 'unknown').toLowerCase();
  const mtu = info.mtu ?? 0;
  const driver = /^driver:\s*(\S+)/m.exec((await run('ethtool', ['-i', name])).stdout)?.[1] ?? info.linkinfo?.info_kind ?? '';
  const out = [state === 'up' || state === 'unknown' ? ok('interface', `${name}: ${state}, mtu ${mtu}`) : warn('interface', `${name}: ${state} (XDP attaches, but nothing flows)`)];
  if (NATIVE_XDP_DRIVERS.has(driver)) out.push(ok('xdp mode', `${name}: driver ${driver} supports native XDP (--xdp-mode auto picks it)`));
  else out.push(warn('xdp mode', `${name}: driver ${driver || 'unknown'} has no native XDP: generic (skb) mode, correct but slower`));
  if (mtu > 3498) out.push(warn('xdp mtu', `${name}: mtu ${mtu} is above what native XDP accepts on most drivers (about 3498): generic mode`));
  return out;
}

/**
 * Loads (through the verifier) and closes the BPF objects `gitlb run` would load: the strongest feature test. Their
 * maps are pinned by name, so they go to a scratch directory beside --pin-root that is removed again.
 */
async function checkPrograms(pinRoot: string): Promise<CheckResult[]> {
  const { BpfObject } = await import('../../bpf/libbpf.js');
  const out: CheckResult[] = [];
  for (const [name, role] of [
    ['xdp_lb', 'lb'],
    ['tc_vip_probe', 'lb via-vip'], // healthCheck.via: vip (docs/health.md)
    ['tc_backend', 'backend'],
  ] as const) {
    // bpffs refuses names with a dot: no hidden directory here.
    const scratch = join(dirname(pinRoot), `gitlb-doctor-${process.pid}-${name}`);
    try {
      const obj = await BpfObject.load(name, { pinRoot: scratch, reusePinnedMaps: false });
      obj.close();
      out.push(ok(`bpf ${role}`, `${name}.o loads (verifier accepts every program)`));
    } catch (err) {
      out.push(fail(`bpf ${role}`, `${name}.o does not load: ${(err as Error).message.split('\n')[0]}`));
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  }
  return out;
}

const run = (cmd: string, args: string[]) => runFile(cmd, args, 5000);

async function checkClock(): Promise<CheckResult> {
  // Status times, staleness and the SNAT expiry all read the clock; a clock NTP keeps in step is what they assume.
  const year = new Date().getUTCFullYear();
  if (year < 2024) return fail('clock', `the clock says ${new Date().toISOString()}: set it (NTP)`);
  const r = await run('timedatectl', ['show', '-p', 'NTPSynchronized', '--value']);
  if (r.code !== 0) return warn('clock', `${new Date().toISOString()}; NTP state unknown (no timedatectl)`);
  return r.stdout.trim() === 'yes' ? ok('clock', 'synchronised by NTP') : warn('clock', `${new Date().toISOString()}; not NTP-synchronised (status ages and staleness may be off)`);
}

async function checkGit(o: DoctorOptions): Promise<{ results: CheckResult[]; model: ConfigModel | null }> {
  const results = await gitChecks(o);
  return { results: results.out, model: results.model };
}

async function gitChecks(o: DoctorOptions): Promise<{ out: CheckResult[]; model: ConfigModel | null }> {
  if (!o.repo) return { out: [warn('git', 'no --repo given: remote not checked')], model: null };
  const shown = redactUrl(o.repo);
  const cache = isUrl(o.repo) ? await makeTempDir('gitlb-doctor-') : null;
  try {
    const remote = openRemote(o.repo, { cacheDir: cache ?? '', credentials: loadCredentials({ file: o.credentialsFile, env: o.env }), timeoutMs: o.gitTimeoutMs });
    const head = await remote.fetch(o.branch, { depth: 1 });
    if (!head) return { out: [fail('git', `${shown}: no branch '${o.branch}'`)], model: null };
    const out = [ok('git', `${shown}: branch ${o.branch} at ${head.slice(0, 12)}`)];
    const { model, diagnostics } = parseConfig(await readRevisionFiles(remote.gitdir, head, o.configPath));
    if (!model) out.push(fail('config', `head ${head.slice(0, 12)} does not validate (${diagnostics.filter((d) => d.severity === 'error').length} errors; gitlb validate shows them)`));
    else if (o.node) {
      const n = model.nodes.find((x) => x.metadata.name === o.node);
      if (!n) out.push(fail('config', `head ${head.slice(0, 12)} has no Node '${o.node}'`));
      else if (o.interface && n.spec.interface !== o.interface) out.push(fail('config', `Node '${o.node}' says interface ${n.spec.interface}, not ${o.interface}`));
      else out.push(ok('config', `head ${head.slice(0, 12)} validates; Node '${o.node}' is ${n.spec.role} on ${n.spec.interface}`));
    } else out.push(ok('config', `head ${head.slice(0, 12)} validates (${model.nodes.length} nodes, ${model.services.length} services)`));
    return { out, model: model ?? null };
  } catch (err) {
    // A failure of the remote (FetchFailed, PushFailed) already begins with the (redacted) URL: print it once.
    const msg = (err as Error).message.split('\n')[0]!;
    const code = errorCode(err);
    return { out: [fail('git', code === 'FetchFailed' || code === 'PushFailed' ? msg : `${shown}: ${msg}`)], model: null };
  } finally {
    if (cache) await removeTempDir(cache);
  }
}

/** The webhook secret, judged by the rule `gitlb run --webhook` enforces (too short fails: run would refuse to start). */
export function checkWebhookSecret(o: Pick<DoctorOptions, 'webhookSecretFile' | 'env'>): CheckResult {
  let secret: string;
  let source: string;
  if (o.webhookSecretFile) {
    try {
      secret = readFileSync(o.webhookSecretFile, 'utf8').trim();
    } catch (err) {
      return fail('webhook secret', `${o.webhookSecretFile}: cannot read (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
    }
    if (!secret) return fail('webhook secret', `${o.webhookSecretFile} is empty`);
    source = o.webhookSecretFile;
  } else if (o.env.GITLB_WEBHOOK_SECRET) {
    secret = o.env.GITLB_WEBHOOK_SECRET;
    source = 'GITLB_WEBHOOK_SECRET';
  } else return warn('webhook secret', 'none (GITLB_WEBHOOK_SECRET or --webhook-secret-file): needed only with --webhook; polling works without');
  const short = sharedSecretProblem(secret, 'webhook secret');
  return short ? fail('webhook secret', `${source}: ${short}; gitlb run --webhook refuses it`) : ok('webhook secret', `${source} (${secret.length} characters)`);
}

/** The facts of the trust posture (posture.ts judges them): local state, trust file, peer secret, listeners. */
export async function gatherPosture(o: DoctorOptions, model: ConfigModel | null): Promise<PostureFacts> {
  let trust: PostureFacts['trust'];
  if (o.trust) {
    try {
      const t = await loadTrustFile(o.trust);
      trust = { file: o.trust, keys: t.ssh.length + t.pgp.length };
    } catch (err) {
      trust = { file: o.trust, error: (err as Error).message.split('\n').join(' ') };
    }
  }
  const cacheDir = o.cacheDir ?? (o.node ? join('/var/lib/gitlb', o.node) : undefined);
  let localState: PostureFacts['localState'] = { file: '(no --cache-dir or --node)', kind: 'absent' };
  if (cacheDir) {
    const file = join(cacheDir, 'state.json');
    const s = await readLocalState(file);
    if (!s) localState = { file, kind: 'absent' };
    else if ((o.node && s.node !== o.node) || s.branch !== o.branch) localState = { file, kind: 'foreign', node: s.node, branch: s.branch };
    else localState = { file, kind: 'own', revision: s.appliedRevision, ...(s.verification !== undefined && { policy: s.verification }) };
  }
  const own = o.node ? model?.nodes.find((n) => n.metadata.name === o.node) : undefined;
  let secretProblem: string | undefined;
  if (o.peerSecretFile) {
    try {
      loadPeerSecretFile(o.peerSecretFile);
    } catch (err) {
      secretProblem = (err as Error).message;
    }
  }
  // --peer-key as gitlb run judges it: an ed25519 OpenSSH key that the node's own Node document names.
  let keyProblem: string | undefined;
  if (o.peerKey) {
    try {
      const key = loadPeerKeyFile(o.peerKey);
      if (own && peerKeyBlob(own.spec.peerKey ?? '') !== peerKeyBlob(key.publicLine))
        keyProblem = `--peer-key ${o.peerKey}: its public key is not spec.peerKey of the Node document '${o.node}' at the branch head`;
    } catch (err) {
      keyProblem = (err as Error).message;
    }
  }
  const ownAddress = own?.spec.addresses[0];
  const listen = o.peerListen ? parseListen(o.peerListen, '--peer-listen') : ownAddress ? { host: ownAddress, port: o.peerPort ?? DEFAULT_PEER_PORT } : null;
  const metricsSpec = o.metrics ?? DEFAULT_METRICS_LISTEN;
  const webhookSecret = o.webhook ? checkWebhookSecret(o) : null;
  const v = model?.cluster.spec.verification;
  return {
    ...(trust && { trust }),
    localState,
    ...(o.trustFrom && { trustFrom: o.trustFrom }),
    ...(model && { headVerification: v ? { mode: v.mode, formats: v.formats, signersFile: v.signersFile } : null, headHealthMode: model.cluster.spec.health?.mode ?? 'local' }),
    ...((o.role ?? own?.spec.role) && { role: o.role ?? own!.spec.role }),
    peer: { ...(o.peerSecretFile && { secretFile: o.peerSecretFile }), ...(secretProblem && { secretProblem }),
      ...(o.peerKey && { keyFile: o.peerKey }), ...(keyProblem && { keyProblem }), listen },
    metrics: metricsSpec === 'off' ? 'off' : parseListen(metricsSpec, '--metrics'),
    ...(o.webhook && { webhook: { ...parseListen(o.webhook), ...(webhookSecret && webhookSecret.level !== 'ok' && { secretProblem: webhookSecret.level === 'warn' ? 'no webhook secret (GITLB_WEBHOOK_SECRET or --webhook-secret-file)' : webhookSecret.detail }) } }),
  };
}

export async function runDoctor(o: DoctorOptions): Promise<CheckResult[]> {
  const git = await checkGit(o);
  const own = o.node ? git.model?.nodes.find((n) => n.metadata.name === o.node) : undefined;
  return [
    checkKernel(o.role ?? own?.spec.role),
    checkBtf(),
    checkBpffs(o.pinRoot),
    checkCapabilities(),
    ...(await checkPrograms(o.pinRoot)),
    ...(await checkInterface(o.interface)),
    await checkClock(),
    ...git.results,
    checkWebhookSecret(o),
    ...trustPosture(await gatherPosture(o, git.model)),
  ];
}
