// spec.snatAddress may not be another node's address (src/render/config/semantic.ts): the node would translate with
// an address another node owns, and a survivor taking the lost node's SNAT address over would draw that node's
// traffic (src/reconciler/flows/snat-takeover.ts refuses it at run time too).
import test from 'ava';
import { PEERS, file, goodFiles, lbNode, parse } from '../helpers/bgp-model.js';

test('an lb node whose snatAddress is another node\'s address is refused, naming the field and the owner (attacker)', (t) => {
  for (const [address, owner] of [['198.51.100.11', 'lb-1'], ['198.51.100.21', 'be-1']] as const) {
    const { model, lines } = parse([...goodFiles(PEERS), file('nodes/lb-2.yaml', lbNode('lb-2', `  snatAddress: ${address}\n`))]);
    t.is(model, null, address);
    t.true(lines.some((l) => l.includes('nodes/lb-2.yaml') && l.includes(`spec.snatAddress: ${address} is an address of node '${owner}'`)), lines.join('\n'));
  }
});

test('a snatAddress of its own (one of the node\'s addresses, or an address of no node) is accepted (benign)', (t) => {
  for (const address of ['198.51.100.12', '198.51.100.112']) {
    const { model, lines } = parse([...goodFiles(PEERS), file('nodes/lb-2.yaml', lbNode('lb-2', `  snatAddress: ${address}\n`))]);
    t.truthy(model, lines.join('\n'));
  }
});
