// How the demo talks: numbered chapters, plain sentences, and every real command shown as `prompt$ command`
// before it runs, with its output indented beneath. Writes to one stream; no other job.
export interface Narrator {
  chapter(title: string): void;
  say(text: string): void;
  command(prompt: string, argv: string[]): void;
  output(text: string, maxLines?: number): void;
  ok(text: string): void;
  warn(text: string): void;
}

const quote = (s: string) => (/^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`);

export function createNarrator(write: (s: string) => void, startedAt = Date.now()): Narrator {
  let chapterNo = 0;
  const clock = () => `${((Date.now() - startedAt) / 1000).toFixed(0).padStart(3)}s`;
  return {
    chapter(title) {
      chapterNo++;
      write(`\n\x1b[1m== ${chapterNo}. ${title}\x1b[0m  [${clock()}]\n`);
    },
    say(text) {
      for (const line of text.split('\n')) write(`   ${line}\n`);
    },
    command(prompt, argv) {
      write(`\x1b[36m${prompt}$ ${argv.map(quote).join(' ')}\x1b[0m\n`);
    },
    output(text, maxLines = 40) {
      const lines = text.replace(/\n+$/, '').split('\n');
      const shown = lines.length > maxLines ? [...lines.slice(0, maxLines), `... (${lines.length - maxLines} more lines)`] : lines;
      for (const line of shown) if (line.length || shown.length > 1) write(`      ${line}\n`);
    },
    ok(text) {
      write(`   \x1b[32m✔ ${text}\x1b[0m\n`);
    },
    warn(text) {
      write(`   \x1b[33m✘ ${text}\x1b[0m\n`);
    },
  };
}
