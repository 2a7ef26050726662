// The closed set of errors the reconciler decides on (docs/reconciler.md, "Error codes"). Pure: no I/O.
//
// Every failure that changes what the reconciler does next (retry with backoff, stall until a new commit, revert,
// or record nothing) carries one of these codes, and the decision is taken on the code's class, never on an
// error's message text. A message is for people: it names the field or file:line:col, and its text may change.
// The one translation of foreign codes into this set (kernel errnos at the data plane, isomorphic-git's error
// names at the Git source) happens where those errors are caught: `fromDataPlane` below, src/reconciler/source/.
//
// `render` and `bpf` throw some of these too (capacity, a desired state the data plane cannot hold), so this
// module sits under src/ beside them and imports nothing.

/**
 * What the reconciler does with a failure of this class:
 * - retry: transient; the node keeps serving its last good revision and tries the same one again with backoff
 *   (Reconciling=True).
 * - permanent: this node cannot apply the revision (Stalled=True); no revert: other nodes may apply it.
 * - capacity: no order of ops fits the maps (Stalled=True, nothing written); no revert.
 * - verification: the revision is refused by the node's trust policy (Stalled=True); never reverted by a node.
 * - input: the revision's own content is bad (Stalled=True); lb nodes push an automatic revert under policy auto.
 * - stopped: the daemon is stopping; nothing is recorded or published.
 */
export type ErrorClass = 'retry' | 'permanent' | 'capacity' | 'verification' | 'input' | 'stopped';
export const ERROR_CLASSES: readonly ErrorClass[] = ['retry', 'permanent', 'capacity', 'verification', 'input', 'stopped'];

/** Status condition reasons a failure of a code is reported under (src/reconciler/status/conditions.ts). */
type FailureCondition =
  | 'FetchFailed' | 'VerificationFailed' | 'NonFastForward' | 'ValidationFailed' | 'RenderFailed' | 'ApplyFailed'
  | 'ReadbackMismatch' | 'HealthGateFailed';

interface CodeSpec {
  readonly class: ErrorClass;
  /** The condition reason of Ready/Reconciling/Stalled when a revision fails with it (null: not a revision failure). */
  readonly condition: FailureCondition | null;
}

/** The closed set: code -> class and condition. docs/reconciler.md has the same table with what the reconciler does. */
export const ERROR_CODES = {
  // Git source
  FetchFailed: { class: 'retry', condition: 'FetchFailed' },
  GitTimeout: { class: 'retry', condition: 'FetchFailed' },
  BranchNotFound: { class: 'retry', condition: 'FetchFailed' },
  GitObjectMissing: { class: 'retry', condition: 'FetchFailed' },
  HistoryUnreadable: { class: 'retry', condition: 'FetchFailed' },
  PushFailed: { class: 'retry', condition: null },
  Stopped: { class: 'stopped', condition: null },
  // Trust
  VerificationFailed: { class: 'verification', condition: 'VerificationFailed' },
  NonFastForward: { class: 'verification', condition: 'NonFastForward' },
  // The revision's content
  ConfigInvalid: { class: 'input', condition: 'ValidationFailed' },
  RenderFailed: { class: 'input', condition: 'RenderFailed' },
  HealthGateFailed: { class: 'input', condition: 'HealthGateFailed' },
  // Data plane
  ApplyFailed: { class: 'retry', condition: 'ApplyFailed' },
  DataPlaneRefused: { class: 'permanent', condition: 'ApplyFailed' },
  CapacityExceeded: { class: 'capacity', condition: 'ApplyFailed' },
  ReadbackMismatch: { class: 'retry', condition: 'ReadbackMismatch' },
  // Peer channel (a round without this peer's vote either way; the class says whether asking again can help)
  PeerUnreachable: { class: 'retry', condition: null },
  PeerRejected: { class: 'verification', condition: null },
  // Start: a flag or option of a command that cannot work (the command exits with a usage error)
  InvalidOption: { class: 'input', condition: null },
} as const satisfies Record<string, CodeSpec>;

export type ErrorCode = keyof typeof ERROR_CODES;
/** The codes a revision can fail with (they name a status condition); the others never end a reconcile pass. */
export type RevisionErrorCode = { [K in ErrorCode]: (typeof ERROR_CODES)[K]['condition'] extends null ? never : K }[ErrorCode];

/** Where in a file the problem is (1-based). */
export interface SourcePosition {
  file: string;
  line: number;
  col: number;
}

