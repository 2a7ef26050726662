// The config memos (src/render/config/text-memo.ts, index.ts): a revision that changes one file parses one file,
// a changed file is never served from the memo, and no series of revisions makes them hold more than one
// revision's text (issue 23, F5: 60 revisions of 7 x 1 MiB at new paths grew the heap by 422 MiB before).
import test from 'ava';
import { join } from 'node:path';
import { type ConfigFile, LIMITS, configMemoStats, parseConfig } from '../../src/render/config/index.js';
import { TextMemo } from '../../src/render/config/text-memo.js';
import { readConfigDir } from '../../src/reconciler/source/read-dir.js';

const enc = (s: string): Uint8Array => new TextEncoder().encode(s);
const sample = join(import.meta.dirname, '..', '..', 'sample-config-repo');
const bytesOf = (files: ConfigFile[]): number => files.reduce((n, f) => n + f.content.length, 0);

test.serial('attacker: revisions of 8 x 1 MiB at new paths leave the memos holding one revision at most', (t) => {
  // Comment-heavy, entry-light files: under every limit of the prescan, so each one is parsed and memoised.
  const big = (i: number): string => `# ${'x'.repeat(1024 * 1024 - 200)}\nkind: Note\nname: n${i}\n`;
  let most = 0;
  for (let rev = 0; rev < 12; rev++) {
    const files = Array.from({ length: 8 }, (_, j): ConfigFile => ({ path: `r${rev}/f${j}.yaml`, content: enc(big(rev * 10 + j)) }));
    parseConfig(files);
    const { shapeBytes, yamlBytes } = configMemoStats();
    t.true(shapeBytes <= bytesOf(files) && yamlBytes <= bytesOf(files), `revision ${rev}: ${shapeBytes} / ${yamlBytes} bytes held`);
    most = Math.max(most, shapeBytes, yamlBytes);
  }
  t.true(most <= LIMITS.maxTotalBytes);
  t.true(most > 0, 'the files were parsed and memoised');
});

test.serial('attacker: a file over the byte budget is computed but not kept, and the budget evicts the oldest', (t) => {
  const memo = new TextMemo<number>(10);
  t.is(memo.get('a', 'x'.repeat(11), 11, (s) => s.length), 11);
  t.is(memo.bytes, 0);
  memo.get('a', 'aaaa', 4, (s) => s.length);
  memo.get('b', 'bbbb', 4, (s) => s.length);
  memo.get('c', 'cccc', 4, (s) => s.length); // over 10: 'a' goes
  t.is(memo.bytes, 8);
  t.is(memo.size, 2);
  let computed = 0;
  memo.get('a', 'aaaa', 4, () => ++computed);
  t.is(computed, 1, "'a' was evicted, so it is computed again");
});

test.serial('benign: a revision that changes one file parses that file alone, and the change is never served stale', async (t) => {
  const files = await readConfigDir(sample);
  const first = parseConfig(files);
  t.truthy(first.model);
  t.is(configMemoStats().yamlBytes, bytesOf(files.filter((f) => f.path.endsWith('.yaml') || f.path.endsWith('.yml'))));
  const before = configMemoStats().parses;
  const again = parseConfig(files);
  t.deepEqual(again.model, first.model);
  t.is(configMemoStats().parses, before, 'the same revision again parses nothing');

  // Change one weight in one file, keeping its length: the memo must see the new text.
  const target = files.find((f) => /\bweight: \d/.test(new TextDecoder().decode(f.content)))!;
  const text = new TextDecoder().decode(target.content);
  const m = /\bweight: (\d)/.exec(text)!;
  const changed = text.slice(0, m.index) + `weight: ${m[1] === '7' ? '8' : '7'}` + text.slice(m.index + m[0].length);
  const next = files.map((f) => (f === target ? { ...f, content: enc(changed) } : f));
  const parsed = parseConfig(next);
  t.truthy(parsed.model);
  t.is(configMemoStats().parses, before + 1, 'one changed file, one parse');
  t.notDeepEqual(parsed.model, first.model, 'the changed weight is in the model');
  // Back and forth: each text gives its own model, never the one remembered for the other.
  t.deepEqual(parseConfig(files).model, first.model);
  t.deepEqual(parseConfig(next).model, parsed.model);
});
