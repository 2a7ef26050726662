// `gitlb` dispatcher: discovers subcommands from ./commands/ so each command stays in its own file, and turns
// their outcome into one exit-status convention: 0 success, 1 runtime failure, 2 usage error.
import { readdirSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { dirname, join, extname, basename } from 'node:path';
import { Command, CommanderError } from 'commander';
import { type CliCommand, EXIT, UsageError } from './command.js';
import { removeTempDirsOnSignal } from '../reconciler/temp/temp-dirs.js';

const commandsDir = join(dirname(fileURLToPath(import.meta.url)), 'commands');

export async function loadCommands(): Promise<CliCommand[]> {
  const ext = extname(fileURLToPath(import.meta.url)); // .ts under tsx, .js from dist
  const files = readdirSync(commandsDir)
    .filter((f) => extname(f) === ext && !f.endsWith('.d.ts') && !f.includes('.test.'))
    .sort();
  const commands: CliCommand[] = [];
  for (const file of files) {
    const mod = (await import(pathToFileURL(join(commandsDir, file)).href)) as { command?: CliCommand };
    if (!mod.command) throw new Error(`internal: ${basename(file)} exports no command`);
    commands.push(mod.command);
  }
  return commands;
}

/** `gitlb lab up` for the lab's `up` command: the name users type, for messages. */
function commandPath(cmd: Command): string {
  const names: string[] = [];
  for (let c: Command | null = cmd; c; c = c.parent) names.unshift(c.name());
  return names.join(' ');
}

/** Every command throws instead of exiting and reports usage errors as `gitlb <cmd>: message` plus a help hint. */
function configureTree(cmd: Command): void {
  const path = commandPath(cmd);
  cmd.exitOverride();
  cmd.configureOutput({
    writeOut: (s) => process.stdout.write(s),
    writeErr: (s) => process.stderr.write(s),
    outputError: (s, write) => write(`${path}: ${s.replace(/^error: /, '')}`),
  });
  cmd.showHelpAfterError(`(see: ${path} --help)`);
  for (const sub of cmd.commands) configureTree(sub);
}

/** The whole command tree; actions store their exit status in `result`. */
export async function buildProgram(result: { code: number }): Promise<Command> {
  const program = new Command('gitlb')
    .description('gitlb — a Git-driven L4 load balancer (XDP data plane, TypeScript reconciler)')
    .usage('<command> [options]')
    .addHelpText('after', '\nRun `gitlb <command> --help` for a command\'s options.\nExit status: 0 success, 1 runtime failure, 2 usage error.\n');
  for (const c of await loadCommands()) program.addCommand(c.build(result));
  configureTree(program);
  return program;
}

let pipeGuarded = false;
/** `gitlb plan | head -1`: a reader that goes away is not an error; exit quietly instead of a stack trace. */
function exitQuietlyOnClosedPipe(): void {
  if (pipeGuarded) return;
  pipeGuarded = true;
  for (const stream of [process.stdout, process.stderr]) {
    stream.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'EPIPE') process.exit(EXIT.ok);
      throw err;
    });
  }
}

export async function runCli(argv: string[]): Promise<number> {
  exitQuietlyOnClosedPipe();
  const result = { code: EXIT.ok as number };
  const program = await buildProgram(result);
  if (argv.length === 0) {
    process.stderr.write(program.helpInformation());
    return EXIT.usage;
  }
  let current = program;
  program.hook('preAction', (_self, action) => {
    current = action;
  });
  try {
    await program.parseAsync(argv, { from: 'user' });
    return result.code;
  } catch (err) {
    if (err instanceof CommanderError) {
      // Help and version requested are successes; help shown because a subcommand is missing is a usage error.
      if (err.code === 'commander.helpDisplayed' || err.code === 'commander.version') return EXIT.ok;
      if (err.code === 'commander.help') return err.exitCode === 0 ? EXIT.ok : EXIT.usage;
      return EXIT.usage; // already reported by outputError
    }
    const path = commandPath(current);
    if (err instanceof UsageError) {
      process.stderr.write(`${path}: ${err.message}\n(see: ${path} --help)\n`);
      return EXIT.usage;
    }
    process.stderr.write(`${path}: ${(err as Error).message}\n`);
    return EXIT.failure;
  }
}

/** The `gitlb` process (bin/gitlb, or this file run directly): runCli, plus what only a whole process may do. */
export async function cliMain(argv: string[]): Promise<number> {
  // Ctrl-C or a SIGTERM during status, history, doctor or verify removes their temporary Git caches (exit 130/143).
  removeTempDirsOnSignal();
  return runCli(argv);
}

// Run directly under tsx (tests, development): `node --import tsx src/cli/main.ts ...`.
if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  process.exitCode = await cliMain(process.argv.slice(2));
}
