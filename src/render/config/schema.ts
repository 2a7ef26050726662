// Schema validation of one document against schemas/<kind>.schema.json (JSON Schema 2020-12, ajv),
// with each ajv error turned into a field path and a message a person can act on.
// The schemas are loaded once at module load: they are part of the program, not of the input.
import { createRequire } from 'node:module';
import Ajv2020Module from 'ajv/dist/2020.js';
import type { ErrorObject, ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { parseCidr } from '../ip.js';
import type { PathSegment } from './yaml-source.js';

// ajv and ajv-formats are CommonJS; imported from ESM, the class and the plugin sit on `.default`.
const Ajv2020 = Ajv2020Module.default;
const addFormats = addFormatsModule.default;

export const KINDS = ['Cluster', 'Node', 'Service'] as const;
export type Kind = (typeof KINDS)[number];

// src/render/config/ and dist/render/config/ are both three levels below the project root.
const requireSchema = createRequire(import.meta.url);
export const SCHEMAS: Record<Kind, Record<string, unknown>> = {
  Cluster: requireSchema('../../../schemas/cluster.schema.json') as Record<string, unknown>,
  Node: requireSchema('../../../schemas/node.schema.json') as Record<string, unknown>,
  Service: requireSchema('../../../schemas/service.schema.json') as Record<string, unknown>,
};

const ajv = new Ajv2020({ allErrors: true, strict: true, useDefaults: true, verbose: true });
addFormats(ajv, ['ipv4', 'ipv6']);
ajv.addFormat('ip-cidr', (s: string) => parseCidr(s) !== null);
// Editor extensions (VS Code / yaml-language-server) that carry our error texts; annotations for ajv.
ajv.addKeyword({ keyword: 'errorMessage', schemaType: 'string' });
ajv.addKeyword({ keyword: 'patternErrorMessage', schemaType: 'string' });

const validators = Object.fromEntries(KINDS.map((k) => [k, ajv.compile(SCHEMAS[k])])) as Record<Kind, ValidateFunction>;

export interface SchemaIssue {
  path: PathSegment[];
  /** 'key' points the position at the field's key (unknown fields), 'value' at its value. */
  part: 'key' | 'value';
  message: string;
}

/** Validates (and fills in schema defaults, in place) one document of a known kind. */
export function validateDocument(kind: Kind, data: unknown): SchemaIssue[] {
  const validate = validators[kind];
  if (validate(data)) return [];
  const issues: SchemaIssue[] = [];
  const seen = new Set<string>();
  for (const e of validate.errors ?? []) {
    // Failures inside an anyOf branch are summarised by the anyOf error itself.
    if (/\/anyOf\/\d+\//.test(e.schemaPath)) continue;
    const issue = describeError(e, data);
    const key = `${issue.path.join('/')}|${issue.message}`;
    if (!seen.has(key)) {
      seen.add(key);
      issues.push(issue);
    }
  }
  return issues;
}

function instancePath(pointer: string, data: unknown): PathSegment[] {
  if (pointer === '') return [];
  const out: PathSegment[] = [];
  let node: unknown = data;
  for (const raw of pointer.slice(1).split('/')) {
    const seg = raw.replace(/~1/g, '/').replace(/~0/g, '~');
    if (Array.isArray(node)) {
      out.push(Number(seg));
      node = node[Number(seg)];
    } else {
      out.push(seg);
      node = node !== null && typeof node === 'object' ? (node as Record<string, unknown>)[seg] : undefined;
    }
  }
  return out;
}

/** `spec.reals[1].weight` */
export function displayPath(path: readonly PathSegment[]): string {
  let s = '';
  for (const seg of path) s += typeof seg === 'number' ? `[${seg}]` : s === '' ? seg : `.${seg}`;
  return s;
}

export function describeValue(v: unknown): string {
  if (v === null || v === undefined) return 'nothing';
  if (typeof v === 'string') return `'${v.length > 40 ? v.slice(0, 37) + '...' : v}'`;
  if (Array.isArray(v)) return 'a list';
  if (typeof v === 'object') return 'a mapping';
  return String(v);
}

const TYPE_NAMES: Record<string, string> = {
  integer: 'an integer',
  number: 'a number',
  string: 'a string',
  boolean: 'true or false',
  object: 'a mapping',
  array: 'a list',
  null: 'empty',
};

function didYouMean(name: string, candidates: string[]): string {
  const close = candidates.filter((c) => c.toLowerCase() === name.toLowerCase() || editDistance(c, name) <= 2);
  return close.length > 0 ? ` (did you mean '${close[0]}'?)` : candidates.length > 0 ? ` (allowed: ${candidates.join(', ')})` : '';
}

function editDistance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let diag = row[0]!;
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const up = row[j]!;
      row[j] = Math.min(row[j]! + 1, row[j - 1]! + 1, diag + (a[i - 1] === b[j - 1] ? 0 : 1));
      diag = up;
    }
  }
  return row[b.length]!;
}

function describeError(e: ErrorObject, data: unknown): SchemaIssue {
  const path = instancePath(e.instancePath, data);
  const where = displayPath(path);
  const prefix = where === '' ? '' : `${where}: `;
  const parent = (e.parentSchema ?? {}) as Record<string, unknown>;
  const got = ` (got ${describeValue(e.data)})`;
  const p = e.params as Record<string, unknown>;
  switch (e.keyword) {
    case 'required':
      return { path, part: 'key', message: `${prefix}missing required field '${String(p.missingProperty)}'` };
    case 'additionalProperties': {
      const name = String(p.additionalProperty);
      const known = Object.keys((parent.properties as Record<string, unknown> | undefined) ?? {});
      return {
        path: [...path, name],
        part: 'key',
        message: `unknown field '${displayPath([...path, name])}'${didYouMean(name, known)}`,
      };
    }
    case 'type':
      return { path, part: 'value', message: `${prefix}must be ${TYPE_NAMES[String(p.type)] ?? String(p.type)}${got}` };
    case 'enum':
      return {
        path,
        part: 'value',
        message: `${prefix}must be one of ${(p.allowedValues as unknown[]).map((v) => `'${String(v)}'`).join(', ')}${got}`,
      };
    case 'const':
      return { path, part: 'value', message: `${prefix}must be '${String(p.allowedValue)}'${got}` };
    case 'minimum':
    case 'maximum': {
      const range =
        typeof parent.minimum === 'number' && typeof parent.maximum === 'number'
          ? `must be between ${parent.minimum} and ${parent.maximum}`
          : `must be ${String(p.comparison)} ${String(p.limit)}`;
      const hint = path[path.length - 1] === 'weight' && e.data === 0 ? '; to take a real out of service use state: disabled' : '';
      return { path, part: 'value', message: `${prefix}${range}${got}${hint}` };
    }
    case 'minItems':
      return { path, part: 'value', message: `${prefix}must list at least ${String(p.limit)} item(s)` };
    case 'maxItems':
      return {
        path,
        part: 'value',
        message: `${prefix}must list at most ${String(p.limit)} items (got ${Array.isArray(e.data) ? e.data.length : '?'}); refused`,
      };
    case 'pattern':
      return { path, part: 'value', message: `${prefix}${(parent.patternErrorMessage as string) ?? `must match ${String(p.pattern)}`}${got}` };
    case 'format':
    case 'anyOf':
      return { path, part: 'value', message: `${prefix}${(parent.errorMessage as string) ?? `must be a valid ${String(p.format ?? 'value')}`}${got}` };
    default:
      return { path, part: 'value', message: `${prefix}${e.message ?? 'is invalid'}` };
  }
}
