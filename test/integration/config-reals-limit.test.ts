// The revision's total reals limit at full scale (LIMITS.maxTotalReals, 122,880 reals): refused before parsing
// when the prescan counts it, and after parsing when escaped keys hide reals from the count. Integration tier: each
// case generates and scans (or parses) the whole limit, seconds of CPU (the prescan's own checks: test/unit/config-prescan).
import test from 'ava';
import { LIMITS, formatDiagnostic, parseConfig } from '../../src/render/config/index.js';

test('a revision over the reals count is refused before parsing: the file named, the limit named, nothing parsed', (t) => {
  const enc = (s: string) => new TextEncoder().encode(s);
  // Block form (two entries per real), so the reals count is passed before the entries count.
  const service = (i: number, n: number) => `kind: Service\nspec:\n  reals:\n${Array.from({ length: n }, (_, r) => `  - address: 10.${i}.${r >> 8}.${r & 255}\n`).join('')}  broken: [\n`;
  const over = LIMITS.maxTotalReals / 4096; // files of 4096 reals that reach the limit exactly; one more passes it
  const files = Array.from({ length: over + 1 }, (_, i) => ({ path: `s${String(i).padStart(2, '0')}.yaml`, content: enc(service(i, 4096)) }));
  const r = parseConfig(files);
  // The unclosed flow sequence in every file would be a YAML error if any file had been parsed.
  t.deepEqual(r.diagnostics.map(formatDiagnostic),
    [`s${over}.yaml:1:1: error: with this file the repository holds more than ${LIMITS.maxTotalReals} reals ('address' keys) in total; refused before parsing`]);
  t.is(r.model, null);
});

test('reals the count cannot see (escaped keys) meet the exact total after parsing', (t) => {
  const enc = (s: string) => new TextEncoder().encode(s);
  // LIMITS.maxTotalReals + 1: one more than the revision may hold; "\x61ddress" is 'address' to the parser only.
  // Block form (two entries per real), under the entries count.
  const service = (i: number, n: number) => `apiVersion: gitlb/v1\nkind: Service\nmetadata: {name: s${i}}\nspec:\n  vip: 203.0.113.${i + 1}\n  ports: [{port: 80}]\n` +
    `  dispatch: {mode: snat}\n  reals:\n${Array.from({ length: n }, (_, r) => `  - "\\x61ddress": 10.${i % 200}.${r >> 8}.${r & 255}\n`).join('')}`;
  const full = LIMITS.maxTotalReals / 4096;
  const files = Array.from({ length: full + 1 }, (_, i) => ({ path: `s${String(i).padStart(2, '0')}.yaml`, content: enc(service(i, i < full ? 4096 : 1)) }));
  const errors = parseConfig(files).diagnostics.filter((d) => d.severity === 'error').map(formatDiagnostic);
  t.true(errors.includes(`s${full}.yaml:9:3: error: spec.reals: with this service the revision has more than ${LIMITS.maxTotalReals} reals in total; refused`), errors.join('\n'));
});
