import type { FastifySerializerCompiler } from 'fastify';
import fastJson, { type Schema } from 'fast-json-stringify';
import { serializerCompiler as zodSerializerCompiler } from 'fastify-type-provider-zod';
import { z } from 'zod';

// Replies are written by serializers compiled once per route from its zod
// response schema (turned into JSON Schema, then into code by
// fast-json-stringify, as Fastify does with JSON Schema). Checking every reply
// with zod and then JSON.stringify was the largest allocator on a list
// request: zod copies each row while checking it (docs/performance.md).
//
// What a compiled serializer keeps: only the properties a schema declares are
// written, so a field a query returns but the schema does not name never
// leaves the server; a required property that is missing fails the reply
// (a 500, as before). What it does not do is check values: a string where the
// schema says integer is converted, not refused. A schema JSON Schema cannot
// express (a transform, say) keeps zod's check.
//
// Most replies take a faster way to the same text: a copy holding exactly the
// declared properties, written by V8's own JSON.stringify. fast-json-stringify
// builds its text from thousands of small string pieces, which the socket
// write then copies into one: for a page of the feedback list 42.6 KiB of
// garbage a reply against 12.2 KiB for the copy and its text, and 16 µs
// against 13 (docs/performance.md, "Replies without string pieces"). A value
// the copy cannot take exactly as it is (a number where the schema says
// string, a required property missing) sends the whole reply through
// fast-json-stringify, so every reply reads as it did before: converted, or
// failed.

type JsonSchema = { [key: string]: unknown };

const SCALAR_TYPES = new Set(['string', 'number', 'integer', 'boolean']);

/**
 * `anyOf: [X, {type: 'null'}]` with a scalar X becomes X with `type: [X, 'null']`.
 * fast-json-stringify picks an anyOf branch by validating the value against
 * each at run time; a type list it decides with a typeof.
 */
function withNullableTypes(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(withNullableTypes);
  if (typeof node !== 'object' || node === null) return node;
  const copy: JsonSchema = Object.fromEntries(Object.entries(node).map(([key, value]) => [key, withNullableTypes(value)]));
  const branches = copy.anyOf;
  if (!Array.isArray(branches) || branches.length !== 2) return copy;
  const nullIndex = branches.findIndex((branch: JsonSchema) => branch.type === 'null' && Object.keys(branch).length === 1);
  if (nullIndex === -1) return copy;
  const other = branches[1 - nullIndex] as JsonSchema;
  if (typeof other.type !== 'string' || !SCALAR_TYPES.has(other.type)) return copy;
  const { anyOf: _anyOf, ...rest } = copy;
  return { ...other, ...rest, type: [other.type, 'null'] };
}

/** The JSON Schema a compiled serializer is built from, or null when zod's schema has no JSON Schema form. */
export function replyJsonSchema(schema: z.ZodType): Schema | null {
  try {
    return withNullableTypes(z.toJSONSchema(schema, { io: 'output', target: 'draft-7', unrepresentable: 'throw' })) as Schema;
  } catch {
    return null;
  }
}

/** Thrown inside a copy when a value is not exactly what its schema says; the reply then goes through fast-json-stringify. */
class NotExact extends Error {}
const NOT_EXACT = new NotExact('not exactly as the schema says');

type Copy = (value: unknown) => unknown;

const notExact = (): never => {
  throw NOT_EXACT;
};

/** A key JSON.stringify would write before the others whatever the order of the copy (an array index). */
const INDEX_KEY = /^(?:0|[1-9]\d*)$/;

/**
 * A copy is generated code, as fast-json-stringify's serializers are: an
 * object literal per object, so V8 builds each copy in one allocation. A
 * node's code is an expression over a plain variable (`input`, which it may
 * read more than once); the functions it calls (copies of nested objects and
 * array items) are collected in `calls`.
 */
type CopyCode = (input: string) => string;

const SCALAR_CODE: Record<string, (schema: JsonSchema) => CopyCode> = {
  // A Date is written by its toJSON, toISOString, as fast-json-stringify writes a date-time.
  string: (schema) =>
    schema.format === 'date-time'
      ? (input) => `(typeof ${input} === 'string' || (${input} instanceof Date && !Number.isNaN(${input}.getTime())) ? ${input} : notExact())`
      : (input) => `(typeof ${input} === 'string' ? ${input} : notExact())`,
  // NaN and the infinities are left to fast-json-stringify, as are integers past 2^53.
  number: () => (input) => `(typeof ${input} === 'number' && Number.isFinite(${input}) ? ${input} : notExact())`,
  integer: () => (input) => `(Number.isSafeInteger(${input}) ? ${input} : notExact())`,
  boolean: () => (input) => `(typeof ${input} === 'boolean' ? ${input} : notExact())`,
};

/** A function made of generated code that calls `notExact` and the copies in `calls`. */
function compiled(code: string, calls: Copy[]): Copy {
  const names = calls.map((_, index) => `call${index}`);
  return new Function('notExact', ...names, code)(notExact, ...calls) as Copy;
}

/**
 * The copy's code for a JSON Schema node, or null where the schema says more
 * than the copy knows (`anyOf`, `$ref`, records, `additionalProperties`):
 * that route keeps fast-json-stringify for every reply.
 */
