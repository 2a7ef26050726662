// scrubToolText: what BIRD says, reduced to one bounded line that carries no password and no terminal control.
import test from 'ava';
import { birdPasswords, MAX_ERROR_CHARS, scrubToolText } from '../../src/reconciler/bgp/scrub.js';
import { renderBirdConfig } from '../../src/render/bgp/bird.js';
import { decideAnnouncements } from '../../src/render/bgp/announce.js';
import { renderDesiredState } from '../../src/render/desired.js';
import { goodModel } from '../helpers/bgp-model.js';

test('the passwords of a generated BIRD file are found (the ones the file BIRD reads holds)', (t) => {
  const m = goodModel();
  const facts = { node: 'lb-1', model: m, desired: renderDesiredState(m, 'lb-1'), dataPlaneUp: true, stopping: false };
  const text = renderBirdConfig(m, 'lb-1', decideAnnouncements(facts))!;
  t.deepEqual(birdPasswords(text), ['s3cret']);
  t.deepEqual(birdPasswords(null), []);
});

test('known secrets and any password clause are redacted wherever they appear, the longest first', (t) => {
  const out = scrubToolText('x.conf:9:3 near password "other-one"; key s3cret-long and s3cret', ['s3cret', 's3cret-long']);
  t.is(out, 'x.conf:9:3 near password "(redacted)"; key (redacted) and (redacted)');
  // A clause cut off by the end of the text still loses its value.
  t.is(scrubToolText('... password "hunter2', []), '... password "(redacted)"');
});

test('control characters, escape sequences and line breaks become single spaces; one line', (t) => {
  const raw = '0001 BIRD 2.0.12 ready.\r\n\x1b[31mReading\x1b[0m configuration\tfrom /x\x00\x07\n\x9bbad\u2028end\n';
  t.is(scrubToolText(raw, []), '0001 BIRD 2.0.12 ready. Reading configuration from /x bad end');
});

test('capped after redaction: at most MAX_ERROR_CHARS characters, never half a password', (t) => {
  const secret = 'p'.repeat(40);
  const raw = `${'e'.repeat(MAX_ERROR_CHARS - 20)} ${secret} ${'z'.repeat(5000)}`;
  const out = scrubToolText(raw, [secret]);
  t.is(out.length, MAX_ERROR_CHARS);
  t.true(out.endsWith('…'));
  t.false(out.includes('pppp'));
  t.true(out.includes('(redacted)'));
  t.is(scrubToolText('short', []), 'short');
});
