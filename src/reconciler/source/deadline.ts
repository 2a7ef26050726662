// Every Git operation is bounded: a remote that stops answering (partition, overloaded server) must not hold
// a node's reconciler, status writer or peer reads for longer than the deadline. The operation gets an
// AbortSignal that is aborted at the deadline (its HTTP requests are destroyed), and the caller gets the
// timeout error at the deadline even if the operation ignores the signal.

export const DEFAULT_GIT_TIMEOUT_MS = 10_000;

export class DeadlineError extends Error {
  readonly code = 'ETIMEDOUT';
}

export function withDeadline<T>(what: string, ms: number, op: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const ctl = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const err = new DeadlineError(`${what} timed out after ${ms} ms`);
      ctl.abort(err);
      reject(err);
    }, ms);
  });
  const run = op(ctl.signal);
  // The losing operation may still reject after the deadline; that rejection is expected and not reported.
  run.catch(() => {});
  return Promise.race([run, expired]).finally(() => clearTimeout(timer));
}
