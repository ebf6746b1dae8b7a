import fc from 'fast-check';
import Fastify from 'fastify';
import fastJson, { type Schema } from 'fast-json-stringify';
import { serializerCompiler as zodSerializerCompiler, validatorCompiler } from 'fastify-type-provider-zod';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import * as adminSchemas from '../modules/admin/schemas.ts';
import * as analyticsSchemas from '../modules/analytics/schemas.ts';
import * as authSchemas from '../modules/auth/schemas.ts';
import * as feedbackSchemas from '../modules/feedback/schemas.ts';
import { ListFeedbackResponseSchema } from '../modules/feedback/schemas.ts';
import * as logsSchemas from '../modules/logs/schemas.ts';
import * as rolesSchemas from '../modules/roles/schemas.ts';
import * as usersSchemas from '../modules/users/schemas.ts';
import * as websitesSchemas from '../modules/websites/schemas.ts';
import { compileReplySerializer, replyCopier, replyJsonSchema, replySerializerCompiler } from './reply-serializer.ts';
import * as sharedSchemas from './schemas.ts';

const route = (schema: unknown) => ({ schema, method: 'GET', url: '/test', httpStatus: '200' });

function feedbackRow(index: number, filled: boolean) {
  return {
    id: '7293ef6c-9b90-4990-b4d4-036d332c28ff',
    name: `Reader ${index}`,
    email: 'reader@example.test',
    comment: 'A "quoted" comment with \u2028 and \\ in it',
    rating: 1 + (index % 5),
    status: 'pending',
    location: filled ? 'Paris' : null,
    category: filled ? 'Bug Report' : null,
    screenshot: filled ? '/api/feedback/7293ef6c-9b90-4990-b4d4-036d332c28ff/screenshot' : null,
    screenshotType: filled ? 'image/png' : null,
    screenshotSize: filled ? 1234 : null,
    adminNotes: null,
    resolvedBy: filled ? 'admin@example.test' : null,
    resolvedAt: filled ? '2026-11-23T10:00:00.000Z' : null,
    websiteId: filled ? '0d9e7c1e-4f4b-4c3a-9b1e-2f6a8c0d1e2f' : null,
    createdAt: '2026-11-23T09:00:00.000Z',
    updatedAt: '2026-11-23T09:30:00.123Z',
    // What a query might return that the schema does not name.
    internalNote: 'never sent',
  };
}

describe('reply serializer', () => {
  it('writes a feedback page exactly as zod and JSON.stringify did, without undeclared fields', () => {
    const page = {
      success: true,
      data: Array.from({ length: 6 }, (_, index) => feedbackRow(index, index % 2 === 0)),
      pagination: { total: 6, limit: 20, offset: 0 },
      debug: { sql: 'select …' },
    };
    const compiled = replySerializerCompiler(route(ListFeedbackResponseSchema))(page);
    expect(compiled).toBe(zodSerializerCompiler(route(ListFeedbackResponseSchema) as never)(page));
    expect(compiled).not.toContain('never sent');
    expect(compiled).not.toContain('debug');
    expect(JSON.parse(compiled).data[1]).toMatchObject({ location: null, screenshotSize: null, resolvedAt: null });
  });

  it('turns nullable scalars into type lists, so no branch is chosen by validation at run time', () => {
    const schema = replyJsonSchema(ListFeedbackResponseSchema) as unknown as { properties: { data: { items: { properties: Record<string, object> } } } };
    const fields = schema.properties.data.items.properties;
    expect(fields.screenshotSize).toMatchObject({ type: ['integer', 'null'] });
    expect(fields.resolvedAt).toMatchObject({ type: ['string', 'null'], format: 'date-time' });
    expect(fields.websiteId).toMatchObject({ type: ['string', 'null'] });
    expect(JSON.stringify(schema)).not.toContain('anyOf');
  });

  it('fails a reply that lacks a required property', () => {
    const serialize = replySerializerCompiler(route(z.object({ success: z.literal(true), message: z.string() })));
    expect(() => serialize({ success: true })).toThrow(/message/);
  });

  it('keeps zod’s check for a schema JSON Schema cannot express', () => {
    const transformed = z.object({ count: z.number().transform((value) => value * 2) });
    expect(replyJsonSchema(transformed)).toBeNull();
    const serialize = replySerializerCompiler(route(transformed));
    expect(() => serialize({ count: 'three' })).toThrow();
  });

  it('serves a route’s reply through it: declared fields only, nulls kept', async () => {
    const app = Fastify();
    app.setValidatorCompiler(validatorCompiler);
    app.setSerializerCompiler(replySerializerCompiler);
    const schema = z.object({ success: z.literal(true), data: z.object({ id: z.uuid(), note: z.string().nullable() }) });
    app.get('/thing', { schema: { response: { 200: schema } } }, async () => ({
      success: true,
      data: { id: '7293ef6c-9b90-4990-b4d4-036d332c28ff', note: null, passwordHash: 'secret' },
    }));
    const response = await app.inject({ method: 'GET', url: '/thing' });
    expect(response.statusCode).toBe(200);
    expect(response.json()).toEqual({ success: true, data: { id: '7293ef6c-9b90-4990-b4d4-036d332c28ff', note: null } });
    await app.close();
  });
});

