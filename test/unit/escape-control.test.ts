// One escaping function for untrusted text that reaches a terminal (src/render/escape.ts): config values quoted in
// diagnostics (validate, plan, the daemon's reasons) and log lines in text form.
import test from 'ava';
import { escapeControl } from '../../src/render/escape.js';
import { formatDiagnostic, parseConfig } from '../../src/render/config/index.js';
import { formatRecord } from '../../src/reconciler/log/text-format.js';

test('control characters and bidi overrides become visible escapes; ordinary text, UTF-8 names and emoji stay', (t) => {
  t.is(escapeControl('plain text: 198.51.100.1, ü, 名前, 🙂'), 'plain text: 198.51.100.1, ü, 名前, 🙂');
  t.is(escapeControl('\x1b]0;owned\x07\x1b[2J'), '\\x1b]0;owned\\x07\\x1b[2J');
  t.is(escapeControl('a\nb\rc\td\x00e\x7ff\x9bg'), 'a\\nb\\rc\\td\\x00e\\x7ff\\x9bg');
  t.is(escapeControl('user\u202Enimda\u2066x\u2069'), 'user\\u202enimda\\u2066x\\u2069');
  // Line and paragraph separators: a viewer that breaks lines there would show a faked line.
  t.is(escapeControl('ok\u2028verdict: OK\u2029'), 'ok\\u2028verdict: OK\\u2029');
  t.is(escapeControl('dash \u2013 quote \u201c\u201d ellipsis \u2026'), 'dash \u2013 quote \u201c\u201d ellipsis \u2026', 'punctuation next to them stays');
});

test('a diagnostic quoting a config value with terminal escapes prints one line without them', (t) => {
  const enc = (s: string) => new TextEncoder().encode(s);
  const evil = 'kind: "Serv\\e[31mice\\nFAKE: ok\\u009b2J"\n';
  const r = parseConfig([{ path: 'x.yaml', content: enc(`apiVersion: gitlb/v1\n${evil}metadata: {name: a}\nspec: {}\n`) }]);
  const lines = r.diagnostics.map(formatDiagnostic);
  t.true(lines.length > 0);
  for (const l of lines) {
    t.false(/[\x00-\x1f\x7f-\x9f]/.test(l), JSON.stringify(l));
  }
  t.true(lines.some((l) => l.includes("unknown kind 'Serv\\x1b[31mice\\nFAKE: ok\\x9b2J'")), lines.join('\n'));
  // Benign: an ordinary diagnostic reads as before.
  t.is(formatDiagnostic({ severity: 'error', file: 'services/web.yaml', line: 3, col: 7, message: "spec.vip: '203.0.113.999' is not an IP address" }),
    "services/web.yaml:3:7: error: spec.vip: '203.0.113.999' is not an IP address");
});

test('a text log line escapes its message and fields; JSON-looking values stay readable', (t) => {
  const line = formatRecord({ level: 40, time: 0, msg: 'revision failed: x.yaml:1:1: \x1b[2Jgone', reason: 'a\x1bb', count: 3 });
  t.false(/[\x00-\x1f\x7f-\x9f]/.test(line), JSON.stringify(line));
  t.regex(line, /WARN  revision failed: x\.yaml:1:1: \\x1b\[2Jgone reason=a\\x1bb count=3$/);
});
