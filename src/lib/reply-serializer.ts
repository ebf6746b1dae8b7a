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

/** Fastify's serializer compiler for the app: a compiled serializer per route, zod's check where none can be built. */
export const replySerializerCompiler: FastifySerializerCompiler<unknown> = (route) => {
  const schema = route.schema as z.ZodType | { properties?: unknown };
  const zodSchema = schema instanceof z.ZodType ? schema : schema.properties instanceof z.ZodType ? schema.properties : null;
  const jsonSchema = zodSchema ? replyJsonSchema(zodSchema) : null;
  if (!jsonSchema) return zodSerializerCompiler(route as Parameters<typeof zodSerializerCompiler>[0]);
  return fastJson(jsonSchema);
};
