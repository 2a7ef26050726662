// The verdict of `gitlb status`: every node's status file judged against the config branch's head and the clock.
// Pure: the caller reads Git and the clock. A node is a problem when it failed, is behind the branch beyond a grace
// period, has not written status for too long (stale), is missing, was stopped or taken down while the config names
// it, is degraded (reals down, drift repaired; unless ignoreDegraded), or when lb nodes at the same applied revision
// and health view hold different table digests. lb nodes at different revisions (a rolling change) are revision
// skew, not a digest disagreement: a problem only when it outlasts the behind grace. A node whose file predates a
// health flip another lb node reports is named: it has not been able to write to Git since.
import { escapeControl } from '../../render/escape.js';
import { PEER_SILENT_MS } from '../health/peer-wiring.js';
import type { Condition } from './conditions.js';
import type { NodeStatus } from './status-doc.js';
import { digestKey, formatTable, healthView, lbDigestsByService, lbRevisions } from './status-report.js';
import { bgpOfStatus, formatBgpSection, type NodeBgpVerdict } from './bgp-report.js';
import { flowsOfStatus, formatFlowsSection, type NodeFlowsVerdict } from './flows-report.js';
import { describeXdp, readStatusXdp, xdpColumn, type StatusXdp } from './xdp-report.js';

export interface AssessInput {
  statuses: NodeStatus[];
  /** The config branch's head and its committer time, or null when the branch does not exist. */
  head: { oid: string; committedAt: Date } | null;
  /** Nodes the config at the head names (their status files are expected); empty when it cannot be read. */
  configNodes: { name: string; role: 'lb' | 'backend' }[];
  now: Date;
  /** How long a node may serve an older revision than the head before it counts as behind. */
  behindGraceMs: number;
  /** How old a status file may be before its node counts as stale (nodes rewrite it at least every heartbeat). */
  staleAfterMs: number;
  /** Degraded nodes (reals down, drift repaired) are not problems (`gitlb status --ignore-degraded`). */
  ignoreDegraded?: boolean;
}

/**
 * A node writes its status within seconds of a health flip while it can reach Git: one whose file is older than a
 * flip another lb node reported this long ago has not been able to write since (LAGGING_AFTER in docs/reconciler.md).
 */
export const LAG_GRACE_MS = 60_000;

export interface NodeVerdict {
  node: string;
  role: 'lb' | 'backend';
  applied: string | null;
  /** Applied revision differs from the head (for how long, counted from the head's commit time). */
  behind: boolean;
  behindMs: number | null;
  updatedAt: string | null;
  ageMs: number | null;
  stale: boolean;
  /** agree / differ with the lb nodes at its revision and health view; behind: it serves an older revision than the
   * head, which other lb nodes serve (nothing to compare with); not compared: the lb nodes at its revision report other reals down (health views differ). */
  digests: 'agree' | 'differ' | 'behind' | 'not compared' | '-';
  failed: { revision: string; stage?: string; reason?: string } | null;
  /** `service/address` of active reals the node's health checks report down. */
  unhealthy: string[];
  warnings: string[];
  conditions: Condition[];
  missing: boolean;
  /** Its data plane was removed on purpose (`gitlb down`, or decommissioned): it serves nothing. */
  down: boolean;
  /** Its daemon stopped (Ready=False/Stopped, written on SIGTERM): the data plane forwards, nothing reconciles it. */
  stopped: boolean;
  /** Degraded=True (reals down, drift repaired), with its message. */
  degraded: string | null;
  /** Its file predates a health flip another lb node reported over LAG_GRACE_MS ago (why, naming the evidence). */
  lagging: string | null;
  /** lb nodes with BGP: per VIP announced or withdrawn (and why), BIRD's last error (docs/bgp.md). */
  bgp?: NodeBgpVerdict;
  /** lb nodes with --flow-sync: sync per peer, SNAT addresses served for lost peers, a drained node's traffic. */
  flows?: NodeFlowsVerdict;
  /** lb nodes on an interface: the XDP attach mode in use, and whether native fell back to generic. */
  xdp?: StatusXdp;
  /** One line per reason this node makes the exit status non-zero. */
  problems: string[];
}

