// What README.md and docs/*.md say about the code, as data the docs test compares with the code: `gitlb` command
// lines with their options, repository paths, and the CLI's own command tree (from the same commander program
// bin/gitlb builds, so an option is "accepted" exactly when `gitlb <command> --help` lists it).
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Command } from 'commander';
import { buildProgram } from '../../src/cli/main.js';

export interface DocText {
  where: string; // README.md:LINE
  text: string;
}

export function docFiles(root: string): string[] {
  return ['README.md', ...readdirSync(join(root, 'docs')).filter((f) => f.endsWith('.md')).sort().map((f) => `docs/${f}`)];
}

/** Code the docs show: every line of a fenced block, and every `inline` span of prose (one span per entry); and the
 * command lines of the systemd unit. */
export function codeSpans(root: string): DocText[] {
  const out: DocText[] = [];
  for (const file of docFiles(root)) {
    const lines = readFileSync(join(root, file), 'utf8').split('\n');
    let fenced = false;
    for (const [i, line] of lines.entries()) {
      const where = `${file}:${i + 1}`;
      if (line.trimStart().startsWith('```')) {
        fenced = !fenced;
        continue;
      }
      if (fenced) out.push({ where, text: line });
      else for (const m of line.matchAll(/`([^`]+)`/g)) out.push({ where, text: m[1]! });
    }
  }
  // The systemd unit's command lines are docs a machine runs (the DaemonSet's and the CI snippets' are run by
  // test/kernel/deploy.test.ts).
  for (const [i, line] of readFileSync(join(root, 'deploy/systemd/gitlb.service'), 'utf8').split('\n').entries()) {
    if (/^Exec\w*=/.test(line)) out.push({ where: `deploy/systemd/gitlb.service:${i + 1}`, text: line });
  }
  return out;
}

/** The CLI as `gitlb --help` shows it: command path ('lab up') -> the options it accepts (long, short, aliases). */
export async function cliTree(): Promise<Map<string, Set<string>>> {
  const program = await buildProgram({ code: 0 });
  const tree = new Map<string, Set<string>>();
  const walk = (cmd: Command, path: string[]) => {
    for (const sub of cmd.commands) {
      const opts = new Set(['--help', '-h']);
      for (const o of sub.options) {
        if (o.long) opts.add(o.long);
        if (o.short) opts.add(o.short);
      }
      for (const name of [sub.name(), ...sub.aliases()]) {
        tree.set([...path, name].join(' '), opts);
        walk(sub, [...path, name]);
      }
    }
  };
  walk(program, []);
  return tree;
}

export interface DocCommand {
  where: string;
  command: string; // 'lab up', or the word after gitlb when it is no command
  known: boolean;
  flags: string[];
}

/** Every `gitlb <command> ...` in code: the longest known command path after `gitlb`, and the options written after
 * it up to the end of the span, a shell separator or the next `gitlb`. A shell comment after the command line counts:
 * README explains options there. */
export function docCommands(spans: DocText[], tree: Map<string, Set<string>>): DocCommand[] {
  const out: DocCommand[] = [];
  for (const span of spans) {
    // `gitlb`, `bin/gitlb`, `/opt/gitlb/bin/gitlb` starting a command: not gitlb-lab, gitlb_drops_total, /sys/fs/bpf/gitlb
    const starts = [...span.text.matchAll(/(?<![\w.\/-])(?:(?:[\w.-]*\/)*bin\/)?gitlb\s+/g)];
    for (const [k, start] of starts.entries()) {
      const after = span.text.slice(start.index! + start[0].length, starts[k + 1]?.index ?? span.text.length);
      const rest = after.split(/\s*(?:&&|\|\||[;|<>`])\s*/)[0]!; // up to a shell separator or redirect
      const words = rest.split(/\s+/).filter(Boolean);
      if (words.length === 0 || words[0]!.startsWith('-') || !/^[a-z][a-z-]*$/.test(words[0]!)) continue;
      let command = words[0]!;
      let used = 1;
      while (used < words.length && tree.has(`${command} ${words[used]}`)) command = `${command} ${words[used++]}`;
      const flags = words.slice(used).flatMap((w) => [...w.matchAll(/(?:^|[\s(/,[])(--?[a-zA-Z][a-zA-Z0-9-]*)/g)].map((f) => f[1]!));
      out.push({ where: span.where, command, known: tree.has(command), flags });
    }
  }
  return out;
}
