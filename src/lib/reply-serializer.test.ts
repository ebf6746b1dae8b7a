import Fastify from 'fastify';
import { serializerCompiler as zodSerializerCompiler, validatorCompiler } from 'fastify-type-provider-zod';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ListFeedbackResponseSchema } from '../modules/feedback/schemas.ts';
import { replyJsonSchema, replySerializerCompiler } from './reply-serializer.ts';

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
