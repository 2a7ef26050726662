// The lab's Git server: the project's smart-HTTP server (git http-backend) as a standalone process, run inside
// the lab's `git` namespace so lb and backend nodes can fetch config and push status.
//
//   node git-server.js --root /run/gitlb-lab/git --host 198.51.100.2 --port 8080
import { parseArgs } from 'node:util';
import { startGitHttpServer } from '../git-http-server.js';

const { values } = parseArgs({
  options: {
    root: { type: 'string' },
    host: { type: 'string', default: '127.0.0.1' },
    port: { type: 'string', default: '8080' },
  },
});
if (!values.root) {
  process.stderr.write('git-server: --root is required\n');
  process.exit(2);
}
const server = await startGitHttpServer({ projectRoot: values.root, host: values.host!, port: Number(values.port) });
process.stdout.write(`git server ${server.url} serving ${values.root}\n`);
const stop = () => {
  void server.close().then(() => process.exit(0));
  setTimeout(() => process.exit(0), 2000).unref();
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
