// The survival matrix of issue 24 with BIRD as the upstream router: test/lib/survival-matrix.ts.
import { survivalMatrix } from '../lib/survival-matrix.js';

survivalMatrix('bird');
