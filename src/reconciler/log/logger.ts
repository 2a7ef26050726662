// The daemon's logger (pino): JSON lines with time, level, node, the revision the node serves, and the fields a
// call site adds (stage, reason, service, real, counts); or one readable line per event when stderr is a
// terminal (--log-format text). It implements the reconciler's Logger (state/node-state.ts), so call sites stay `log.info(message)`.
import { pino, type Logger as Pino } from 'pino';
import { textDestination } from './text-format.js';

export type LogFormat = 'text' | 'json';
export const LOG_LEVELS = ['debug', 'info', 'warn', 'error'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
export type LogFields = Record<string, unknown>;

export interface GitlbLogger {
  debug(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
  /** A logger whose every line carries `bindings` (e.g. { stage: 'health' }). */
  child(bindings: LogFields): GitlbLogger;
  isLevelEnabled(level: LogLevel): boolean;
}

export interface LoggerOptions {
  node: string;
  format?: LogFormat; // default: text on a terminal, json otherwise
  level?: LogLevel;
  /** The revision the node serves right now, added to every line. */
  revision?: () => string | null;
  /** Where lines go (default stderr). */
  out?: { write(s: string): unknown; isTTY?: boolean };
}

export function parseLogFormat(s: string): LogFormat {
  if (s === 'text' || s === 'json') return s;
  throw new Error(`--log-format: expected text or json, got '${s}'`);
}

export function parseLogLevel(s: string): LogLevel {
  if ((LOG_LEVELS as readonly string[]).includes(s)) return s as LogLevel;
  throw new Error(`--log-level: expected ${LOG_LEVELS.join(', ')}, got '${s}'`);
}

function wrap(p: Pino): GitlbLogger {
  const at = (level: 'debug' | 'info' | 'warn' | 'error') => (msg: string, fields?: LogFields) =>
    fields ? p[level](fields, msg) : p[level](msg);
  return {
    debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error'),
    child: (bindings) => wrap(p.child(bindings)),
    isLevelEnabled: (level) => p.isLevelEnabled(level),
  };
}

export function createLogger(o: LoggerOptions): GitlbLogger {
  const out = o.out ?? process.stderr;
  const format = o.format ?? (out.isTTY ? 'text' : 'json');
  const dest = format === 'text' ? textDestination(out) : { write: (s: string) => void out.write(s) };
  const p = pino({
    level: o.level ?? 'info',
    base: { node: o.node },
    timestamp: format === 'text' ? pino.stdTimeFunctions.epochTime : pino.stdTimeFunctions.isoTime,
    formatters: { level: (label, number) => (format === 'text' ? { level: number } : { level: label }) },
    mixin: () => {
      const revision = o.revision?.();
      return revision ? { revision } : {};
    },
    // a field set at the call site (the revision being attempted) wins over the served one
    mixinMergeStrategy: (merge, mixin) => ({ ...mixin, ...merge }),
  }, dest);
  return wrap(p);
}
