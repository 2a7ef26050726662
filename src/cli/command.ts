import { join } from 'node:path';
// The contract every `gitlb` subcommand implements: one commander definition per file under ./commands/, so usage,
// defaults, help and shell completion all come from the same place.
import { Argument, Command, CommanderError, InvalidArgumentError, Option } from 'commander';

import { normalizeConfigPath } from '../render/config/index.js';
import { DEFAULT_GIT_TIMEOUT_MS } from '../reconciler/source/deadline.js';

export { Argument, Command, Option, InvalidArgumentError };

/** Exit statuses shared by every command (documented in each `--help`). */
export const EXIT = { ok: 0, failure: 1, usage: 2 } as const;

/** Thrown for bad command-line usage; the CLI prints it with the command's help hint and exits 2. */
export class UsageError extends Error {
  override name = 'UsageError';
}

export interface CommandSpec<O> {
  /** Subcommand name as typed by the user, e.g. `validate`. */
  name: string;
  /** One line for `gitlb --help`. */
  summary: string;
  /** Paragraphs shown below the usage line of `gitlb <name> --help`. */
  description?: string;
  /** What exit statuses 0 and 1 mean for this command (2 is always a usage error). */
  exitStatus?: string;
  /** Declares arguments, options and nested subcommands on `cmd`. */
  define(cmd: Command): void;
  /** Runs the command with the parsed options and positional arguments; resolves to the exit status. Commands
   * with nested subcommands (`lab up`) register their own actions in `define` and leave this out. */
  run?(opts: O, args: string[], cmd: Command): Promise<number>;
}

export interface CliCommand {
  name: string;
  summary: string;
  /** A fresh commander command; its action stores the exit status in `result`. */
  build(result: { code: number }): Command;
  /** Parses `argv` (no action runs); usage errors throw UsageError. For in-process callers and tests. */
  parse(argv: string[]): { opts: Record<string, unknown>; args: string[] };
}

const DEFAULT_EXIT = 'Exit status: 0 success, 1 runtime failure, 2 usage error (bad option or argument).';

/** Joins the lines of each paragraph so commander wraps it to the terminal; indented lines stay as written. */
function reflow(text: string): string {
  return text.trim().replace(/([^\n])\n(?=\S)/g, '$1 ');
}

/** Builds a CliCommand from one definition. */
export function defineCommand<O extends object>(spec: CommandSpec<O>): CliCommand {
  const base = (): Command => {
    const cmd = new Command(spec.name).summary(spec.summary).description(reflow(spec.description ?? spec.summary));
    spec.define(cmd);
    cmd.addHelpText('after', `\n${spec.exitStatus?.trim() ?? DEFAULT_EXIT}\n`);
    return cmd;
  };
  return {
    name: spec.name,
    summary: spec.summary,
    build(result) {
      const cmd = base();
      if (spec.run) {
        const run = spec.run;
        cmd.action(async (...a: unknown[]) => {
          const self = a[a.length - 1] as Command;
          result.code = await run(self.opts() as O, self.args, self);
        });
      }
      return cmd;
    },
    parse(argv) {
      let parsed: { opts: Record<string, unknown>; args: string[] } | null = null;
      const cmd = base();
      cmd.action((...a: unknown[]) => {
        const self = a[a.length - 1] as Command;
        parsed = { opts: self.opts(), args: self.args };
      });
      quietAndThrowing(cmd);
      try {
        cmd.parse(argv, { from: 'user' });
      } catch (err) {
        if (err instanceof CommanderError) throw new UsageError(err.message.replace(/^error: /, ''));
        throw err;
      }
      if (!parsed) throw new UsageError('nothing parsed');
      return parsed;
    },
  };
}

/** Commander writes errors and exits by default: make it throw and keep quiet (the caller reports). */
function quietAndThrowing(cmd: Command): void {
  cmd.exitOverride();
  cmd.configureOutput({ writeOut: () => {}, writeErr: () => {}, outputError: () => {} });
  for (const sub of cmd.commands) quietAndThrowing(sub);
}

