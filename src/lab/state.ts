// The lab's state file (`<state-dir>/state.json`): everything `gitlb lab up` made, recorded before it is made, so
// `down` removes exactly that; and the names derived from it (namespaces by the lab's prefix).
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isAlive, type LabProcess } from './processes.js';
import type { LabPlan } from './topology.js';

export const DEFAULT_STATE_DIR = '/run/gitlb-lab';
export const PROJECT_ROOT = resolve(fileURLToPath(new URL('../../', import.meta.url)));
/** Lab daemons pin under `<this>/<lab prefix>`; the same bpffs directory `gitlb run` uses by default. */
export const LAB_PIN_PARENT = '/sys/fs/bpf/gitlb';
export const DEFAULT_CONFIG_DIR = join(PROJECT_ROOT, 'sample-config-repo');

export interface DaemonReport {
  node: string;
  started: boolean;
  pid?: number;
  reason: string;
}

export interface LabState {
  version: 1;
  /** `glb<anchorPid>-`: every namespace of this lab starts with it. */
  prefix: string;
  stateDir: string;
  configDir: string;
  createdAt: string;
  /** True once `up` finished; a false value means `up` failed or is still running. */
  complete: boolean;
  plan: LabPlan;
  /** Full names of the namespaces created, in creation order. */
  namespaces: string[];
  processes: LabProcess[];
  git: { root: string; bare: string; work: string; url: string; repoUrl: string } | null;
  daemons: DaemonReport[];
  /** bpffs directories handed to daemons as their pin root; removed on `down`. */
  pinRoots: string[];
}

export function statePath(stateDir = DEFAULT_STATE_DIR): string {
  return join(stateDir, 'state.json');
}

export function readLabState(stateDir = DEFAULT_STATE_DIR): LabState | null {
  const file = statePath(stateDir);
  if (!existsSync(file)) return null;
  const state = JSON.parse(readFileSync(file, 'utf8')) as LabState;
  if (state.version !== 1) throw new Error(`${file}: unknown lab state version ${String(state.version)}`);
  return state;
}

export function writeLabState(state: LabState): void {
  const file = statePath(state.stateDir);
  writeFileSync(`${file}.tmp`, JSON.stringify(state, null, 2) + '\n');
  renameSync(`${file}.tmp`, file); // atomic: a reader never sees half a file
}

/** Is the lab recorded in `state` still alive (its anchor process runs)? */
export function labAlive(state: LabState): boolean {
  const anchor = state.processes.find((p) => p.role === 'anchor');
  return anchor !== undefined && isAlive(anchor);
}

export function fullNs(state: LabState, short: string): string {
  return state.prefix + short;
}

/** The namespace of a lab node (`lb-1`) or of a lab role (`client`, `router`, `git`, `sw`). */
export function labNs(state: LabState, nodeOrShort: string): string {
  const node = state.plan.nodes.find((n) => n.name === nodeOrShort);
  return fullNs(state, node ? node.ns : nodeOrShort);
}