export interface GitlbErrorOptions {
  /** The config field or option at fault (e.g. `services[web].ring`, `--path`). */
  field?: string;
  /** The position in a config file. */
  at?: SourcePosition;
  /** The foreign error it was translated from (its errno name stays readable as `cause.code`). */
  cause?: unknown;
  /** The kernel errno name behind it, when there is one (a refusal of the data plane says which it stands for). */
  errno?: string;
}

/** An error of the closed set. `message` is for people; decisions read `code` (or `errorClass`). */
export class GitlbError extends Error {
  readonly code: ErrorCode;
  readonly field?: string;
  readonly at?: SourcePosition;
  readonly errno?: string;

  constructor(code: ErrorCode, message: string, opts: GitlbErrorOptions = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'GitlbError';
    this.code = code;
    if (opts.field !== undefined) this.field = opts.field;
    if (opts.at !== undefined) this.at = opts.at;
    if (opts.errno !== undefined) this.errno = opts.errno;
  }

  get class(): ErrorClass {
    return ERROR_CODES[this.code].class;
  }
}

export function isErrorCode(code: unknown): code is ErrorCode {
  return typeof code === 'string' && Object.hasOwn(ERROR_CODES, code);
}

/** The code of a GitlbError, or null for any other error (the caller decides on its own fallback). */
export function errorCode(err: unknown): ErrorCode | null {
  return err instanceof GitlbError ? err.code : null;
}

export function classOf(code: ErrorCode): ErrorClass {
  return ERROR_CODES[code].class;
}

export function conditionOf(code: RevisionErrorCode): FailureCondition;
export function conditionOf(code: ErrorCode): FailureCondition | null;
export function conditionOf(code: ErrorCode): FailureCondition | null {
  return ERROR_CODES[code].condition;
}

export function isRevisionErrorCode(code: ErrorCode): code is RevisionErrorCode {
  return ERROR_CODES[code].condition !== null;
}

/** The text of any thrown value (messages are shown, never decided on). */
export function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** A GitlbError a reconcile pass can end with. */
export type RevisionError = GitlbError & { readonly code: RevisionErrorCode };

export function revisionError(code: RevisionErrorCode, message: string, opts?: GitlbErrorOptions): RevisionError {
  return new GitlbError(code, message, opts) as RevisionError;
}

/**
 * `err` itself when it is a GitlbError a revision can fail with (e.g. GitObjectMissing while reading the config),
 * else a GitlbError of `fallback`, the stage's own code, with the same message (and `err` as cause).
 */
export function asRevisionError(err: unknown, fallback: RevisionErrorCode): RevisionError {
  if (err instanceof GitlbError && isRevisionErrorCode(err.code)) return err as RevisionError;
  return revisionError(fallback, errorText(err), { cause: err });
}

/**
 * Kernel (and in-memory data plane) errno names the reconciler treats as more than a transient apply failure. Any
 * other errno (E2BIG from a map another writer filled, ENOMEM, EBUSY...) is ApplyFailed: the data plane undid the
 * partial apply and the same revision is retried.
 */
const ERRNO_CODES: Readonly<Record<string, RevisionErrorCode>> = {
  EINVAL: 'DataPlaneRefused', // the data plane cannot represent this revision on this node
  ENOSPC: 'CapacityExceeded', // no order of ops fits the node's maps
};

/** A failure of converge (plan, validate, execute) as a code of the set: the data plane's one translation point. */
export function fromDataPlane(err: unknown): RevisionError {
  if (err instanceof GitlbError && isRevisionErrorCode(err.code)) return err as RevisionError;
  const errno = err instanceof GitlbError ? err.errno : (err as { code?: unknown } | null)?.code;
  const code = typeof errno === 'string' ? ERRNO_CODES[errno] : undefined;
  return revisionError(code ?? 'ApplyFailed', errorText(err), { cause: err, ...(typeof errno === 'string' && { errno }) });
}

/** What the reconciler does after a revision failed with `code` (docs/reconciler.md, "Error codes"). */
export interface Reaction {
  /** Try the same revision again after a backoff (Reconciling=True); otherwise wait for a new commit (Stalled=True). */
  retry: boolean;
  /** An lb node may push an automatic revert (policy auto): the revision's own content is at fault. */
  revert: boolean;
  /** Recorded in status and counters (false only when the daemon is stopping). */
  record: boolean;
}

export function reactionTo(code: ErrorCode): Reaction {
  const c = classOf(code);
  return { retry: c === 'retry', revert: c === 'input', record: c !== 'stopped' };
}