/** lb nodes serving different revisions: normal while a change rolls out, a problem past the behind grace. */
export interface RevisionSkew {
  revisions: { revision: string; nodes: string[] }[];
  /** Lower bound of how long the skew has lasted: since the latest apply among these nodes (null: unknown). */
  forMs: number | null;
  beyondGrace: boolean;
}

export interface StatusVerdict {
  head: string | null;
  headCommittedAt: string | null;
  ok: boolean;
  /** Digests agree among the lb nodes at each applied revision (nodes at different revisions are not compared). */
  digestsAgree: boolean;
  /** Set when the lb nodes (not taken down) serve more than one revision. */
  revisionSkew: RevisionSkew | null;
  nodes: NodeVerdict[];
  problems: string[];
}

export function formatAge(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.round(s / 60)}m`;
  if (s < 172800) return `${Math.round(s / 3600)}h`;
  return `${Math.round(s / 86400)}d`;
}

function time(iso: unknown): number | null {
  if (typeof iso !== 'string') return null;
  const t = Date.parse(iso);
  return Number.isFinite(t) ? t : null;
}

export function assessStatus(input: AssessInput): StatusVerdict {
  const now = input.now.getTime();
  const digests = lbDigestsByService(input.statuses);
  const lbs = input.statuses.filter((s) => s.role !== 'backend');
  const nodes: NodeVerdict[] = input.statuses.map((s) => {
    const services = Array.isArray(s.services) ? s.services : [];
    const differs = services.some((svc) => (digests.get(digestKey(s.appliedRevision, svc.name, healthView(svc)))?.size ?? 1) > 1);
    const updated = time(s.updatedAt);
    const ageMs = updated === null ? null : now - updated;
    const stale = ageMs === null || ageMs > input.staleAfterMs;
    const behind = input.head !== null && s.appliedRevision !== input.head.oid;
    const behindMs = behind ? Math.max(0, now - input.head!.committedAt.getTime()) : null;
    const failed = s.lastAttempt?.result === 'failed' ? { revision: s.lastAttempt.revision, stage: s.lastAttempt.stage, reason: s.lastAttempt.reason } : null;
    const unhealthy = services.flatMap((svc) =>
      (Array.isArray(svc.reals) ? svc.reals : []).filter((r) => r.state === 'active' && r.healthy === false).map((r) => `${svc.name}/${r.address}`),
    );
    const conditions = Array.isArray(s.conditions) ? s.conditions : [];
    // A node whose data plane was removed on purpose serves nothing, whatever the grace period: a problem while
    // the config still names it (traffic is meant to reach it), the expected state once the config dropped it.
    const ready = conditions.find((c) => c.type === 'Ready');
    const down = (ready?.status === 'False' && ready.reason === 'Decommissioned') || s.lastAttempt?.result === 'decommissioned';
    const stopped = !down && ready?.status === 'False' && ready.reason === 'Stopped';
    const degradedCondition = conditions.find((c) => c.type === 'Degraded' && c.status === 'True');
    const degraded = down || stopped ? null : degradedCondition ? degradedCondition.message : unhealthy.length ? `unhealthy: ${unhealthy.join(', ')}` : null;
    const isLb = s.role !== 'backend';
    // Other lb nodes at this node's revision, and whether any of them reports the same health view of every service.
    const peers = lbs.filter((o) => o.node !== s.node && o.appliedRevision === s.appliedRevision);
    const othersAtHead = input.head !== null && lbs.some((o) => o.node !== s.node && o.appliedRevision === input.head!.oid);
    const sameView = (o: NodeStatus) => services.every((svc) => {
      const theirs = (Array.isArray(o.services) ? o.services : []).find((x) => x.name === svc.name);
      return !theirs || healthView(theirs) === healthView(svc);
    });
    const digestVerdict: NodeVerdict['digests'] = !isLb || services.length === 0
      ? '-'
      : differs
        ? 'differ'
        : peers.length > 0 && !peers.some(sameView)
          ? 'not compared'
          : peers.length === 0 && othersAtHead && behind
            ? 'behind'
            : 'agree';
    const lagging = isLb && !down && !stopped && updated !== null ? lagEvidence(s, updated, peers, now) : null;
    const named = input.configNodes.some((n) => n.name === s.node);
    const problems: string[] = [];
    if (down && named) problems.push(`${s.node}: down (gitlb down): ${ready?.message ?? 'decommissioned'}; the config still names it (remove it from the config, or start gitlb run)`);
    if (stopped && named) problems.push(`${s.node}: stopped: ${ready!.message} (start gitlb run, or remove the node from the config)`);
    if (failed) problems.push(`${s.node}: last attempt failed at ${failed.stage ?? '?'} (${failed.revision.slice(0, 12)}): ${failed.reason ?? ''}`.trim());
    if (behind && !down && !stopped && behindMs! > input.behindGraceMs) {
      // A file older than the head commit: the node has not written since the head exists (it cannot fetch or push).
      const unseen = updated !== null && updated < input.head!.committedAt.getTime()
        ? `; its status was last written before the head was committed: it cannot reach Git (fetch or push), or its daemon hangs` : '';
      problems.push(`${s.node}: behind the branch for ${formatAge(behindMs!)} (applied ${s.appliedRevision?.slice(0, 12) ?? 'nothing'}, head ${input.head!.oid.slice(0, 12)})${unseen}`);
    }
    if (stale && !stopped) problems.push(`${s.node}: stale: ${ageMs === null ? 'no update time' : `last update ${formatAge(ageMs)} ago`} (threshold ${formatAge(input.staleAfterMs)})`);
    if (digestVerdict === 'differ') problems.push(`${s.node}: table digests differ from another lb node's at the same revision (${s.appliedRevision?.slice(0, 12) ?? 'none'})`);
    if (lagging?.problem) problems.push(`${s.node}: ${lagging.text}`);
    if (isLb && named && !down && !stopped) problems.push(...silenceProblems(s, updated, lbs, now, input.staleAfterMs));
    if (degraded && !input.ignoreDegraded) problems.push(`${s.node}: degraded: ${degraded}`);
    const bgp = bgpOfStatus(s);
    const xdp = readStatusXdp(s.xdp);
    const flows = flowsOfStatus(s);
    if (bgp?.birdError) problems.push(`${s.node}: BIRD did not take the announcements: ${bgp.birdError}`);
    return {
      node: s.node,
      role: s.role === 'backend' ? 'backend' : 'lb',
      applied: s.appliedRevision ?? null,
      behind,
      behindMs,
      updatedAt: typeof s.updatedAt === 'string' ? s.updatedAt : null,
      ageMs,
      stale,
      digests: digestVerdict,
      failed,
      unhealthy,
      // health.peers.warning: consensus without peer authentication, or peer messages refused (docs/security.md, Peers).
      warnings: [...(Array.isArray(s.warnings) ? s.warnings.map(String) : []), ...peerWarning(s)],
      conditions,
      missing: false,
      down,
      stopped,
      degraded,
      lagging: lagging?.text ?? null,
      ...(bgp ? { bgp } : {}),
      ...(xdp ? { xdp } : {}),
      ...(flows ? { flows } : {}),
      problems,
    };
  });
  const seen = new Set(nodes.map((n) => n.node));
  for (const n of input.configNodes) {
    if (seen.has(n.name)) continue;
    nodes.push({
      node: n.name,
      role: n.role,
      applied: null,
      behind: input.head !== null,
      behindMs: null,
      updatedAt: null,
      ageMs: null,
      stale: true,
      digests: '-',
      failed: null,
      unhealthy: [],
      warnings: [],
      conditions: [],
      missing: true,
      down: false,
      stopped: false,
      degraded: null,
      lagging: null,
      problems: [`${n.name}: no status written (the config names this node; is its daemon running?)`],
    });
  }
  nodes.sort((a, b) => a.node.localeCompare(b.node));
  const problems = [...new Set(nodes.flatMap((n) => n.problems))]; // one line per problem, however it was found
  const revisionSkew = assessSkew(input, nodes);
  if (revisionSkew?.beyondGrace) {
    // A node behind the head past the grace already names the cause; the skew line would repeat it.
    const skewed = new Set(revisionSkew.revisions.flatMap((r) => r.nodes));
    const behindReported = nodes.some((n) => skewed.has(n.node) && n.behind && n.behindMs !== null && n.behindMs > input.behindGraceMs);
    if (!behindReported) problems.push(`lb nodes serve ${revisionSkew.revisions.length} revisions for ${formatAge(revisionSkew.forMs!)} (beyond the ${formatAge(input.behindGraceMs)} grace): ${skewText(revisionSkew)}`);
  }
  return {
    head: input.head?.oid ?? null,
    headCommittedAt: input.head?.committedAt.toISOString() ?? null,
    ok: problems.length === 0,
    digestsAgree: [...digests.values()].every((d) => d.size <= 1),
    revisionSkew,
    nodes,
    problems,
  };
}

