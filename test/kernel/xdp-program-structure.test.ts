// The structure of xdp_lb (docs/datapath.md, "Program structure"): one hot main function with the rare and heavy
// paths (SNAT, ICMP answers, IPv6 headers, QUIC, affinity) as BPF-to-BPF subprograms, every call chain within the
// kernel's 512-byte stack bound (a load would fail otherwise), for xdp_lb.o and for gitlb capture's
// xdp_lb_capture.o. The per-function sizes come from the kernel (func info and JIT lengths), as bench/xdp prints
// them. The bound on the main function is a regression guard: inlining the SNAT paths back (about 30 KiB) or
// another whole path fails it; a small inline addition to the hot path does not.
import test from 'ava';
import { BpfObject } from '../../src/bpf/libbpf.js';

const MAIN_XLATED_MAX = 32 * 1024; // 22.6 KiB when this was written (Katran's whole program: 24.6 KiB)
const CAPTURE_MAIN_XLATED_MAX = 44 * 1024; // 31.8 KiB when this was written

for (const [name, mainMax] of [['xdp_lb', MAIN_XLATED_MAX], ['xdp_lb_capture', CAPTURE_MAIN_XLATED_MAX]] as const) {
  test(`${name}.o loads (every call chain within the stack bound) with a small main function and its subprograms`, async (t) => {
    const obj = await BpfObject.load(name);
    try {
      const info = obj.program('xdp_lb').info();
      t.true(info.funcs.length >= 10, `main + subprograms: ${info.funcs.length} functions`);
      // the per-function figures add up to the program's own
      t.is(info.funcs.reduce((a, f) => a + f.xlatedBytes, 0), info.xlatedBytes);
      t.is(info.funcs.reduce((a, f) => a + f.jitedBytes, 0), info.jitedBytes);
      const main = info.funcs[0]!;
      t.true(main.xlatedBytes <= mainMax, `main function ${main.xlatedBytes} translated bytes > ${mainMax}`);
      // the main function is the smaller part of the program: the rare paths live outside it
      t.true(main.xlatedBytes * 2 < info.xlatedBytes, `main ${main.xlatedBytes} of ${info.xlatedBytes} bytes`);
      for (const f of info.funcs) t.true(f.xlatedBytes > 0 && f.jitedBytes > 0);
    } finally {
      obj.close();
    }
  });
}
