// The two-node connection-state sync lab of test/netns/flow-sync*.test.ts: a script of named steps, run at once by
// the harness (flow-sync-harness.ts: lb-a and lb-b, each its own pin root, in a lab namespace of the test's own) from
// ava's before hook, and its results read back by step name.
import test from 'ava';
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { setupLab, teardownLab } from './xdp-lab.js';
import { runFlowSyncHarness, type FlowSyncInput, type FlowSyncStep } from './flow-sync-harness.js';

export function flowSyncLab(tag: string) {
  const steps: Array<{ name: string; step: FlowSyncStep }> = [];
  const at: Record<string, number> = {};
  let results: Promise<any[]>;
  return {
    steps,
    /** Step name -> its index. */
    at,
    add: (name: string, step: FlowSyncStep): void => {
      at[name] = steps.length;
      steps.push({ name, step });
    },
    /** Registers the hooks: before the tests, the lab and every step added by then; after them, the lab removed. */
    run: (input: Omit<FlowSyncInput, 'pinRoot' | 'steps'>): void => {
      test.before(() => {
        const { ns, pinRoot } = setupLab(tag);
        mkdirSync(`${pinRoot}/a`, { recursive: true });
        mkdirSync(`${pinRoot}/b`, { recursive: true });
        // clients are reached through the lab's gateway (SNAT replies go back to them)
        execFileSync('ip', ['-n', ns, 'route', 'add', '192.0.2.0/25', 'via', '198.51.100.254', 'dev', 'lbA']);
        results = runFlowSyncHarness(ns, { ...input, pinRoot, steps: steps.map((s) => s.step) });
        results.catch(() => undefined);
      });
      test.after.always(() => teardownLab(tag));
    },
    /** Every step's result, in order. */
    results: (): Promise<any[]> => results,
    /** The result of the step named `name`. */
    r: async (name: string): Promise<any> => (await results)[at[name]!],
  };
}
