// `make test-unit`: the unit tier in worker threads instead of one child process per test file. A process per file
// (what the whole suite needs: netns tests change process-wide state) cost about 0.6 s of CPU each to start, some
// 30 s of the tier's 50 on two cores; threads start in a fraction of that. Unit tests touch no process-wide state
// (no chdir, no signals, no namespaces), which is what the tier promises anyway.
export default {
  extensions: { ts: 'module' },
  require: ['./test/lib/tsx-in-worker.mjs'],
  workerThreads: true,
  files: ['test/unit/**/*.test.ts'],
  timeout: '120s',
  concurrency: 2,
};