/**
 * Evidence that `s` has not written its status since a health flip another lb node at its revision reported more
 * than LAG_GRACE_MS ago: a real that node has seen down since a time after `s`'s file was written, while `s`'s file
 * still counts it healthy. In consensus mode every lb node follows the same down set and writes within seconds, so
 * this names a node that cannot reach Git (a problem); in local mode the node may simply not see the real down (a
 * note, not a problem).
 */
function lagEvidence(s: NodeStatus, updated: number, peers: NodeStatus[], now: number): { text: string; problem: boolean } | null {
  const ownDown = new Set((Array.isArray(s.services) ? s.services : []).flatMap((svc) =>
    (Array.isArray(svc.reals) ? svc.reals : []).filter((r) => r.healthy === false).map((r) => `${svc.name}/${r.address}`)));
  for (const p of peers) {
    const health = p.health as { mode?: unknown; observations?: Record<string, Record<string, { up?: unknown; since?: unknown }>> } | undefined;
    const observations = health && typeof health.observations === 'object' && health.observations !== null ? health.observations : {};
    for (const [service, reals] of Object.entries(observations)) {
      if (typeof reals !== 'object' || reals === null) continue;
      for (const [address, o] of Object.entries(reals)) {
        const since = time(o?.since);
        if (o?.up !== false || since === null || ownDown.has(`${service}/${address}`)) continue;
        if (since <= updated || now - since <= LAG_GRACE_MS) continue;
        const consensus = health?.mode === 'consensus';
        const text = `has not written its status since ${p.node} saw ${service}/${address} down ${formatAge(now - since)} ago ` +
          `(its file is ${formatAge(now - updated)} old): ${s.node} cannot reach Git${consensus ? '' : ', or does not see that real down (local health mode)'}`;
        return { text, problem: consensus };
      }
    }
  }
  return null;
}

