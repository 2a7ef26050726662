// Positions in messages come from a node tree parsed again from the file's text when a message needs one
// (yaml-source.ts lazyTrees; validate keeps no tree). They must be the positions of the text the message is
// about: the same file changed between two revisions never reports a place of the earlier text.
import test from 'ava';
import { type ConfigFile, formatDiagnostic, parseConfig } from '../../src/render/config/index.js';
import { parseYamlFile } from '../../src/render/config/yaml-source.js';

const enc = (s: string): Uint8Array => new TextEncoder().encode(s);
const CLUSTER = 'apiVersion: gitlb/v1\nkind: Cluster\nmetadata:\n  name: c\nspec: {}\n';
const service = (pad: string, weight: number) => `${pad}apiVersion: gitlb/v1
kind: Service
metadata: { name: web }
spec:
  vip: 203.0.113.10
  ports: [{ port: 80 }]
  dispatch: { mode: snat }
  reals:
    - address: 198.51.100.1
    - { address: 198.51.100.2, weight: ${weight} }
`;
const revision = (text: string): ConfigFile[] => [{ path: 'cluster.yaml', content: enc(CLUSTER) }, { path: 'svc.yaml', content: enc(text) }];
const errors = (text: string) => parseConfig(revision(text)).diagnostics.filter((d) => d.severity === 'error').map(formatDiagnostic);

test('a document locates keys and values deep in its tree, and its root without one', (t) => {
  const text = `---\n${service('', 5)}---\n${service('# second\n', 6)}`;
  const { documents, problems } = parseYamlFile('svc.yaml', text);
  t.deepEqual(problems, []);
  t.is(documents.length, 2);
  t.deepEqual(documents[0]!.locate([]), { line: 2, col: 1 });
  t.deepEqual(documents[0]!.locate(['spec', 'reals', 1, 'weight']), { line: 11, col: 40 });
  t.deepEqual(documents[0]!.locate(['spec', 'reals', 1, 'weight'], 'key'), { line: 11, col: 32 });
  t.deepEqual(documents[1]!.locate([]), { line: 14, col: 1 });
  t.deepEqual(documents[1]!.locate(['spec', 'reals', 0, 'address']), { line: 22, col: 16 });
  t.deepEqual(documents[1]!.locate(['spec', 'nothing', 'here']), { line: 18, col: 3 }); // the deepest that exists: spec
  // top-level keys (kept at parse): value, key, an absent key (the root), an empty value (its key)
  t.deepEqual(documents[0]!.locate(['spec']), { line: 6, col: 3 });
  t.deepEqual(documents[0]!.locate(['spec'], 'key'), { line: 5, col: 1 });
  t.deepEqual(documents[0]!.locate(['metadata']), { line: 4, col: 11 });
  t.deepEqual(documents[0]!.locate(['status']), { line: 2, col: 1 });
  const empty = parseYamlFile('e.yaml', 'kind: Service\nspec:\nmetadata: { name: x }\n').documents[0]!;
  t.deepEqual(empty.locate(['spec']), { line: 2, col: 1 });
  t.deepEqual(empty.locate(['kind'], 'key'), { line: 1, col: 1 });
});

test('the same file changed between revisions: each message has the position in its own text', (t) => {
  const first = errors(service('', 0));
  t.true(first.some((e) => e.startsWith('svc.yaml:10:40: error:')), first.join('\n'));
  // Three lines more before the service, and the error on the other real: no position of the earlier text.
  const moved = errors(service('# a\n# b\n# c\n', 7).replace('- address: 198.51.100.1', '- { address: 198.51.100.1, weight: 0 }'));
  t.true(moved.some((e) => e.startsWith('svc.yaml:12:40: error:')), moved.join('\n'));
  t.false(moved.some((e) => e.startsWith('svc.yaml:10:40:') || e.startsWith('svc.yaml:13:40:')), moved.join('\n'));
  // The first text again: its positions again.
  t.deepEqual(errors(service('', 0)), first);
});