function codeFor(schema: JsonSchema, calls: Copy[]): CopyCode | null {
  // fast-json-stringify picks an `anyOf` branch by validating the value against each (patterns,
  // formats, additionalProperties and all), and refuses a value no branch accepts: not a copy.
  if ('anyOf' in schema || 'oneOf' in schema || 'allOf' in schema || '$ref' in schema) return null;
  const types = typeof schema.type === 'string' ? [schema.type] : Array.isArray(schema.type) ? (schema.type as string[]) : [];
  const nonNull = types.filter((type) => type !== 'null');
  if (nonNull.length !== 1) return null;
  const code = codeByType(nonNull[0], schema, calls);
  if (!code) return null;
  return types.includes('null') ? (input) => `(${input} === null ? null : ${code(input)})` : code;
}

function codeByType(type: string, schema: JsonSchema, calls: Copy[]): CopyCode | null {
  // fast-json-stringify writes a `const` whatever the value holds (a literal such as `success: true`).
  if ('const' in schema) return () => `(${JSON.stringify(schema.const)})`;
  if (type in SCALAR_CODE) return SCALAR_CODE[type](schema);
  if (type === 'array') {
    const items = typeof schema.items === 'object' && schema.items !== null && !Array.isArray(schema.items) ? copierFor(schema.items as JsonSchema) : null;
    if (!items) return null;
    const call = `call${calls.push(items) - 1}`;
    return (input) => `(Array.isArray(${input}) ? ${input}.map(${call}) : notExact())`;
  }
  if (type !== 'object') return null;
  const copy = objectCopier(schema);
  if (!copy) return null;
  const call = `call${calls.push(copy) - 1}`;
  return (input) => `${call}(${input})`;
}

function objectCopier(schema: JsonSchema): Copy | null {
  const properties = schema.properties as Record<string, JsonSchema> | undefined;
  const additional = schema.additionalProperties;
  if (!properties || (additional !== undefined && additional !== false) || 'patternProperties' in schema) return null;
  const keys = Object.keys(properties);
  if (keys.some((key) => INDEX_KEY.test(key))) return null;
  const required = Array.isArray(schema.required) ? (schema.required as string[]) : [];
  // In fast-json-stringify's order: the required properties first, each group in the schema's order.
  const ordered = [...keys].sort((a, b) => Number(required.includes(b)) - Number(required.includes(a)));
  const calls: Copy[] = [];
  const fields: string[] = [];
  const reads: string[] = [];
  for (const [index, key] of ordered.entries()) {
    const code = codeFor(properties[key], calls);
    if (!code) return null;
    const name = `value${index}`;
    reads.push(`const ${name} = input[${JSON.stringify(key)}];`);
    // An optional property left undefined is left out by JSON.stringify, as by fast-json-stringify.
    const copy = required.includes(key) ? `${name} === undefined ? notExact() : ${code(name)}` : `${name} === undefined ? undefined : ${code(name)}`;
    fields.push(`${JSON.stringify(key)}: ${copy}`);
  }
  const checks = required.filter((key) => !keys.includes(key)).map((key) => `if (input[${JSON.stringify(key)}] === undefined) notExact();`);
  return compiled(
    `return function copy(input) {
      if (typeof input !== 'object' || input === null || Array.isArray(input)) return notExact();
      ${checks.join('\n')}
      ${reads.join('\n')}
      return { ${fields.join(',\n')} };
    };`,
    calls,
  );
}

/** The copy of a whole value: its node's code in a function of its own. */
function copierFor(schema: JsonSchema): Copy | null {
  const calls: Copy[] = [];
  const code = codeFor(schema, calls);
  return code && compiled(`return function copy(input) { return ${code('input')}; };`, calls);
}

/** The copy a reply goes through on its way to JSON.stringify, or null where the route keeps fast-json-stringify. */
export function replyCopier(jsonSchema: Schema): Copy | null {
  return copierFor(jsonSchema as unknown as JsonSchema);
}

/**
 * A reply's text: the declared properties copied and written by
 * JSON.stringify, or fast-json-stringify's text when the value is not exactly
 * as the schema says (it then converts, or fails the reply).
 */
export function compileReplySerializer(jsonSchema: Schema): (value: unknown) => string {
  const compiled = fastJson(jsonSchema);
  const copy = replyCopier(jsonSchema);
  if (!copy) return compiled;
  return (value) => {
    let copied: unknown;
    try {
      copied = copy(value);
    } catch (error) {
      if (error === NOT_EXACT) return compiled(value);
      throw error;
    }
    return JSON.stringify(copied);
  };
}

/** Fastify's serializer compiler for the app: a compiled serializer per route, zod's check where none can be built. */
export const replySerializerCompiler: FastifySerializerCompiler<unknown> = (route) => {
  const schema = route.schema as z.ZodType | { properties?: unknown };
  const zodSchema = schema instanceof z.ZodType ? schema : schema.properties instanceof z.ZodType ? schema.properties : null;
  const jsonSchema = zodSchema ? replyJsonSchema(zodSchema) : null;
  if (!jsonSchema) return zodSerializerCompiler(route as Parameters<typeof zodSerializerCompiler>[0]);
  return compileReplySerializer(jsonSchema);
};
