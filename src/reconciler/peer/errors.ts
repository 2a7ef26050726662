// Why the peer channel refused a message, as one closed set: the `reason` label of
// gitlb_peer_messages_rejected_total and the `reason` of a PeerError (whose code, src/errors.ts, says whether asking
// again can help).
import { GitlbError } from '../../errors.js';

/** A message (request in, or answer back) that failed authentication or a bound. */
export const REJECT_REASONS = [
  'malformed', // headers do not frame a message
  'unknown-kind', // nothing serves this kind here
  'unknown-sender', // the sender is not another lb node of the applied config
  'wrong-receiver', // addressed to another node, or an answer from another node than asked
  'future', // dated beyond the skew window ahead of the local clock
  'stale', // dated beyond the skew window behind the local clock
  'too-large', // body over the kind's cap
  'bad-mac', // the MAC does not match (wrong or no secret, altered message)
  'replay', // a nonce already seen inside the window
  'unbound-answer', // an answer that does not answer this request
  'rate-limited', // more requests from this peer than its bound
  'bad-body', // authenticated, but the body is not what the kind accepts (e.g. not JSON, out-of-window times)
] as const;
export type RejectReason = (typeof REJECT_REASONS)[number];

/** Failures of request(): a rejected answer, or no usable answer at all. */
export type PeerErrorReason = RejectReason | 'unknown-peer' | 'unreachable' | 'timeout' | 'refused';

/** No answer at all (asking again may help) is PeerUnreachable; an answer or a peer refused is PeerRejected. */
export function peerErrorCode(reason: PeerErrorReason): 'PeerUnreachable' | 'PeerRejected' {
  return reason === 'unreachable' || reason === 'timeout' ? 'PeerUnreachable' : 'PeerRejected';
}

export class PeerError extends GitlbError {
  constructor(readonly peer: string, readonly kind: string, readonly reason: PeerErrorReason, detail: string) {
    super(peerErrorCode(reason), `peer ${peer}: ${kind}: ${detail}`);
    this.name = 'PeerError';
  }
}
