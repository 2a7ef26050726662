// The tests predict backends with src/bpf/dataplane/flow-hash.ts, the implementation's own hash. These are the
// published reference values of the function it claims to be (Bob Jenkins' lookup3.c, driver5's self-test), so
// the oracle is checked against something other than itself.
import test from 'ava';
import { hashword } from '../../src/bpf/dataplane/flow-hash.js';

test('lookup3 reference: an empty key returns the initial state (0xdeadbeef + length + initval)', (t) => {
  t.is(hashword([], 0), 0xdeadbeef);
  t.is(hashword([], 0xdeadbeef), 0xbd5b7dde);
});

// hashlittle("Four score and seven years ago", 30, initval) is 0x17770551 for initval 0 and 0xcd628161 for 1.
// On whole little-endian words hashlittle and hashword run the same rounds; the 30-byte key ends in a 2-byte
// tail (hashlittle adds it as a 16-bit word) and its initial state counts 30 bytes where hashword counts 8 words
// (32): the initval is lowered by 2 to start from the same state.
const phrase = Buffer.from('Four score and seven years ago');
const phraseWords = [0, 4, 8, 12, 16, 20, 24].map((o) => phrase.readUInt32LE(o)).concat(phrase.readUInt16LE(28));

for (const [initval, expected] of [[0, 0x17770551], [1, 0xcd628161]] as const) {
  test(`lookup3 reference: "Four score and seven years ago" with initval ${initval} is 0x${expected.toString(16)}`, (t) => {
    t.is(phrase.length, 30);
    t.is(hashword(phraseWords, (initval - 2) >>> 0), expected);
  });
}

test('a changed word or initval changes the hash (the vectors are not satisfied by accident)', (t) => {
  const altered = [...phraseWords];
  altered[3] = (altered[3]! ^ 1) >>> 0;
  t.not(hashword(altered, 0xfffffffe), 0x17770551);
  t.not(hashword(phraseWords, 0), 0x17770551);
});