/**
 * lb nodes (not taken down) at more than one applied revision. How long: at least since the latest apply among
 * them (the set of revisions has not changed since), compared with the behind grace.
 */
function assessSkew(input: AssessInput, nodes: NodeVerdict[]): RevisionSkew | null {
  const down = new Set(nodes.filter((n) => n.down).map((n) => n.node));
  const lbs = input.statuses.filter((s) => s.role !== 'backend' && !down.has(s.node));
  const revisions = lbRevisions(lbs);
  if (revisions.length < 2) return null;
  const applied = lbs.map((s) => time(s.appliedAt)).filter((t): t is number => t !== null);
  const forMs = applied.length ? Math.max(0, input.now.getTime() - Math.max(...applied)) : null;
  return { revisions, forMs, beyondGrace: forMs !== null && forMs > input.behindGraceMs };
}

function skewText(skew: RevisionSkew): string {
  return skew.revisions.map((r) => `${r.nodes.join(', ')} at ${r.revision.slice(0, 12)}`).join('; ');
}

function readyText(conditions: Condition[]): string {
  const ready = conditions.find((c) => c.type === 'Ready');
  return ready ? `${ready.status}/${ready.reason}` : '-';
}

/** Agreement needs two lb nodes with tables: with fewer there is nothing to compare, and saying "agree" would claim
 * a check that did not happen. */
