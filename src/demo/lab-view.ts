// What the demo and the end-to-end tests need to know about a running lab, in one place: namespaces, the
// client addresses, backend names by address, and the expected share of each backend per service (from render).
import { readConfigDir } from '../reconciler/source/read-dir.js';
import { parseConfig, formatDiagnostic } from '../render/config/index.js';
import { renderDesiredState } from '../render/desired.js';
import type { ConfigModel } from '../render/model.js';
import type { DesiredState } from '../render/state.js';
import { labNs, type LabState } from '../lab/lab.js';

export interface LabView {
  state: LabState;
  clientNs: string;
  /** The router sits on the lb/backend segment and reaches the lab Git server; operator commands run there. */
  routerNs: string;
  clientsV4: string[];
  clientsV6: string[];
  lbNodes: string[];
  backendNodes: string[];
  /** Backend node name by any of its addresses. */
  nodeByAddress: Map<string, string>;
}

export function labView(state: LabState): LabView {
  const nodeByAddress = new Map<string, string>();
  for (const n of state.plan.nodes) for (const a of n.addresses) nodeByAddress.set(a, n.name);
  return {
    state,
    clientNs: labNs(state, 'client'),
    routerNs: labNs(state, 'router'),
    clientsV4: state.plan.client.v4,
    clientsV6: state.plan.client.v6,
    lbNodes: state.plan.nodes.filter((n) => n.role === 'lb').map((n) => n.name),
    backendNodes: state.plan.nodes.filter((n) => n.role === 'backend').map((n) => n.name),
    nodeByAddress,
  };
}

export async function loadModel(dir: string): Promise<ConfigModel> {
  const { model, diagnostics } = parseConfig(await readConfigDir(dir));
  if (!model) throw new Error(`config in ${dir} does not validate:\n${diagnostics.map(formatDiagnostic).join('\n')}`);
  return model;
}

/** Share of new flows each backend node should get for `service` (its Maglev entries / table size). */
export function expectedShares(desired: DesiredState, service: string, view: LabView): Record<string, number> {
  const svc = desired.services.find((s) => s.name === service);
  if (!svc) throw new Error(`service ${service} is not rendered for node ${desired.node}`);
  const out: Record<string, number> = {};
  for (const r of svc.reals) {
    if (r.entries === 0) continue;
    const name = view.nodeByAddress.get(r.address) ?? r.address;
    out[name] = (out[name] ?? 0) + r.entries / svc.tableSize;
  }
  return out;
}

export function renderFor(model: ConfigModel, node: string): DesiredState {
  return renderDesiredState(model, node);
}
