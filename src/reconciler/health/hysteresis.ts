// The per-real health state machine with rise/fall hysteresis. Pure: the caller passes each check result and
// the time it completed, so the same sequence of results always gives the same states.
//
//   unknown --1 success--> up          (a fresh daemon confirms quickly and never drains a working real)
//   unknown --fall failures--> down
//   up      --fall consecutive failures--> down      (1 failure when the real is suspect: passive.ts)
//   down    --rise consecutive successes--> up
// A real that alternates faster than rise/fall never changes state: that is what keeps a flapping real from
// churning the Maglev table.

export type HealthState = 'unknown' | 'up' | 'down';

export interface CheckResult {
  ok: boolean;
  /** Short human text: "connected", "HTTP 503", "timeout after 500 ms", "ECONNREFUSED". */
  detail: string;
  /** When the check finished (ms since epoch). */
  at: number;
  durationMs: number;
}

export interface RealHealth {
  state: HealthState;
  /** When `state` last changed (ms since epoch); for `unknown`, when tracking started. */
  since: number;
  /** Consecutive results agreeing with the last one (positive: successes, negative: failures). */
  streak: number;
  last?: CheckResult;
}

export function initialHealth(now: number): RealHealth {
  return { state: 'unknown', since: now, streak: 0 };
}

export interface Step {
  next: RealHealth;
  changed: boolean;
}

/**
 * `suspect`: the data plane saw this real's new connections go unanswered just before the check (passive.ts). A
 * failed check then confirms what the traffic already shows, and it takes the real down at once (fall counts as 1);
 * coming back still takes `rise` successes.
 */
export function stepHealth(prev: RealHealth, result: CheckResult, rise: number, fall: number, suspect = false): Step {
  const streak = result.ok ? Math.max(prev.streak, 0) + 1 : Math.min(prev.streak, 0) - 1;
  let state: HealthState = prev.state;
  if (result.ok) {
    if (prev.state === 'unknown' || (prev.state === 'down' && streak >= Math.max(1, rise))) state = 'up';
  } else if (prev.state !== 'down' && -streak >= (suspect ? 1 : Math.max(1, fall))) {
    state = 'down';
  }
  const changed = state !== prev.state;
  return { next: { state, since: changed ? result.at : prev.since, streak, last: result }, changed };
}
