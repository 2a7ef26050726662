// Presentation of a Plan: plain text for terminals, Markdown for pull-request comments, stable JSON for tools.
import type { Plan, PlanDiagnostic, RealPlan, ServicePlan } from './plan.js';
import { sortedJsonValue } from './desired.js';
import { formatDiagnostic } from './config/diagnostics.js';

const pct = (x: number) => `${(x * 100).toFixed(2)}%`;
const signedPoints = (x: number) => `${x >= 0 ? '+' : ''}${(x * 100).toFixed(2)}`;

function diagnosticLine(d: PlanDiagnostic): string {
  return formatDiagnostic(d);
}

function counts(plan: Plan): string {
  const by = (k: string) => plan.services.filter((s) => s.change === k).length;
  return `${by('changed')} changed, ${by('added')} added, ${by('removed')} removed, ${plan.unchangedServices} unchanged`;
}

function realChangeText(r: RealPlan): string | null {
  if (r.change === 'added') return `real ${r.address} added (weight ${r.after!.weight}, ${r.after!.state})`;
  if (r.change === 'removed') {
    // the connection table no longer finds a removed real: its open connections land elsewhere and are reset
    const cut = r.before!.state === 'drain' ? '' : '; its open connections break: set state: drain first to let them finish';
    return `real ${r.address} removed (was weight ${r.before!.weight}, ${r.before!.state})${cut}`;
  }
  if (r.change !== 'changed') return null;
  const parts: string[] = [];
  if (r.before!.weight !== r.after!.weight) parts.push(`weight ${r.before!.weight} -> ${r.after!.weight}`);
  if (r.before!.state !== r.after!.state) parts.push(`state ${r.before!.state} -> ${r.after!.state}`);
  return `real ${r.address}: ${parts.join(', ')}`;
}

/** Reals whose share of the table changes, biggest movement first (then by address, for stable output). */
export function shareMovers(s: ServicePlan): { gaining: RealPlan[]; losing: RealPlan[] } {
  const delta = (r: RealPlan) => r.shareAfter - r.shareBefore;
  const order = (a: RealPlan, b: RealPlan) => Math.abs(delta(b)) - Math.abs(delta(a)) || (a.address < b.address ? -1 : 1);
  return {
    // An added service has no base table, so entriesBefore is 0 and its reals with entries count as gaining here.
    gaining: s.reals.filter((r) => r.entriesAfter > r.entriesBefore).sort(order),
    losing: s.reals.filter((r) => r.entriesAfter < r.entriesBefore).sort(order),
  };
}

function headline(plan: Plan): string {
  if (!plan.headValid) return 'gitlb plan: the head revision does not validate';
  if (!plan.changed) return `gitlb plan: no changes (${plan.unchangedServices} services unchanged)`;
  return `gitlb plan: services ${counts(plan)}`;
}

function tableLine(s: ServicePlan): string {
  if (s.change === 'added') return `new table of ${s.tableSizeAfter} entries`;
  if (s.change === 'removed') return `table removed: all new connections to ${s.vip} are refused`;
  return `${pct(s.movedShare)} of table entries change backend (${s.movedEntries} of ${s.tableSizeAfter}): the share of new connections that land on a different real`;
}

export function formatPlanText(plan: Plan): string {
  const out: string[] = [headline(plan)];
  if (plan.headValid) {
    if (!plan.baseValid) out.push('base revision has no valid config: everything counts as added');
    for (const c of plan.cluster) out.push(`cluster ${c.field}: ${c.before} -> ${c.after}`);
    for (const n of plan.nodes) {
      out.push(`node ${n.name}: ${n.change}`);
      for (const f of n.fields) out.push(`  ${f.field}: ${f.before} -> ${f.after}`);
    }
    for (const s of plan.services) {
      out.push(`service ${s.name} (${s.vip}): ${s.change}`);
      for (const f of s.fields) out.push(`  ${f.field}: ${f.before} -> ${f.after}`);
      for (const r of s.reals) {
        const line = realChangeText(r);
        if (line) out.push(`  ${line}`);
      }
      out.push(`  ${tableLine(s)}`);
      for (const e of s.explanations) out.push(`  why: ${e}`);
      for (const w of s.warnings) out.push(`  warning: ${w}`);
      const { gaining, losing } = shareMovers(s);
      for (const r of gaining) out.push(`  gains: ${r.address} ${pct(r.shareBefore)} -> ${pct(r.shareAfter)} (${signedPoints(r.shareAfter - r.shareBefore)} points)`);
      for (const r of losing) out.push(`  loses: ${r.address} ${pct(r.shareBefore)} -> ${pct(r.shareAfter)} (${signedPoints(r.shareAfter - r.shareBefore)} points)`);
    }
  }
  const errors = plan.diagnostics.filter((d) => d.severity !== 'warning'); // errors with their notes
  const warnings = plan.diagnostics.filter((d) => d.severity === 'warning');
  if (errors.length) out.push('errors in head:', ...errors.map((d) => `  ${diagnosticLine(d)}`));
  if (warnings.length) out.push('warnings in head:', ...warnings.map((d) => `  ${diagnosticLine(d)}`));
  return out.join('\n') + '\n';
}

