// Loaded by ava in each worker thread of the unit tier (ava.unit.config.mjs): Node 20 does not carry the main
// thread's --import=tsx hooks into worker threads, so each worker registers tsx itself before importing a .ts test.
import { register } from 'tsx/esm/api';

register();
