// The counts taken before parsing (src/render/config/prescan.ts) are upper bounds of what the parser finds, exact
// on ordinary config: checked against the parsed sample config, on the forms an attacker would pick (flow style,
// quoted keys), and on text that only looks like a marker or a real.
import test from 'ava';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { scanYamlShape } from '../../src/render/config/prescan.js';
import { parseYamlFile } from '../../src/render/config/yaml-source.js';

const sample = join(import.meta.dirname, '..', '..', 'sample-config-repo');
const sampleFiles = ['cluster.yaml', ...['nodes', 'services'].flatMap((d) => readdirSync(join(sample, d)).map((f) => `${d}/${f}`))];

/** Nodes of a parsed document: every collection entry (pair or item) and every scalar. */
function entriesOf(data: unknown): number {
  if (Array.isArray(data)) return data.reduce((n: number, x) => n + 1 + entriesOf(x), 0);
  if (data !== null && typeof data === 'object') return Object.values(data).reduce((n: number, x) => n + 1 + entriesOf(x), 0);
  return 0;
}

function addressKeys(data: unknown): number {
  if (Array.isArray(data)) return data.reduce((n: number, x) => n + addressKeys(x), 0);
  if (data !== null && typeof data === 'object') return Object.entries(data).reduce((n: number, [k, x]) => n + (k === 'address' ? 1 : 0) + addressKeys(x), 0);
  return 0;
}

test('on the sample config: documents and address keys exact, entries at least what the parser builds', (t) => {
  for (const f of sampleFiles) {
    const text = readFileSync(join(sample, f), 'utf8');
    const shape = scanYamlShape(text);
    const { documents } = parseYamlFile(f, text);
    t.is(shape.documents, documents.length, f);
    // Reals and, in a Node, its BGP peers: every 'address' key.
    t.is(shape.reals, documents.reduce((n, d) => n + addressKeys(d.data), 0), f);
    t.true(shape.entries >= documents.reduce((n, d) => n + entriesOf(d.data), 0), f);
  }
});

test('documents: markers at the line start count, text that only looks like one does not', (t) => {
  t.is(scanYamlShape('').documents, 0);
  t.is(scanYamlShape('# only a comment\n').documents, 0);
  t.is(scanYamlShape('a: 1\n').documents, 1);
  t.is(scanYamlShape('a: 1\n---\nb: 2\n').documents, 2);
  t.is(scanYamlShape('%YAML 1.2\n---\na: 1\n---\nb: 2\n...\n').documents, 3, 'a trailing end marker over-counts by one (an upper bound)');
  t.is(scanYamlShape('---\na: 1\n...\n---\nb: 2\n').documents, 2, 'an end marker followed by a start is one boundary');
  t.is(scanYamlShape('a: |\n  ---\n  text\nb: "--- x"\n').documents, 1, 'indented or quoted dashes are content');
  const many = scanYamlShape('---\na: 1\n'.repeat(1500), 1000);
  t.is(many.documents, 1500);
  t.is(many.documentsOverAt, 2001);
});

test('reals: every form of an address key, per document; addresses (Node) and values are not reals', (t) => {
  const block = 'kind: Service\nspec:\n  reals:\n    - address: 198.51.100.1\n    - { address: 198.51.100.2, weight: 3 }\n';
  t.like(scanYamlShape(block), { reals: 2, mostRealsInDocument: { count: 2, line: 1 } });
  t.is(scanYamlShape('reals: [{address: 1.2.3.4},{"address": 1.2.3.5},{\'address\':1.2.3.6}, {address:   1.2.3.7}]').reals, 4);
  t.is(scanYamlShape('addresses: [198.51.100.1]\nnote: "the address: here"\nip_address: 1\n').reals, 1, 'a quoted value that contains "address:" over-counts; other keys do not');
  const two = scanYamlShape('reals: [{address: a}]\n---\nreals:\n  - address: b\n  - address: c\n');
  t.like(two, { reals: 3, mostRealsInDocument: { count: 2, line: 2 } });
});

test('entries bound what the parser builds on dense shapes', (t) => {
  const shapes = [
    Array.from({ length: 500 }, (_, i) => `k${i}: ${i}`).join('\n'),
    `[${Array.from({ length: 500 }, () => '1').join(',')}]`,
    Array.from({ length: 200 }, () => '- - - x').join('\n'),
    `a: {${Array.from({ length: 300 }, (_, i) => `"k${i}":[1,2]`).join(',')}}`,
  ];
  for (const text of shapes) {
    const { documents, problems } = parseYamlFile('x.yaml', text);
    t.deepEqual(problems, []);
    t.true(scanYamlShape(text).entries >= entriesOf(documents[0]!.data), text.slice(0, 40));
  }
});

// The two checks at the revision's reals limit (122,880 reals generated and scanned or parsed, seconds of CPU) are in
// test/integration/config-reals-limit.test.ts.
