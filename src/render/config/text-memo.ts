// A result remembered per file path while the file's text stays the same: a revision usually changes a few files of
// many, so the next revision recomputes only those. Bounded twice, because the texts come from a repository anyone
// with push access fills: `retainOnly` drops the paths the current revision no longer has (a series of revisions
// at new paths would otherwise keep every old text), and the texts held never exceed a byte budget (the oldest
// entries go first). A hit needs the very same text, so a changed file is never served from the memo. No I/O.

export class TextMemo<T> {
  private readonly entries = new Map<string, { text: string; bytes: number; value: T }>();
  private held = 0;
  private computed = 0;

  /** @param budgetBytes the most text bytes held at once; a text larger than that is computed but not kept. */
  constructor(private readonly budgetBytes: number) {}

  /** The value for `text` at `path`: remembered when the text is the one remembered, else computed (and kept). */
  get(path: string, text: string, bytes: number, compute: (text: string) => T): T {
    const hit = this.entries.get(path);
    if (hit && hit.text === text) return hit.value;
    const value = compute(text);
    this.computed += 1;
    this.drop(path);
    if (bytes > this.budgetBytes) return value;
    while (this.held + bytes > this.budgetBytes) this.drop(this.entries.keys().next().value!);
    this.entries.set(path, { text, bytes, value });
    this.held += bytes;
    return value;
  }

  /** Forgets every path not in `paths` (called with the files of the revision just judged). */
  retainOnly(paths: ReadonlySet<string>): void {
    for (const path of [...this.entries.keys()]) if (!paths.has(path)) this.drop(path);
  }

  /** Bytes of text held (the sum of the `bytes` given with each kept entry). */
  get bytes(): number {
    return this.held;
  }

  get size(): number {
    return this.entries.size;
  }

  /** How many times `compute` ran (misses), since this memo was made. */
  get computations(): number {
    return this.computed;
  }

  private drop(path: string): void {
    const hit = this.entries.get(path);
    if (!hit) return;
    this.entries.delete(path);
    this.held -= hit.bytes;
  }
}
