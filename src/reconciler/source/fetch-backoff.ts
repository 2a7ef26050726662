// The schedule and log policy of a failing fetch (docs/reconciler.md, "Triggers": retry). Pure: time comes in.
//
// A failing fetch is retried on a backoff of its own — 1 s, doubling, at most 5 min — which the daemon's retry
// timer follows; the poll keeps fetching at its own rate besides it (the poll is the operator's bound on how
// stale a node may be, so it is never slowed down). An attempt made before the next backoff step is due (a poll
// tick, a webhook) neither advances the backoff nor logs, unless the reason changed: a long outage logs one line
// per backoff step, not one per poll. Recovery is summed up in one line.

export interface FetchFailureState {
  reason: string;
  /** Failed attempts in a row, whatever triggered them. */
  attempts: number;
  /** Backoff steps taken (1 after the first failure). */
  step: number;
  /** Epoch ms of the first failure of this outage. */
  since: number;
  /** Epoch ms the next backoff step is due (the retry timer fires then). */
  retryAt: number;
}

export interface FetchFailureNote {
  state: FetchFailureState;
  /** Whether this failure deserves a log line (first failure, a new backoff step, or a new reason). */
  log: boolean;
  /** Milliseconds until the next backoff step. */
  retryInMs: number;
}

export class FetchBackoff {
  private s: FetchFailureState | null = null;

  constructor(private readonly retry: { baseMs: number; maxMs: number }) {}

  get state(): FetchFailureState | null {
    return this.s;
  }

  /** Records a failed attempt at `now`. */
  failed(reason: string, now: number): FetchFailureNote {
    const prev = this.s;
    if (!prev) {
      this.s = { reason, attempts: 1, step: 1, since: now, retryAt: now + this.retry.baseMs };
      return { state: { ...this.s }, log: true, retryInMs: this.retry.baseMs };
    }
    const due = now >= prev.retryAt;
    const step = due ? prev.step + 1 : prev.step;
    const retryAt = due ? now + Math.min(this.retry.maxMs, this.retry.baseMs * 2 ** (step - 1)) : prev.retryAt;
    this.s = { reason, attempts: prev.attempts + 1, step, since: prev.since, retryAt };
    return { state: { ...this.s }, log: due || reason !== prev.reason, retryInMs: retryAt - now };
  }

  /** A fetch succeeded: the outage it ends (for the summary line), or null when there was none. */
  recovered(now: number): { attempts: number; durationMs: number; reason: string; since: number; until: number } | null {
    const prev = this.s;
    this.s = null;
    return prev ? { attempts: prev.attempts, durationMs: now - prev.since, reason: prev.reason, since: prev.since, until: now } : null;
  }
}

/** "95 s", "4 min 10 s": durations in log lines. */
export function humanMs(ms: number): string {
  const s = Math.round(ms / 1000);
  if (s < 60) return ms < 1000 && ms > 0 ? `${ms} ms` : `${s} s`;
  const m = Math.floor(s / 60);
  return s % 60 ? `${m} min ${s % 60} s` : `${m} min`;
}