type Node = { [key: string]: unknown };

/** Values of anything but what a schema asks for: the cases where a reply must fall back on fast-json-stringify. */
const wrongValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.constant(undefined),
  fc.constant(null),
  fc.integer(),
  fc.double(),
  fc.constantFrom(Number.NaN, Number.POSITIVE_INFINITY, -0, 2 ** 60, 1.5),
  fc.bigInt({ min: -(2n ** 70n), max: 2n ** 70n }),
  fc.string(),
  fc.boolean(),
  fc.date({ noInvalidDate: false }),
  fc.array(fc.integer(), { maxLength: 2 }),
  fc.dictionary(fc.string({ maxLength: 3 }), fc.integer(), { maxKeys: 2 }),
);

/** Values shaped by a JSON Schema node, with a wrong value now and then at any depth. */
function valueFor(schema: Node, depth = 0): fc.Arbitrary<unknown> {
  const right = rightValueFor(schema, depth);
  return fc.oneof({ weight: 12, arbitrary: right }, { weight: 1, arbitrary: wrongValue });
}

function rightValueFor(schema: Node, depth: number): fc.Arbitrary<unknown> {
  if (Array.isArray(schema.anyOf)) return fc.oneof(...(schema.anyOf as Node[]).map((branch) => valueFor(branch, depth + 1)));
  if ('const' in schema) return fc.constant(schema.const);
  if (Array.isArray(schema.enum)) return fc.constantFrom(...(schema.enum as unknown[]));
  const types = Array.isArray(schema.type) ? (schema.type as string[]) : [schema.type as string];
  return fc.oneof(...types.map((type) => valueOfType(type, schema, depth)));
}

function valueOfType(type: string, schema: Node, depth: number): fc.Arbitrary<unknown> {
  switch (type) {
    case 'null':
      return fc.constant(null);
    case 'string':
      return schema.format === 'date-time'
        ? fc.oneof(fc.date({ noInvalidDate: true }).map((date) => date.toISOString()), fc.date({ noInvalidDate: true }))
        : fc.string({ unit: 'binary', maxLength: 60 });
    case 'number':
      return fc.double();
    case 'integer':
      return fc.oneof(fc.integer(), fc.maxSafeInteger());
    case 'boolean':
      return fc.boolean();
    case 'array':
      return depth > 4 ? fc.constant([]) : fc.array(valueFor(schema.items as Node, depth + 1), { maxLength: 3 });
    case 'object': {
      const properties = (schema.properties ?? {}) as Record<string, Node>;
      const record = Object.fromEntries(Object.entries(properties).map(([key, property]) => [key, valueFor(property, depth + 1)]));
      // An undeclared field now and then: neither writer may send it.
      return fc.tuple(fc.record(record, { requiredKeys: [] }), fc.option(fc.string(), { nil: undefined })).map(([value, extra]) => (extra === undefined ? value : { ...value, passwordHash: extra }));
    }
    default:
      return wrongValue;
  }
}