/** An option argument parser for integers in [min, max]. */
export function intIn(min: number, max: number): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (!/^-?\d+$/.test(value.trim()) || n < min || n > max) throw new InvalidArgumentError(`expected an integer ${min}..${max}`);
    return n;
  };
}

/** An option argument parser for durations: `90s`, `5m`, `2h`, or plain seconds; returns milliseconds. */
export function duration(value: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(value.trim());
  if (!m) throw new InvalidArgumentError('expected a duration such as 90s, 5m or 2h');
  const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[(m[2] ?? 's') as 'ms' | 's' | 'm' | 'h'];
  return Math.round(Number(m[1]) * unit);
}

/** `--node NAME`: it becomes part of paths (pin root, cache dir, status/<node>.yaml), so only the schema's DNS label. */
export function nodeName(name: string): string {
  if (!/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/.test(name)) throw new InvalidArgumentError(`'${name}' is not a node name (lower-case DNS label)`);
  return name;
}

/** `--git-timeout <seconds>`: the deadline of each Git fetch and push, the same option in every command that reads Git. */
export function gitTimeoutOption(what = 'deadline of every Git fetch and push'): Option {
  return new Option('--git-timeout <seconds>', what).argParser(gitTimeoutSeconds).default(DEFAULT_GIT_TIMEOUT_MS / 1000);
}

/**
 * `--git-timeout <seconds>` of the one-shot commands that reach a config repository over HTTP (`status`,
 * `history`, `verify`, `down`): one help text, so a user who learnt it on one command finds it on the others.
 * `what` names the operations it bounds (`down` also pushes).
 */
export function commandGitTimeoutOption(what: 'fetch' | 'fetch and push' = 'fetch'): Option {
  return gitTimeoutOption(`deadline of each Git ${what} (a slow Git server needs more)`);
}

/** The parsed `--git-timeout` (seconds) as the milliseconds openRemote and withStatusBranch take. */
export function gitTimeoutMs(seconds: number): number {
  return Math.round(seconds * 1000);
}

function gitTimeoutSeconds(text: string): number {
  // "10s" too: the unit the help and docs say, written out
  const s = Number(text.trim().replace(/s$/, ''));
  if (!(s >= 0.1 && s <= 600)) throw new InvalidArgumentError(`'${text}' is not a number of seconds between 0.1 and 600`);
  return s;
}

/** `--path DIR`: the subdirectory of the repository that holds gitlb's config (like Flux's spec.path). */
export function pathOption(): Option {
  // The default's description is what help shows: "(default: the root)", once, not the raw "" beside it.
  return new Option('--path <dir>', "subdirectory of the repository that holds gitlb's config")
    .default('', 'the root')
    .argParser((value) => {
      try {
        return normalizeConfigPath(value);
      } catch (err) {
        throw new InvalidArgumentError((err as Error).message);
      }
    });
}

/** `--format` with its choices and default, one definition for parsing, help and completion. */
export function formatOption(choices: readonly string[], def: string, what = ''): Option {
  return new Option('--format <format>', `output format${what ? `: ${what}` : ''}`).choices(choices).default(def);
}

/** `--bird-config` and `--bird-socket`: where an lb node's generated BIRD file lives and how BIRD is reloaded.
 * One definition for `gitlb run` (which keeps BIRD in step) and `gitlb down` (which withdraws every VIP). */
export function addBirdOptions(cmd: Command): Command {
  for (const o of [
    new Option('--bird-config <file>', "lb nodes with BGP: the generated BIRD file, included by BIRD's main configuration (default <cache-dir>/bird-gitlb.conf; docs/bgp.md)"),
    new Option('--bird-socket <path>', "BIRD's control socket for birdc configure; off: do not drive BIRD even when the config has BGP settings").default('/run/bird/bird.ctl'),
  ])
    cmd.addOption(o);
  return cmd;
}

/** The generated BIRD file's path: --bird-config, else <cache-dir>/bird-gitlb.conf. */
export function birdConfigFile(birdConfig: string | undefined, cacheDir: string): string {
  return birdConfig ?? join(cacheDir, 'bird-gitlb.conf');
}