const md = (text: string) => text.replace(/([|`*_\\<>])/g, '\\$1');
const code = (text: string) => '`' + text.replace(/`/g, "'") + '`';

export function formatPlanMarkdown(plan: Plan): string {
  const out: string[] = [`### ${md(headline(plan))}`, ''];
  if (plan.headValid) {
    if (!plan.baseValid) out.push('> The base revision has no valid config: everything counts as added.', '');
    if (plan.cluster.length) {
      out.push('**Cluster**', '');
      for (const c of plan.cluster) out.push(`- ${code(c.field)}: ${code(c.before)} → ${code(c.after)}`);
      out.push('');
    }
    if (plan.nodes.length) {
      out.push('**Nodes**', '');
      for (const n of plan.nodes) {
        const fields = n.fields.map((f) => `${code(f.field)}: ${code(f.before)} → ${code(f.after)}`).join('; ');
        out.push(`- ${code(n.name)} ${n.change}${fields ? `: ${fields}` : ''}`);
      }
      out.push('');
    }
    if (plan.services.length) {
      out.push('| service | VIP | change | new connections moved |', '|---|---|---|---:|');
      for (const s of plan.services) {
        const moved = s.change === 'changed' ? pct(s.movedShare) : s.change === 'removed' ? '100% (refused)' : '-';
        out.push(`| ${code(s.name)} | ${code(s.vip)} | ${s.change} | ${moved} |`);
      }
      out.push('');
    }
    for (const s of plan.services) {
      out.push(`#### ${md(s.name)} (${s.change})`, '');
      for (const f of s.fields) out.push(`- ${code(f.field)}: ${code(f.before)} → ${code(f.after)}`);
      for (const r of s.reals) {
        const line = realChangeText(r);
        if (line) out.push(`- ${md(line.replaceAll(' -> ', ' → '))}`);
      }
      out.push(`- ${md(tableLine(s))}`);
      for (const e of s.explanations) out.push(`- ${md(e.replaceAll(' -> ', ' → '))}`);
      for (const w of s.warnings) out.push(`- **warning**: ${md(w.replaceAll(' -> ', ' → '))}`);
      out.push('');
      const { gaining, losing } = shareMovers(s);
      if (gaining.length || losing.length) {
        out.push('| real | share before | share after | Δ points |', '|---|---:|---:|---:|');
        for (const r of [...gaining, ...losing]) {
          out.push(`| ${code(r.address)} | ${pct(r.shareBefore)} | ${pct(r.shareAfter)} | ${signedPoints(r.shareAfter - r.shareBefore)} |`);
        }
        out.push('');
      }
    }
  }
  const errors = plan.diagnostics.filter((d) => d.severity !== 'warning'); // errors with their notes
  const warnings = plan.diagnostics.filter((d) => d.severity === 'warning');
  if (errors.length) out.push('**Errors in head**', '', ...errors.map((d) => `- ${code(diagnosticLine(d))}`), '');
  if (warnings.length) out.push('**Warnings in head**', '', ...warnings.map((d) => `- ${code(diagnosticLine(d))}`), '');
  return out.join('\n').replace(/\n+$/, '') + '\n';
}

export function planToJson(plan: Plan): string {
  return JSON.stringify(sortedJsonValue(plan), null, 2) + '\n';
}
