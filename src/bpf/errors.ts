// Error shape shared by the binding: Error with `.code` (errno name) and a message that
// names the map or program involved.
export type BpfErrorCode = string;
export interface BpfError extends Error { code: BpfErrorCode; errno?: number; verifierLog?: string }

export function bpfError(code: string, message: string, extra: Record<string, unknown> = {}): BpfError {
  return Object.assign(new Error(`${message}: ${code}`), { code }, extra) as BpfError;
}

/** Re-throws a native error with the map/program name in front of its message. */
export function named<T>(what: string, fn: () => T): T {
  try {
    return fn();
  } catch (e) {
    if (e instanceof Error && !e.message.startsWith(what)) e.message = `${what}: ${e.message}`;
    throw e;
  }
}
