import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { refusedShape } from './json-body.ts';

// What the pass over the text must agree with: walks of the parsed body.

const isContainer = (value: unknown): value is object => value !== null && typeof value === 'object';

/** Levels of a value: a scalar 0, an object or array one more than its deepest item. */
const depthOf = (value: unknown): number => (isContainer(value) ? 1 + Math.max(0, ...Object.values(value).map(depthOf)) : 0);

/** The body, and each member and element in it. */
const valuesIn = (value: unknown): number => 1 + (isContainer(value) ? Object.values(value).reduce((sum: number, item) => sum + valuesIn(item), 0) : 0);

/** Each top-level field that goes deeper than `depth` levels, the body being level 1, in order. */
const fieldsDeeperThan = (body: unknown, depth: number): string[] =>
  isContainer(body) ? Object.entries(body).flatMap(([field, value]) => (1 + depthOf(value) > depth ? [field] : [])) : [];

/** A chain of `levels` objects and arrays, alternating, around a leaf. */
function chain(levels: number, leaf: unknown): unknown {
  let value = leaf;
  for (let i = 0; i < levels; i += 1) value = i % 2 ? { '[k"}': value } : [value, '"]{['];
  return value;
}

const bracketyString = fc.string({ unit: fc.constantFrom('[', ']', '{', '}', '"', '\\', ':', ',', ' ', 'a', 'é', '\u2028') });
const jsonBody = fc.oneof(
  fc.dictionary(bracketyString, fc.oneof(fc.jsonValue({ maxDepth: 4 }), fc.integer({ min: 25, max: 40 }).map((levels) => chain(levels, 'x')))),
  fc.array(fc.oneof(bracketyString, fc.jsonValue({ maxDepth: 2 }), fc.integer({ min: 28, max: 36 }).map((levels) => chain(levels, null)))),
);
// Pretty or not, and with spaces in empty objects and arrays (JSON.stringify writes none there).
const texts = fc
  .tuple(jsonBody, fc.boolean(), fc.boolean())
  .map(([body, pretty, spaced]) => JSON.stringify(body, null, pretty ? 2 : undefined).replace(/\[\]|\{\}/g, (empty) => (spaced ? `${empty[0]}  ${empty[1]}` : empty)));

describe('refusedShape, read from the text', () => {
  it('depth: refused exactly when some field is deeper than 32 levels, naming the first such field', () => {
    fc.assert(
      fc.property(texts, (text) => {
        const deep = fieldsDeeperThan(JSON.parse(text), 32);
        const refused = refusedShape(text, { depth: 32, values: Infinity });
        expect(refused).toEqual(deep.length === 0 ? undefined : { field: deep[0], message: 'Must be nested at most 32 levels deep' });
      }),
      { numRuns: 500 },
    );
  });

  it('values: refused exactly when the body holds more than the limit, whitespace, empty objects and arrays included', () => {
    fc.assert(
      fc.property(texts, fc.integer({ min: 1, max: 60 }), (text, limit) => {
        const refused = refusedShape(text, { depth: Infinity, values: limit });
        const count = valuesIn(JSON.parse(text));
        const refusal = (most: number) => ({ field: 'body', message: `Must hold at most ${most} values (the body, and each member and element in it)` });
        expect(refused).toEqual(count > limit ? refusal(limit) : undefined);
        // At the body's own count, which a random limit seldom meets: one fewer is refused.
        expect(refusedShape(text, { depth: Infinity, values: count })).toBeUndefined();
        if (count > 1) expect(refusedShape(text, { depth: Infinity, values: count - 1 })).toEqual(refusal(count - 1));
      }),
      { numRuns: 500 },
    );
  });

  it('with the limits the routes use: 32 levels pass and 33 are refused, 20,000 values pass and 20,001 are refused', () => {
    expect(refusedShape(`{"a":${'['.repeat(31)}${']'.repeat(31)}}`)).toBeUndefined();
    expect(refusedShape(`{"a":${'['.repeat(32)}${']'.repeat(32)}}`)?.field).toBe('a');
    expect(refusedShape(`[1,2,${'{"x":'.repeat(32)}0${'}'.repeat(32)}]`)?.field).toBe('2');
    expect(refusedShape('['.repeat(33))?.field).toBe('0');
    const items = (count: number) => `{"a":[${Array(count).fill('{}').join(',')}]}`;
    // The body, a, and the items.
    expect(refusedShape(items(19_998))).toBeUndefined();
    expect(refusedShape(items(19_999))).toEqual({ field: 'body', message: 'Must hold at most 20000 values (the body, and each member and element in it)' });
  });

  it('reads brackets inside strings, escaped quotes and backslashes as text', () => {
    const brackets = '['.repeat(100);
    expect(refusedShape(JSON.stringify({ a: brackets, b: `\\"${brackets}`, c: `\\\\${brackets}` }))).toBeUndefined();
    // A key that is escaped in the text is named as the parser would read it.
    expect(refusedShape(`{"plain":"\\\\","say \\"hi\\"":${'['.repeat(40)}`)?.field).toBe('say "hi"');
  });

  it('leaves a text that ends inside a string to the parser', () => {
    expect(refusedShape(`{"a":"${'['.repeat(40)}`)).toBeUndefined();
  });
});