function digestsText(v: StatusVerdict): string {
  const reporting = v.nodes.filter((n) => n.digests !== '-').map((n) => n.node);
  const compared = v.nodes.filter((n) => n.digests === 'agree' || n.digests === 'differ').map((n) => n.node);
  if (reporting.length === 0) return 'table digests: nothing to compare (no lb node has written a status with tables)';
  if (reporting.length === 1) return `table digests: nothing to compare (only ${reporting[0]} reports tables)`;
  if (compared.length < 2) return 'table digests: nothing comparable';
  return `table digests ${v.digestsAgree ? 'agree across nodes' : 'DIFFER across nodes'}`;
}

/** The table, the details below it (unhealthy reals, warnings, conditions that are not fine) and the verdict. */
export function formatStatusVerdict(v: StatusVerdict, now: Date): string {
  const rows = v.nodes.map((n) => [
    n.node,
    n.role,
    xdpColumn(n.xdp),
    n.missing ? '(no status)' : n.applied ? n.applied.slice(0, 12) : '(none)',
    n.missing ? '-' : n.down ? 'DOWN' : n.stopped ? 'STOPPED' : n.behind ? `behind ${n.behindMs === null ? '' : formatAge(n.behindMs)}`.trim() : 'head',
    n.ageMs === null ? (n.missing ? '-' : 'STALE (never)') : `${n.stale ? 'STALE ' : ''}${formatAge(n.ageMs)} ago`,
    n.digests,
    readyText(n.conditions),
    String(n.unhealthy.length),
    n.failed ? `${n.failed.revision.slice(0, 12)} ${n.failed.stage ?? ''}: ${n.failed.reason ?? ''}`.replace(/\s+/g, ' ') : '',
  ]);
  const out = [formatTable(['NODE', 'ROLE', 'XDP', 'APPLIED', 'BRANCH', 'UPDATED', 'DIGESTS', 'READY', 'UNHEALTHY', 'LAST ERROR'], rows.map((r) => r.map(escapeControl)))];
  const details: string[] = [];
  for (const n of v.nodes) {
    if (n.unhealthy.length) details.push(`${n.node}: unhealthy reals: ${n.unhealthy.join(', ')}`);
    if (n.lagging && !n.problems.some((p) => p.includes(n.lagging!))) details.push(`${n.node}: note: ${n.lagging}`);
    if (n.xdp && (n.xdp.fellBack || n.xdp.forwards === false)) details.push(`${n.node}: ${describeXdp(n.xdp)}`);
    for (const w of n.warnings) details.push(`${n.node}: warning: ${w}`);
    for (const c of n.conditions) {
      const fine = (c.type === 'Ready' && c.status === 'True') || (c.type !== 'Ready' && c.status === 'False');
      // A condition the verdict's problem line already quotes (gitlb down's Ready=False) is not said twice.
      if (!fine && !n.problems.some((p) => c.message && p.includes(c.message))) details.push(`${n.node}: condition ${c.type}=${c.status} ${c.reason}: ${c.message}`);
    }
  }
  const head = v.head ? `head ${v.head.slice(0, 12)}${v.headCommittedAt ? ` (committed ${formatAge(now.getTime() - Date.parse(v.headCommittedAt))} ago)` : ''}` : 'no config branch';
  const digests = v.revisionSkew
    ? `table digests ${v.digestsAgree ? 'agree' : 'DIFFER'} among lb nodes at the same revision; revision skew: ${skewText(v.revisionSkew)}${
        v.revisionSkew.forMs === null ? '' : ` (for ${formatAge(v.revisionSkew.forMs)}${v.revisionSkew.beyondGrace ? ', beyond the grace' : ', within the grace'})`
      }`
    : digestsText(v);
  const unlike = v.nodes.filter((n) => n.digests === 'not compared').map((n) => n.node);
  const notCompared = unlike.length ? `; not compared (other reals down at the same revision): ${unlike.join(', ')}` : '';
  const summary = `${v.nodes.length} node(s); ${head}; ${digests}${notCompared}`;
  const verdict = v.ok ? 'verdict: OK' : `verdict: ${v.problems.length} problem(s)\n${v.problems.map((p) => `  ${escapeControl(p)}`).join('\n')}`;
  // Status files are written by whoever can push the status branch and quote config text (failure reasons): every
  // line built from them is escaped on its own (escape.ts) before the lines are joined, so a field cannot end its
  // line and fake another ('verdict: OK'), move the cursor or read differently (bidi overrides).
  return [...out, ...details.map((d) => escapeControl(d) + '\n'), formatBgpSection(v.nodes), formatFlowsSection(v.nodes), escapeControl(summary) + '\n', verdict + '\n'].join('');
}

