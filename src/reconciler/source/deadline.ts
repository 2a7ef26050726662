// Every Git operation is bounded: a remote that stops answering (partition, overloaded server) must not hold
// a node's reconciler, status writer or peer reads for longer than the deadline. The operation gets an
// AbortSignal that is aborted at the deadline (its HTTP requests are destroyed), and the caller gets the
// timeout error at the deadline even if the operation ignores the signal.

import { GitlbError, errorCode } from '../../errors.js';

export const DEFAULT_GIT_TIMEOUT_MS = 10_000;

/** The deadline passed: GitTimeout, retried like any failed fetch (src/errors.ts). */
export class DeadlineError extends GitlbError {
  constructor(message: string) {
    super('GitTimeout', message);
  }
}

/** The operation was cut short because the process is stopping (`stop` signal of withDeadline), not a Git failure. */
export class StoppedError extends GitlbError {
  constructor(message: string) {
    super('Stopped', message);
  }
}

export function isStopped(err: unknown): boolean {
  return errorCode(err) === 'Stopped';
}

/**
 * Runs `op` with an AbortSignal aborted at the deadline, or at once when `stop` aborts (the daemon is stopping:
 * a held fetch must not hold the shutdown). Either way the caller gets the error right then.
 */
export function withDeadline<T>(what: string, ms: number, op: (signal: AbortSignal) => Promise<T>, stop?: AbortSignal): Promise<T> {
  if (stop?.aborted) return Promise.reject(new StoppedError(`${what} not started: stopping`));
  const ctl = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  let onStop: (() => void) | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const err = new DeadlineError(`${what} timed out after ${ms} ms`);
      ctl.abort(err);
      reject(err);
    }, ms);
    onStop = () => {
      const err = new StoppedError(`${what} aborted: stopping`);
      ctl.abort(err);
      reject(err);
    };
    stop?.addEventListener('abort', onStop, { once: true });
  });
  const run = op(ctl.signal);
  // The losing operation may still reject after the deadline; that rejection is expected and not reported.
  run.catch(() => {});
  return Promise.race([run, expired]).finally(() => {
    clearTimeout(timer);
    if (onStop) stop?.removeEventListener('abort', onStop);
  });
}
