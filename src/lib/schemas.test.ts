import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { boundedJsonObject, limitSchema, NameSchema, OffsetSchema, requiredString, uuidInput } from './schemas.ts';

// The shared fragments: one message per refused field, in the project's words.

const messages = (schema: z.ZodType, value: unknown) => schema.safeParse(value).error?.issues.map((issue) => issue.message);

describe('requiredString', () => {
  it('answers a value of the wrong type with one message, even one with a length (an array)', () => {
    expect(messages(NameSchema, ['a'])).toEqual(['Name must be a string']);
    expect(messages(requiredString('Token').min(1).max(4), ['a', 'b', 'c', 'd', 'e'])).toEqual(['Token must be a string']);
    expect(messages(NameSchema, undefined)).toEqual(['Name is required']);
    expect(messages(NameSchema, 'a')).toEqual(['Name must be at least 2 characters']);
  });
});

describe('uuidInput', () => {
  it('lower-cases the id, so either case names the same row, and says so in OpenAPI as format: uuid', () => {
    const id = crypto.randomUUID();
    expect(uuidInput('User id').parse(id.toUpperCase())).toBe(id);
    expect(messages(uuidInput('User id'), 'nope')).toEqual(['User id must be a UUID']);
    expect(messages(uuidInput('Website id'), undefined)).toEqual(['Website id is required']);
    expect(z.toJSONSchema(uuidInput('User id'), { io: 'input' })).toMatchObject({ type: 'string', format: 'uuid' });
  });
});

describe('limitSchema and OffsetSchema', () => {
  it('read decimal digits only, and answer a number too large to be an integer with one message', () => {
    expect(messages(limitSchema(500, 50), '100000000000000000000000')).toEqual(['Limit must be an integer from 1 to 500']);
    expect(messages(OffsetSchema, '1e30')).toEqual(['Offset must be a non-negative integer']);
    expect(limitSchema(500, 50).parse(undefined)).toBe(50);
    for (const text of ['1e1', '0x10', ' 5', '5 ', '5.0', '+5', '-0', '', 'Infinity']) {
      expect(messages(limitSchema(500, 50), text), text).toEqual(['Limit must be an integer from 1 to 500']);
      expect(messages(OffsetSchema, text), text).toEqual(['Offset must be a non-negative integer']);
    }
    expect(OffsetSchema.parse('1000000')).toBe(1_000_000);
    expect(messages(OffsetSchema, '1000001')).toEqual(['Offset must be at most 1000000']);
    // Past a safe integer, digits are over the max all the same, and leading zeros count for nothing.
    for (const text of ['9007199254740991', '9223372036854775807', '100000000000000000000000']) {
      expect(messages(OffsetSchema, text), text).toEqual(['Offset must be at most 1000000']);
    }
    expect(OffsetSchema.parse('0000000000000000000000042')).toBe(42);
    expect(OffsetSchema.parse('0')).toBe(0);
    expect(z.toJSONSchema(limitSchema(500, 50), { io: 'input' })).toMatchObject({ type: 'integer', minimum: 1, maximum: 500, default: 50 });
  });
});

describe('boundedJsonObject', () => {
  const settings = boundedJsonObject('Settings', 200);

  it('names each problem on the field itself, once', () => {
    expect(messages(settings, [])).toEqual(['Settings must be a JSON object']);
    expect(settings.safeParse({ ['k'.repeat(101)]: 1 }).error?.issues).toMatchObject([{ path: [], message: 'Settings keys must be at most 100 characters' }]);
    expect(messages(settings, { ['k'.repeat(100)]: 1 })).toBeUndefined();
    expect(messages(settings, { x: 'y'.repeat(200) })).toEqual(['Settings must be at most 200 bytes as JSON']);
    expect(messages(settings, { x: 'a\u0000b' })).toEqual(['Settings must not contain NUL characters or unpaired surrogates']);
  });

  it('refuses a number JSON cannot write back (1e400 parses to Infinity, which would be stored as null)', () => {
    const parsed = JSON.parse('{"x":1e400,"nested":{"y":[-1e400]}}');
    expect(messages(settings, { x: parsed.x })).toEqual(['Settings must not contain numbers too large to store (such as 1e400)']);
    expect(messages(settings, { nested: parsed.nested })).toEqual(['Settings must not contain numbers too large to store (such as 1e400)']);
    expect(messages(settings, { x: 1.7976931348623157e308 })).toBeUndefined();
  });

  it('ends the parse at its refusal: checks chained after it read a storable object', () => {
    const withLoadTime = settings.refine((value) => typeof value.loadTime !== 'number' || Number.isFinite(value.loadTime), 'loadTime must be finite');
    expect(messages(withLoadTime, { loadTime: Number.POSITIVE_INFINITY })).toEqual(['Settings must not contain numbers too large to store (such as 1e400)']);
  });
});