/** health.peers.silent of a node's status: the peer lb nodes it has not heard from, and since when (bounded). */
function silentPeersOf(s: NodeStatus): { peer: string; since: number }[] {
  const list = (s as { health?: { peers?: { silent?: unknown } } } | null)?.health?.peers?.silent;
  if (!Array.isArray(list)) return [];
  return list.slice(0, 64).flatMap((x: { peer?: unknown; since?: unknown } | null) => {
    const since = time(x?.since);
    return typeof x?.peer === 'string' && since !== null ? [{ peer: x.peer, since }] : [];
  });
}

/**
 * Other lb nodes (with a fresh status file) that report `s` silent on the peer channel. When `s` has not written its
 * status since, its daemon is gone or the node is cut off: named within seconds (health/peer-wiring.ts,
 * PEER_SILENT_MS, plus one status write), not when its own file goes stale. When `s` still writes, only the
 * channel between them is broken.
 */
function silenceProblems(s: NodeStatus, updated: number | null, lbs: NodeStatus[], now: number, staleAfterMs: number): string[] {
  const out: string[] = [];
  for (const o of lbs) {
    const theirs = time(o.updatedAt);
    if (o.node === s.node || theirs === null || now - theirs > staleAfterMs) continue;
    const claim = silentPeersOf(o).find((p) => p.peer === s.node);
    if (!claim) continue;
    const since = `${new Date(claim.since).toISOString()} (${formatAge(Math.max(0, now - claim.since))} ago)`;
    // A write within PEER_SILENT_MS of the last answer is the node's last breath, not proof of life: its daemon
    // may have written and been killed before the next poll (a race e2e met). Only a later write shows it alive.
    out.push(updated === null || updated <= claim.since + PEER_SILENT_MS
      ? `${s.node}: silent on the peer channel to ${o.node} since ${since}, and has not written its status since: its daemon stopped or was killed, or the node is cut off`
      : `${s.node}: ${o.node} has not heard it on the peer channel since ${since}, though it still writes its status: the channel between them is broken (addresses, firewall, keys)`);
  }
  return out;
}

/** The peer channel's warning in a node's status (health.peers.warning), if any. */
function peerWarning(s: unknown): string[] {
  const w = (s as { health?: { peers?: { warning?: unknown } } } | null)?.health?.peers?.warning;
  return typeof w === 'string' && w ? [`peers: ${w}`] : [];
}
