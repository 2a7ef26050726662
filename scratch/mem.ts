import { readConfigDir } from '../src/reconciler/source/read-dir.js';
import { parseConfig } from '../src/render/config/index.js';
import { readFileSync } from 'node:fs';
const files = await readConfigDir(process.argv[2]!);
const t = performance.now();
const r = parseConfig(files);
const hwm = /VmHWM:\s*(\d+)/.exec(readFileSync('/proc/self/status', 'utf8'))![1];
globalThis.gc?.();
console.log('ms', (performance.now() - t).toFixed(0), 'hwm MB', (+hwm! / 1024).toFixed(0), 'heapUsed after gc MB', (process.memoryUsage().heapUsed / 1048576).toFixed(0), r.diagnostics.filter(d=>d.severity==='error').length);
