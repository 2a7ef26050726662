// Typed view of the native addon (src/bpf/napi). Only libbpf.ts should import this.
import { createRequire } from 'node:module';
import { addonPath } from './paths.js';

export interface NativeMapDesc {
  name: string; type: number; fd: number; keySize: number; valueSize: number; maxEntries: number;
  flags: number; internal: boolean; pinPath: string | null; reused: boolean; btfKeyType: string; btfValueType: string;
}
export interface NativeProgDesc { name: string; section: string; type: number; fd: number }
export interface NativeLoaded { handle: unknown; maps: NativeMapDesc[]; programs: NativeProgDesc[] }
export interface NativeBtfMember { name: string; offset: number; bitOffset: number; bitSize: number; size: number }
export interface NativeProgInfo { id: number; type: number; name: string; tag: string; xlatedBytes: number; jitedBytes: number;
  funcs: Array<{ xlatedBytes: number; jitedBytes: number }> }
export interface NativeLinkInfo { id: number; type: number; progId: number; ifindex: number; attachType: number }
export interface NativeXdpQuery { progId: number; drvProgId: number; skbProgId: number; hwProgId: number; attachMode: number }

export interface NativeAddon {
  loadObject(path: string, opts: { pinRoot?: string; reusePinnedMaps?: boolean; replaceIncompatiblePins?: boolean;
    mapMaxEntries?: Record<string, number>; mapFds?: Record<string, number> }): Promise<NativeLoaded>;
  mapCreateLike(handle: unknown, name: string, maxEntries: number): Promise<number>;
  closeObject(handle: unknown): void;
  btfStruct(handle: unknown, name: string): { size: number; members: NativeBtfMember[] } | null;
  mapLookup(fd: number, key: Buffer, valueSize: number, flags?: number): Buffer | null;
  mapLookupInto(fd: number, key: Buffer, out: Buffer): boolean;
  mapUpdate(fd: number, key: Buffer, value: Buffer, flags: number): void;
  mapDelete(fd: number, key: Buffer): boolean;
  mapLookupAndDelete(fd: number, key: Buffer, valueSize: number): Buffer | null;
  mapKeys(fd: number, keySize: number, limit?: number): Buffer;
  mapUpdateBatch(fd: number, keys: Buffer, values: Buffer, count: number, flags: number): number;
  mapDeleteBatch(fd: number, keys: Buffer, count: number): number;
  mapLookupBatch(fd: number, keySize: number, valueSize: number, chunk: number, andDelete: boolean):
    { keys: Buffer; values: Buffer; count: number };
  mapLookupBatchPage(fd: number, keySize: number, valueSize: number, chunk: number, token: Buffer | null):
    { keys: Buffer; values: Buffer; count: number; token: Buffer | null };
  mapCreate(type: number, name: string, keySize: number, valueSize: number, maxEntries: number, flags: number,
    innerMapFd: number): number;
  mapInfo(fd: number): { id: number; type: number; name: string; keySize: number; valueSize: number;
    maxEntries: number; flags: number };
  mapGetFdById(id: number): number;
  mapFreeze(fd: number): void;
  objPin(fd: number, path: string): void;
  objGet(path: string): number;
  closeFd(fd: number): void;
  numPossibleCpus(): number;
  threadCpus(set?: number[]): number[];
  progTestRun(fd: number, opts: { data?: Buffer; repeat?: number; dataOutSize?: number; flags?: number;
    ctxIn?: Buffer; ctxOutSize?: number; cpu?: number; batchSize?: number }):
    { retval: number; durationNs: number; data: Buffer; ctx: Buffer };
  progInfo(fd: number): NativeProgInfo;
  progInfoById(id: number): NativeProgInfo | null;
  ifNameToIndex(name: string): number;
  linkCreate(progFd: number, ifindex: number, attachType: number, flags: number): number;
  /** With expectedOldProgFd: swaps only if the link still runs that program (BPF_F_REPLACE), else EPERM. */
  linkUpdate(linkFd: number, progFd: number, expectedOldProgFd?: number): void;
  progGetFdById(id: number): number;
  linkDetach(linkFd: number): void;
  linkInfo(fd: number): NativeLinkInfo;
  xdpQuery(ifindex: number): NativeXdpQuery;
  progQuery(ifindex: number, attachType: number): number[];
  tcClsactAttach(progFd: number, ifindex: number, ingress: boolean, handle: number, priority: number, replace: boolean): number;
  tcClsactQuery(ifindex: number, ingress: boolean, handle: number, priority: number): number | null;
  tcClsactDetach(ifindex: number, ingress: boolean, handle: number, priority: number): void;
  /** libbpf perf_buffer over a BPF_MAP_TYPE_PERF_EVENT_ARRAY map. */
  perfBufferOpen(mapFd: number, pagesPerCpu: number): unknown;
  perfBufferPoll(handle: unknown, timeoutMs: number): { samples: { cpu: number; data: Buffer }[]; lost: number };
  perfBufferClose(handle: unknown): void;
  /** A BPF ring buffer (BPF_MAP_TYPE_RINGBUF) read without waiting: what it holds, up to maxRecords per call. */
  ringBufferOpen(mapFd: number): unknown;
  /** `data`: each record as a little-endian u32 length, its bytes, zero bytes up to the next multiple of 8. */
  ringBufferConsume(handle: unknown, maxRecords: number): { data: Buffer; count: number };
  ringBufferClose(handle: unknown): void;
  /** The names of an object file's maps (internal ones excluded), without loading it. */
  objectMapNames(path: string): string[];
  /** The ids of the maps a loaded program uses. */
  progMapIds(progFd: number): number[];
  /** Sends one link-layer frame (Ethernet header first) out of the interface (AF_PACKET). */
  sendFrame(ifindex: number, frame: Buffer): void;
  attachTcxIngress: number;
  attachTcxEgress: number;
  attachXdp: number;
}

let loaded: NativeAddon | undefined;

export function native(): NativeAddon {
  if (!loaded) {
    const path = addonPath();
    try {
      loaded = createRequire(import.meta.url)(path) as NativeAddon;
    } catch (e) {
      throw Object.assign(new Error(`gitlb BPF addon not loadable at ${path} (run \`make addon\`): ${(e as Error).message}`),
        { code: 'ENOENT' });
    }
  }
  return loaded;
}
