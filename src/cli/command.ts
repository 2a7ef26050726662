// The contract every `gitlb` subcommand implements. One file per command under ./commands/.
export interface CliCommand {
  /** Subcommand name as typed by the user, e.g. `validate`. */
  name: string;
  /** One line for `gitlb --help`. */
  summary: string;
  /** Full `gitlb <name> --help` text. */
  help: string;
  /** Runs the command; resolves to the process exit code. */
  run(argv: string[]): Promise<number>;
}

/** Thrown for bad command-line usage; the CLI prints it with the command's help hint and exits 2. */
export class UsageError extends Error {
  override name = 'UsageError';
}