const outcome = (write: () => string) => {
  try {
    return { text: write() };
  } catch (error) {
    return { error: (error as Error).message };
  }
};

/** Every `…ResponseSchema` the modules export: the replies the routes send. */
const responseSchemas = Object.entries({
  ...adminSchemas,
  ...analyticsSchemas,
  ...authSchemas,
  ...feedbackSchemas,
  ...logsSchemas,
  ...rolesSchemas,
  ...usersSchemas,
  ...websitesSchemas,
  ...sharedSchemas,
}).filter(([name, value]) => name.endsWith('ResponseSchema') && value instanceof z.ZodType) as [string, z.ZodType][];

describe('replies copied and written by JSON.stringify', () => {
  it('copies the replies of the busiest routes; a schema the copy cannot follow keeps fast-json-stringify', () => {
    const copied = (schema: z.ZodType) => replyCopier(replyJsonSchema(schema) as Schema) !== null;
    expect(copied(ListFeedbackResponseSchema)).toBe(true);
    expect(copied(analyticsSchemas.RecordedEventResponseSchema)).toBe(true);
    expect(copied(analyticsSchemas.SummaryResponseSchema)).toBe(true);
    // A nullable object is an `anyOf`; a record has additionalProperties.
    expect(copied(authSchemas.SignUpResponseSchema)).toBe(false);
    expect(copied(websitesSchemas.WebsiteResponseSchema)).toBe(false);
  });

  for (const [name, zodSchema] of responseSchemas) {
    const jsonSchema = replyJsonSchema(zodSchema);
    if (!jsonSchema || !replyCopier(jsonSchema)) continue;
    it(`${name}: the same text as fast-json-stringify, or the same refusal, for any value`, () => {
      const ours = compileReplySerializer(jsonSchema);
      const theirs = fastJson(jsonSchema);
      fc.assert(
        fc.property(valueFor(jsonSchema as unknown as Node), (value) => {
          expect(outcome(() => ours(value))).toEqual(outcome(() => theirs(value)));
        }),
        { numRuns: 300 },
      );
    });
  }

  it('writes a page of the feedback list by JSON.stringify, without undeclared fields', () => {
    const page = { success: true, data: [feedbackRow(0, true), feedbackRow(1, false)], pagination: { total: 2, limit: 20, offset: 0 } };
    const jsonSchema = replyJsonSchema(ListFeedbackResponseSchema) as Schema;
    const text = compileReplySerializer(jsonSchema)(page);
    const { internalNote: _note0, ...first } = page.data[0];
    const { internalNote: _note1, ...second } = page.data[1];
    expect(text).toBe(JSON.stringify({ ...page, data: [first, second] }));
    expect(text).toBe(fastJson(jsonSchema)(page));
  });

  it('sends a reply whose value is not as declared through fast-json-stringify: converted, or refused', () => {
    const jsonSchema = replyJsonSchema(z.object({ success: z.literal(true), count: z.number().int(), note: z.string().nullable() })) as Schema;
    const serialize = compileReplySerializer(jsonSchema);
    // A count that arrives as text (a bigint column) is written as a number, as before.
    expect(serialize({ success: true, count: '12', note: null })).toBe('{"success":true,"count":12,"note":null}');
    // `success` is a literal: fast-json-stringify writes it whatever the value, and so does the copy.
    expect(serialize({ success: false, count: 1, note: 'x' })).toBe('{"success":true,"count":1,"note":"x"}');
    expect(() => serialize({ success: true, note: null })).toThrow(/count/);
  });
});
