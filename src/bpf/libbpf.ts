// gitlb's TypeScript API over libbpf (Node-API addon in ./napi). Everything in the
// project that touches BPF objects, maps, programs or links goes through here.
// Sizes are checked before each syscall; errors carry `.code` (errno name).
import { readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { native, type NativeMapDesc } from './addon.js';
import { attachTc, attachXdp, type TcAttachOptions, type TcAttachment, type XdpAttachment } from './attach.js';
import { ensurePinDir } from './bpffs.js';
import { bpfError, named, type BpfError } from './errors.js';
import { bpfObjectPath } from './paths.js';

export { bpfError, type BpfError, type BpfErrorCode } from './errors.js';
export {
  detachPinnedLink, queryTc, queryTcClsact, queryXdp, type TcAttachOptions, type TcAttachment, type XdpAttachment,
} from './attach.js';


export const MapType = {
  hash: 1, array: 2, percpuHash: 5, percpuArray: 6, lruHash: 9, lruPercpuHash: 10,
  arrayOfMaps: 12, hashOfMaps: 13,
} as const;
const PERCPU_TYPES = new Set<number>([MapType.percpuHash, MapType.percpuArray, MapType.lruPercpuHash, 15 /* percpu cgroup storage */]);
const MAP_IN_MAP_TYPES = new Set<number>([MapType.arrayOfMaps, MapType.hashOfMaps]);

export const UpdateFlags = { any: 0, noexist: 1, exist: 2, lock: 4 } as const;
export type UpdateFlag = keyof typeof UpdateFlags;

export const XdpAction = { aborted: 0, drop: 1, pass: 2, tx: 3, redirect: 4 } as const;
export const TcAction = { ok: 0, shot: 2, redirect: 7 } as const;
/** BPF_PROG_TEST_RUN flag: run each repetition on a fresh frame that is really sent (XDP). */
export const BPF_F_TEST_XDP_LIVE_FRAMES = 2;


let cpuCount: number | undefined;
export function possibleCpus(): number {
  return (cpuCount ??= native().numPossibleCpus());
}

/** Who owns the fds: a BpfObject (closes them all at once) or a standalone map. */
interface Owner { closed: boolean; what: string; shared?: boolean; /** keeps the native object alive while maps/programs are referenced */ handle?: unknown }

export interface MapSpec {
  name: string; type: number; keySize: number; valueSize: number; maxEntries: number; flags?: number;
  /** Map-in-map only: a map of the kind its inner maps will be (the kernel copies its description). */
  inner?: BpfMap;
}

export class BpfMap {
  readonly name: string;
  readonly type: number;
  readonly keySize: number;
  /** Value size as declared (per CPU for per-CPU maps; 4 for map-in-map: fd in, id out). */
  readonly valueSize: number;
  readonly maxEntries: number;
  readonly flags: number;
  readonly perCpu: boolean;
  /** Bytes the kernel reads/writes for one value: valueSize rounded to 8 x possible CPUs for per-CPU maps. */
  readonly valueBufferSize: number;
  readonly pinPath: string | null;
  /** True when the map was taken over from an existing pin on load (its state survived). */
  readonly reused: boolean;
  readonly btfKeyType: string;
  readonly btfValueType: string;
  #fd: number;
  #owner: Owner;

  /** @internal use BpfObject.map(), BpfMap.open() or BpfMap.createInner() */
  constructor(desc: Omit<NativeMapDesc, 'internal'> & { internal?: boolean }, owner: Owner) {
    this.name = desc.name;
    this.type = desc.type;
    this.keySize = desc.keySize;
    this.valueSize = desc.valueSize;
    this.maxEntries = desc.maxEntries;
    this.flags = desc.flags;
    this.pinPath = desc.pinPath;
    this.reused = desc.reused;
    this.btfKeyType = desc.btfKeyType;
    this.btfValueType = desc.btfValueType;
    this.perCpu = PERCPU_TYPES.has(desc.type);
    this.valueBufferSize = this.perCpu ? Math.ceil(desc.valueSize / 8) * 8 * possibleCpus() : desc.valueSize;
    this.#fd = desc.fd;
    this.#owner = owner;
  }

  get fd(): number {
    if (this.#owner.closed) throw bpfError('EBADF', `map '${this.name}': ${this.#owner.what} is closed`);
    return this.#fd;
  }

  get closed(): boolean {
    return this.#owner.closed;
  }

  /** Opens a map pinned at `path`; the returned map owns its fd (close() it). */
  static open(path: string, name?: string): BpfMap {
    const fd = native().objGet(path);
    try {
      const info = native().mapInfo(fd);
      return new BpfMap({ ...info, name: name ?? info.name, fd, pinPath: path, reused: true, btfKeyType: '',
        btfValueType: '' }, { closed: false, what: `pinned map ${path}` });
    } catch (e) {
      native().closeFd(fd);
      throw e;
    }
  }

  /** Opens a loaded map by id (e.g. one a running program uses); the returned map owns its fd (close() it). */
  static fromId(id: number): BpfMap {
    const fd = named(`map id ${id}`, () => native().mapGetFdById(id));
    try {
      const info = native().mapInfo(fd);
      return new BpfMap({ ...info, fd, pinPath: null, reused: true, btfKeyType: '', btfValueType: '' },
        { closed: false, what: `map id ${id}` });
    } catch (e) {
      native().closeFd(fd);
      throw e;
    }
  }

  /** Creates a standalone map (typically the inner map of a map-in-map); it owns its fd. */
  static create(spec: MapSpec): BpfMap {
    const fd = named(`map '${spec.name}'`, () =>
      native().mapCreate(spec.type, spec.name.slice(0, 15), spec.keySize, spec.valueSize, spec.maxEntries, spec.flags ?? 0,
        spec.inner ? spec.inner.fd : -1));
    const { inner: _inner, ...desc } = spec;
    return new BpfMap({ ...desc, flags: spec.flags ?? 0, fd, pinPath: null, reused: false, btfKeyType: '', btfValueType: '' },
      { closed: false, what: `map '${spec.name}'` });
  }

  /** An inner map compatible with `outer`'s template (same type/sizes), ready to fill and swap in with setInner(). */
  static createInner(spec: MapSpec): BpfMap {
    return BpfMap.create(spec);
  }

  private checkKey(key: Buffer): void {
    if (!Buffer.isBuffer(key)) throw bpfError('EINVAL', `map '${this.name}': key must be a Buffer`);
    if (key.length !== this.keySize)
      throw bpfError('EINVAL', `map '${this.name}': key is ${key.length} bytes, expected ${this.keySize}`);
  }

  private checkValue(value: Buffer, size: number): void {
    if (!Buffer.isBuffer(value)) throw bpfError('EINVAL', `map '${this.name}': value must be a Buffer`);
    if (value.length !== size)
      throw bpfError('EINVAL', `map '${this.name}': value is ${value.length} bytes, expected ${size}`);
  }

  /** The value, or null when the key is absent. Per-CPU maps return all CPUs' values concatenated. */
  lookup(key: Buffer): Buffer | null {
    this.checkKey(key);
    // Allocating in JS (pooled; the kernel overwrites every byte) is cheaper than a Buffer made by the addon.
    const out = Buffer.allocUnsafe(this.valueBufferSize);
    return named(`map '${this.name}'`, () => native().mapLookupInto(this.fd, key, out)) ? out : null;
  }

  /** Allocation-free lookup into `out` (valueBufferSize bytes); returns false when absent. */
  lookupInto(key: Buffer, out: Buffer): boolean {
    this.checkKey(key);
    this.checkValue(out, this.valueBufferSize);
    return named(`map '${this.name}'`, () => native().mapLookupInto(this.fd, key, out));
  }

  /** Per-CPU values (one Buffer of valueSize per possible CPU), or null when absent. */
  lookupPerCpu(key: Buffer): Buffer[] | null {
    if (!this.perCpu) throw bpfError('EINVAL', `map '${this.name}' is not a per-CPU map`);
    const raw = this.lookup(key);
    if (!raw) return null;
    const stride = Math.ceil(this.valueSize / 8) * 8;
    return Array.from({ length: possibleCpus() }, (_, i) => raw.subarray(i * stride, i * stride + this.valueSize));
  }

  /** Per-CPU value summed over CPUs as consecutive little-endian u64 counters (valueSize must be a multiple of 8). */
  lookupPerCpuSum(key: Buffer): bigint[] | null {
    if (this.valueSize % 8 !== 0)
      throw bpfError('EINVAL', `map '${this.name}': summing needs u64 counters, value is ${this.valueSize} bytes`);
    const per = this.lookupPerCpu(key);
    if (!per) return null;
    const sums = new Array<bigint>(this.valueSize / 8).fill(0n);
    for (const v of per) for (let i = 0; i < sums.length; i++) sums[i] += v.readBigUInt64LE(i * 8);
    return sums;
  }

  /** Writes a value. For per-CPU maps a single valueSize value is replicated to every CPU. */
  update(key: Buffer, value: Buffer, flags: UpdateFlag = 'any'): void {
    this.checkKey(key);
    const full = this.expandValue(value);
    const f = UpdateFlags[flags];
    if (f === undefined) throw bpfError('EINVAL', `map '${this.name}': unknown update flag '${flags}'`);
    if (MAP_IN_MAP_TYPES.has(this.type)) throw bpfError('EINVAL', `map '${this.name}' holds maps: use setInner()`);
    named(`map '${this.name}'`, () => native().mapUpdate(this.fd, key, full, f));
  }

  private expandValue(value: Buffer): Buffer {
    if (this.perCpu && Buffer.isBuffer(value) && value.length === this.valueSize && value.length !== this.valueBufferSize) {
      const stride = Math.ceil(this.valueSize / 8) * 8;
      const full = Buffer.alloc(this.valueBufferSize);
      for (let i = 0; i < possibleCpus(); i++) value.copy(full, i * stride);
      return full;
    }
    this.checkValue(value, this.valueBufferSize);
    return value;
  }

  /** Deletes a key; false when it was not there. */
  delete(key: Buffer): boolean {
    this.checkKey(key);
    return named(`map '${this.name}'`, () => native().mapDelete(this.fd, key));
  }

  /** Deletes a key and returns the value it held at that moment (hash maps; one system call), or null when it was
   * not there: what a caller deleted, not what it read before (the SNAT sweep's check, dataplane/snat.ts). */
  lookupAndDelete(key: Buffer): Buffer | null {
    this.checkKey(key);
    return named(`map '${this.name}'`, () => native().mapLookupAndDelete(this.fd, key, this.valueBufferSize));
  }

  /**
   * Every key currently in the map (arrays: every index). Keys deleted concurrently by a program
   * make the kernel restart the walk; the walk is bounded and duplicates are dropped.
   */
  keys(): Buffer[] {
    const all = named(`map '${this.name}'`, () => native().mapKeys(this.fd, this.keySize, 2 * this.maxEntries + 16));
    const out: Buffer[] = [];
    const seen = new Set<string>();
    for (let o = 0; o < all.length; o += this.keySize) {
      const k = all.subarray(o, o + this.keySize);
      const id = k.toString('latin1');
      if (seen.has(id)) continue;
      seen.add(id);
      out.push(k);
    }
    return out;
  }

  /** Writes `count` entries from packed keys/values buffers in one syscall (per-CPU: full per-CPU values). */
  updateBatch(keys: Buffer, values: Buffer, count = keys.length / this.keySize, flags: UpdateFlag = 'any'): number {
    if (!Number.isInteger(count) || count < 0) throw bpfError('EINVAL', `map '${this.name}': bad batch count ${count}`);
    this.checkValue(keys, count * this.keySize);
    this.checkValue(values, count * this.valueBufferSize);
    if (count === 0) return 0;
    return named(`map '${this.name}'`, () => native().mapUpdateBatch(this.fd, keys, values, count, UpdateFlags[flags]));
  }

  /** Reads the whole map in batches: packed keys and values plus the entry count. */
  lookupBatch(chunk = 1024): { keys: Buffer; values: Buffer; count: number } {
    return named(`map '${this.name}'`, () =>
      native().mapLookupBatch(this.fd, this.keySize, this.valueBufferSize, chunk, false));
  }

  /**
   * The whole map as pages of at most `chunk` entries (more only when one hash bucket holds more), one batched
   * system call each, read when the iterator is advanced: a caller that yields to the event loop between pages never
   * holds it for a whole big table (flow sync's scans). Entries added or removed between pages may or may not be
   * seen; none is seen twice unless it moved.
   */
  *lookupBatchPages(chunk = 1024): Generator<{ keys: Buffer; values: Buffer; count: number }> {
    let token: Buffer | null = null;
    do {
      const page: { keys: Buffer; values: Buffer; count: number; token: Buffer | null } = named(`map '${this.name}'`, () =>
        native().mapLookupBatchPage(this.fd, this.keySize, this.valueBufferSize, chunk, token));
      token = page.token;
      if (page.count > 0) yield page;
    } while (token);
  }

  /** Reads and removes every entry (hash maps). */
  lookupAndDeleteBatch(chunk = 1024): { keys: Buffer; values: Buffer; count: number } {
    return named(`map '${this.name}'`, () =>
      native().mapLookupBatch(this.fd, this.keySize, this.valueBufferSize, chunk, true));
  }

  /** Deletes `count` packed keys in one syscall. */
  deleteBatch(keys: Buffer, count = keys.length / this.keySize): number {
    if (!Number.isInteger(count) || count < 0) throw bpfError('EINVAL', `map '${this.name}': bad batch count ${count}`);
    this.checkValue(keys, count * this.keySize);
    if (count === 0) return 0;
    return named(`map '${this.name}'`, () => native().mapDeleteBatch(this.fd, keys, count));
  }

  /** Removes every entry of a hash-like map; returns how many were removed. */
  clear(): number {
    const keys = this.keys();
    if (keys.length === 0) return 0;
    return this.deleteBatch(Buffer.concat(keys), keys.length);
  }

  /** Entries as [key, value] pairs (batched where the kernel supports it). */
  entries(): Array<[Buffer, Buffer]> {
    let packed: { keys: Buffer; values: Buffer; count: number };
    try {
      packed = this.lookupBatch();
    } catch (e) {
      if ((e as BpfError).code !== 'EINVAL' && (e as BpfError).code !== 'ENOTSUPP' && (e as BpfError).code !== 'EOPNOTSUPP') throw e;
      const out: Array<[Buffer, Buffer]> = [];
      for (const k of this.keys()) {
        const v = this.lookup(k);
        if (v) out.push([k, v]);
      }
      return out;
    }
    const out: Array<[Buffer, Buffer]> = [];
    for (let i = 0; i < packed.count; i++)
      out.push([packed.keys.subarray(i * this.keySize, (i + 1) * this.keySize),
        packed.values.subarray(i * this.valueBufferSize, (i + 1) * this.valueBufferSize)]);
    return out;
  }

  /** Atomically points `outerKey` of this map-in-map at `inner` (the packet path sees old or new, never a mix). */
  setInner(outerKey: Buffer, inner: BpfMap): void {
    if (!MAP_IN_MAP_TYPES.has(this.type)) throw bpfError('EINVAL', `map '${this.name}' is not a map-in-map`);
    this.checkKey(outerKey);
    const v = Buffer.alloc(4);
    v.writeUInt32LE(inner.fd);
    named(`map '${this.name}' <- inner '${inner.name}'`, () => native().mapUpdate(this.fd, outerKey, v, 0));
  }

  /**
   * Points several keys at their inner maps in one BPF_MAP_UPDATE_BATCH. Each key switches atomically; the
   * kernel waits once for running programs (an RCU grace period) instead of once per key, which is what makes
   * switching many rings cheap. On failure the error's `written` says how many keys were switched.
   */
  setInnerBatch(outerKeys: Buffer[], inners: BpfMap[]): void {
    if (!MAP_IN_MAP_TYPES.has(this.type)) throw bpfError('EINVAL', `map '${this.name}' is not a map-in-map`);
    if (outerKeys.length !== inners.length) throw bpfError('EINVAL', `map '${this.name}': ${outerKeys.length} keys, ${inners.length} inner maps`);
    if (outerKeys.length === 0) return;
    for (const k of outerKeys) this.checkKey(k);
    const values = Buffer.alloc(4 * inners.length);
    inners.forEach((m, i) => values.writeUInt32LE(m.fd, 4 * i));
    named(`map '${this.name}'`, () => native().mapUpdateBatch(this.fd, Buffer.concat(outerKeys), values, outerKeys.length, 0));
  }

  /** Kernel id of the inner map at `outerKey`, or null. */
  innerMapId(outerKey: Buffer): number | null {
    if (!MAP_IN_MAP_TYPES.has(this.type)) throw bpfError('EINVAL', `map '${this.name}' is not a map-in-map`);
    const v = this.lookup(outerKey);
    return v ? v.readUInt32LE(0) : null;
  }

  /** Opens the inner map currently at `outerKey` (caller closes it), or null. */
  openInner(outerKey: Buffer): BpfMap | null {
    const id = this.innerMapId(outerKey);
    if (id === null) return null;
    const fd = named(`map '${this.name}'`, () => native().mapGetFdById(id));
    const info = native().mapInfo(fd);
    return new BpfMap({ ...info, fd, pinPath: null, reused: false, btfKeyType: '', btfValueType: '' },
      { closed: false, what: `inner map ${id}` });
  }

  /**
   * Makes the map read-only for every process, for good (BPF_MAP_FREEZE): updates and deletes through the
   * syscall fail with EPERM from now on; programs still read it.
   */
  freeze(): void {
    named(`map '${this.name}'`, () => native().mapFreeze(this.fd));
  }

  /** Kernel map id. */
  id(): number {
    return named(`map '${this.name}'`, () => native().mapInfo(this.fd).id);
  }

  pin(path: string): void {
    ensurePinDir(dirname(path));
    named(`map '${this.name}'`, () => native().objPin(this.fd, path));
  }

  /** Closes a standalone map's fd; maps of a BpfObject close with the object. */
  close(): void {
    if (this.#owner.closed) return;
    if (this.#owner.shared) return; // the BpfObject closes its maps
    this.#owner.closed = true;
    native().closeFd(this.#fd);
  }
}

/** The CPUs online now (from /sys/devices/system/cpu/online, e.g. "0-3,6"). */
export function onlineCpus(): number[] {
  const out: number[] = [];
  for (const part of readFileSync('/sys/devices/system/cpu/online', 'utf8').trim().split(',')) {
    const [a, b] = part.split('-').map(Number) as [number, number | undefined];
    for (let c = a; c <= (b ?? a); c++) out.push(c);
  }
  return out;
}

/**
 * Runs `fn` with the calling thread on `cpu` alone and then puts its previous CPU set back. For map writes whose
 * placement depends on the CPU of the syscall (a per-CPU LRU map takes an insert from that CPU's share).
 */
export function onCpu<T>(cpu: number, fn: () => T): T {
  const prev = named(`CPU ${cpu}`, () => native().threadCpus([cpu]));
  try {
    return fn();
  } finally {
    native().threadCpus(prev);
  }
}

/**
 * Returns once every BPF program that was running when it was called has finished. The kernel waits for running
 * programs (an RCU grace period) after an update of a map-in-map, so that userspace knows none still uses the
 * old inner map: one update of a private one-slot array of maps buys that wait. After a program swap in a link,
 * this is what tells that the old program writes its maps no more.
 */
export function waitForPrograms(): void {
  const n = native();
  const inner = named('wait for programs', () => n.mapCreate(MapType.array, 'gitlb_wait_in', 4, 4, 1, 0, -1));
  let outer = -1;
  try {
    outer = named('wait for programs', () => n.mapCreate(MapType.arrayOfMaps, 'gitlb_wait', 4, 4, 1, 0, inner));
    const v = Buffer.alloc(4);
    v.writeUInt32LE(inner);
    named('wait for programs', () => n.mapUpdate(outer, Buffer.alloc(4), v, 0));
  } finally {
    if (outer >= 0) n.closeFd(outer);
    n.closeFd(inner);
  }
}

export interface TestRunOptions {
  data: Buffer;
  repeat?: number;
  /** Output buffer size; default: input length + 256 (room for encapsulation). 0 with live frames. */
  dataOutSize?: number;
  flags?: number;
  ctxIn?: Buffer;
  ctxOutSize?: number;
  cpu?: number;
  batchSize?: number;
}

export interface TestRunResult { retval: number; data: Buffer; durationNs: number; ctxOut: Buffer }

export class BpfProgram {
  readonly name: string;
  readonly type: number;
  readonly section: string;
  #fd: number;
  #owner: Owner;

  /** @internal */
  constructor(desc: { name: string; type: number; section: string; fd: number }, owner: Owner) {
    this.name = desc.name;
    this.type = desc.type;
    this.section = desc.section;
    this.#fd = desc.fd;
    this.#owner = owner;
  }

  get fd(): number {
    if (this.#owner.closed) throw bpfError('EBADF', `program '${this.name}': ${this.#owner.what} is closed`);
    return this.#fd;
  }

  /** Kernel id, tag and sizes (translated and JITed bytes) of the loaded program; `funcs`: the same per function,
   * the main function first, then its BPF-to-BPF subprograms in instruction order (empty without BTF func info). */
  info(): { id: number; name: string; tag: string; type: number; xlatedBytes: number; jitedBytes: number;
    funcs: Array<{ xlatedBytes: number; jitedBytes: number }> } {
    return named(`program '${this.name}'`, () => native().progInfo(this.fd));
  }

  /** BPF_PROG_TEST_RUN. `durationNs` is the kernel's average per repetition. */
  testRun(opts: TestRunOptions): TestRunResult {
    if (!Buffer.isBuffer(opts.data)) throw bpfError('EINVAL', `program '${this.name}': test run data must be a Buffer`);
    const live = ((opts.flags ?? 0) & BPF_F_TEST_XDP_LIVE_FRAMES) !== 0;
    const dataOutSize = opts.dataOutSize ?? (live ? 0 : opts.data.length + 256);
    const r = named(`program '${this.name}'`, () => native().progTestRun(this.fd, {
      data: opts.data, repeat: opts.repeat ?? 1, dataOutSize, flags: opts.flags ?? 0, ctxIn: opts.ctxIn,
      ctxOutSize: opts.ctxOutSize ?? 0, cpu: opts.cpu ?? 0, batchSize: opts.batchSize ?? 0,
    }));
    return { retval: r.retval, data: r.data, durationNs: r.durationNs, ctxOut: r.ctx };
  }

  /** See attach.ts attachXdp: link-based, pinned when `pinPath` is given, never replaces foreign programs. */
  attachXdp(ifname: string, mode: 'native' | 'generic' | 'auto' = 'auto', pinPath?: string): XdpAttachment {
    return attachXdp(this, ifname, mode, pinPath);
  }

  /** See attach.ts attachTc: tcx link (pinned when `pinPath` is given) or clsact filter. */
  attachTc(ifname: string, direction: 'ingress' | 'egress', pinPath?: string, opts: TcAttachOptions = {}): TcAttachment {
    return attachTc(this, ifname, direction, pinPath, opts);
  }
}

export interface LoadOptions {
  /** Pin every (non-internal) map as <pinRoot>/<map name>; reuse existing pins. */
  pinRoot?: string;
  /** Default true: adopt maps already pinned under pinRoot (state survives restarts). false: start fresh. */
  reusePinnedMaps?: boolean;
  /** Replace pins whose type/sizes/max_entries/flags no longer match (e.g. resized conntrack); default false (error). */
  replaceIncompatiblePins?: boolean;
  /** max_entries overrides applied before load, by map name. */
  mapMaxEntries?: Record<string, number>;
  /**
   * Maps the program uses instead of creating or adopting its own, by name (a resized table,
   * src/bpf/dataplane/resize.ts). Such a map is not pinned by the load; the caller keeps owning it.
   */
  mapFds?: Record<string, BpfMap>;
}

export class BpfObject {
  readonly path: string;
  #handle: unknown;
  #owner: Owner;
  #maps = new Map<string, BpfMap>();
  #programs = new Map<string, BpfProgram>();

  private constructor(path: string, loaded: Awaited<ReturnType<ReturnType<typeof native>['loadObject']>>) {
    this.path = path;
    this.#handle = loaded.handle;
    this.#owner = { closed: false, what: `object ${path}`, shared: true, handle: loaded.handle };
    for (const m of loaded.maps) this.#maps.set(m.name, new BpfMap(m, this.#owner));
    for (const p of loaded.programs) this.#programs.set(p.name, new BpfProgram(p, this.#owner));
  }

  /** Opens and loads an object file (a path, or a name under build/bpf/) on a worker thread. */
  static async load(pathOrName: string, opts: LoadOptions = {}): Promise<BpfObject> {
    const path = bpfObjectPath(pathOrName);
    for (const [name, n] of Object.entries(opts.mapMaxEntries ?? {}))
      if (!Number.isInteger(n) || n <= 0 || n > 0xffffffff)
        throw bpfError('EINVAL', `mapMaxEntries.${name}: ${n} is not a positive 32-bit integer`);
    const pinRoot = opts.pinRoot ? ensurePinDir(opts.pinRoot) : undefined;
    const mapFds = opts.mapFds ? Object.fromEntries(Object.entries(opts.mapFds).map(([k, m]) => [k, m.fd])) : undefined;
    const loaded = await native().loadObject(path, {
      pinRoot, reusePinnedMaps: opts.reusePinnedMaps ?? true, replaceIncompatiblePins: opts.replaceIncompatiblePins ?? false,
      mapMaxEntries: opts.mapMaxEntries, ...(mapFds && { mapFds }),
    });
    return new BpfObject(path, loaded);
  }

  get closed(): boolean {
    return this.#owner.closed;
  }

  map(name: string): BpfMap {
    const m = this.#maps.get(name);
    if (!m) throw bpfError('ENOENT', `map '${name}' not found in ${this.path} (has: ${[...this.#maps.keys()].join(', ')})`);
    return m;
  }

  maps(): BpfMap[] {
    return [...this.#maps.values()];
  }

  program(name: string): BpfProgram {
    const p = this.#programs.get(name);
    if (!p) throw bpfError('ENOENT', `program '${name}' not found in ${this.path} (has: ${[...this.#programs.keys()].join(', ')})`);
    return p;
  }

  programs(): BpfProgram[] {
    return [...this.#programs.values()];
  }

  /** Layout of a struct from the object's BTF (null when absent). Offsets in bytes. */
  btfStruct(name: string): { size: number; members: Array<{ name: string; offset: number; bitSize: number; size: number }> } | null {
    if (this.#owner.closed) throw bpfError('EBADF', `${this.#owner.what} is closed`);
    return native().btfStruct(this.#handle, name);
  }

  /**
   * A new standalone map like this object's map `name` (type, key and value size, flags, BTF types) holding
   * `maxEntries`, created off the main thread (the kernel preallocates a hash table's elements: about 0.7 s per
   * million entries). The kernel's refusal (ENOMEM, E2BIG) is thrown with the size named. The caller closes it;
   * this object must stay open until it resolves.
   */
  async createMapLike(name: string, maxEntries: number): Promise<BpfMap> {
    if (this.#owner.closed) throw bpfError('EBADF', `${this.#owner.what} is closed`);
    const like = this.map(name);
    let fd: number;
    try {
      fd = await native().mapCreateLike(this.#handle, name, maxEntries);
    } catch (e) {
      throw named(`map '${name}'`, () => { throw e; });
    }
    return new BpfMap({ name, type: like.type, keySize: like.keySize, valueSize: like.valueSize, maxEntries, flags: like.flags,
      fd, pinPath: null, reused: false, btfKeyType: like.btfKeyType, btfValueType: like.btfValueType },
    { closed: false, what: `map '${name}' (${maxEntries} entries)` });
  }

  /** Closes programs' and maps' fds. Pinned maps and links stay in the kernel. */
  close(): void {
    if (this.#owner.closed) return;
    this.#owner.closed = true;
    native().closeObject(this.#handle);
  }
}
