// `gitlb` dispatcher: discovers subcommands from ./commands/ so each command stays in its own file.
import { readdirSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { dirname, join, extname, basename } from 'node:path';
import { type CliCommand, UsageError } from './command.js';

const commandsDir = join(dirname(fileURLToPath(import.meta.url)), 'commands');

async function loadCommands(): Promise<Map<string, CliCommand>> {
  const ext = extname(fileURLToPath(import.meta.url)); // .ts under tsx, .js from dist
  const files = readdirSync(commandsDir)
    .filter((f) => extname(f) === ext && !f.endsWith('.d.ts') && !f.includes('.test.'))
    .sort();
  const commands = new Map<string, CliCommand>();
  for (const file of files) {
    const mod = (await import(pathToFileURL(join(commandsDir, file)).href)) as { command?: CliCommand };
    if (mod.command) commands.set(mod.command.name, mod.command);
    else throw new Error(`internal: ${basename(file)} exports no command`);
  }
  return commands;
}

function topLevelHelp(commands: Map<string, CliCommand>): string {
  const width = Math.max(...[...commands.keys()].map((n) => n.length), 4);
  const lines = [...commands.values()].map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`);
  return [
    'gitlb — a Git-driven L4 load balancer (XDP data plane, TypeScript reconciler)',
    '',
    'usage: gitlb <command> [options]      gitlb <command> --help',
    '',
    'commands:',
    ...lines,
    '',
  ].join('\n');
}

export async function runCli(argv: string[]): Promise<number> {
  const commands = await loadCommands();
  const [name, ...rest] = argv;
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    process.stdout.write(topLevelHelp(commands));
    return name ? 0 : 2;
  }
  const command = commands.get(name);
  if (!command) {
    process.stderr.write(`gitlb: unknown command '${name}'\n\n${topLevelHelp(commands)}`);
    return 2;
  }
  if (rest.includes('--help') || rest.includes('-h')) {
    process.stdout.write(command.help.endsWith('\n') ? command.help : command.help + '\n');
    return 0;
  }
  try {
    return await command.run(rest);
  } catch (err) {
    if (err instanceof UsageError || (err as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
      process.stderr.write(`gitlb ${name}: ${(err as Error).message}\n(see: gitlb ${name} --help)\n`);
      return 2;
    }
    process.stderr.write(`gitlb ${name}: ${(err as Error).message}\n`);
    return 2;
  }
}

// Run directly under tsx (tests, development): `node --import tsx src/cli/main.ts ...`.
if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  process.exitCode = await runCli(process.argv.slice(2));
}
