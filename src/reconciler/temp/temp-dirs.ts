// Temporary directories of the short commands (the Git caches of `gitlb status`, `history`, `doctor`, `verify`).
// A `finally` removes them on every normal way out, but a signal exit skips `finally` and left
// /tmp/gitlb-status-XXXX behind on every Ctrl-C. So every such directory is registered here, and while any is
// registered (and the CLI has asked for it) SIGINT and SIGTERM remove them all before the process exits with
// 128 + the signal number (130, 143), as the shell would report the signal.
import { rm } from 'node:fs/promises';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const registered = new Set<string>();
/** makeTempDir calls between installing the listeners and registering their directory. */
let creating = 0;
let onSignal = false;
const SIGNALS = { SIGINT: 130, SIGTERM: 143 } as const;
const handlers = new Map<NodeJS.Signals, () => void>();

/**
 * Makes the process remove the registered directories on SIGINT/SIGTERM and exit 130/143. Called once by the CLI;
 * the listeners exist only while a directory is registered, so commands with their own signal handling (`run`,
 * `top`, `demo`) and the default Ctrl-C behaviour are untouched otherwise.
 */
export function removeTempDirsOnSignal(): void {
  onSignal = true;
  syncListeners();
}

/**
 * A fresh directory under the system's temporary directory, registered: a signal exit removes it too. The
 * listeners are installed before the directory exists, and it is created and registered in one synchronous step:
 * with an asynchronous mkdtemp the directory existed while its completion waited for a busy main thread (module
 * loading under load), and a Ctrl-C in that window took the default action and left it behind.
 */
export async function makeTempDir(prefix: string): Promise<string> {
  creating++;
  syncListeners();
  try {
    const dir = mkdtempSync(join(tmpdir(), prefix));
    registered.add(dir);
    return dir;
  } finally {
    creating--;
    syncListeners();
  }
}

/** Removes a directory of makeTempDir (in the caller's `finally`) and unregisters it. */
export async function removeTempDir(dir: string): Promise<void> {
  try {
    await rm(dir, { recursive: true, force: true });
  } finally {
    registered.delete(dir);
    syncListeners();
  }
}

/** The directories a signal would remove now (tests). */
export function registeredTempDirs(): string[] {
  return [...registered];
}

function syncListeners(): void {
  const want = onSignal && (registered.size > 0 || creating > 0);
  if (want && !handlers.size) {
    for (const [sig, code] of Object.entries(SIGNALS) as [NodeJS.Signals, number][]) {
      const h = () => {
        removeAllNow();
        process.exit(code);
      };
      handlers.set(sig, h);
      process.on(sig, h);
    }
  } else if (!want && handlers.size) {
    for (const [sig, h] of handlers) process.off(sig, h);
    handlers.clear();
  }
}

/**
 * Removes every registered directory, synchronously (the process exits right after). File operations already
 * handed to libuv's thread pool (a fetch's mkdir or write) can still land after a removal and recreate a path, so
 * it removes again after a short pause until nothing is left: at most 50 rounds of 20 ms, since on a loaded machine
 * (load 30 on 2 cores) a queued write landed after 100 ms; a quiet one is done in the first round.
 */
function removeAllNow(): void {
  const pause = new Int32Array(new SharedArrayBuffer(4));
  for (let round = 0; round < 50; round++) {
    for (const dir of registered) {
      try {
        rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
      } catch {
        /* retried in the next round; nothing more can be done while exiting */
      }
    }
    Atomics.wait(pause, 0, 0, 20);
    if (![...registered].some((d) => existsSync(d))) return;
  }
}
