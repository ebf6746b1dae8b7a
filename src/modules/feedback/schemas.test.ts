import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { SubmitFeedbackBodySchema, UpdateFeedbackBodySchema } from './schemas.ts';

// The schemas refuse text Postgres cannot store on their own, whatever parsed
// the body: over HTTP the JSON body parser refuses it first (tests/feedback.test.ts).

const submission = { name: 'Grace Hopper', email: 'grace@example.test', comment: 'The form loses my text.', rating: 4 };
const unstorable = (label: string) => [`${label} must not contain NUL characters or unpaired surrogates`];
/** Messages per top-level field, as in `details`; undefined when `input` is accepted. */
const refusals = (schema: z.ZodType, input: unknown) => {
  const { error } = schema.safeParse(input);
  return error && z.flattenError(error).fieldErrors;
};

describe('feedback text that Postgres cannot store', () => {
  it.each([
    ['name', 'Name', { name: 'Ann \ud800' }],
    ['email', 'Email', { email: 'ann\udc00@example.test' }],
    ['comment', 'Comment', { comment: 'Half an emoji \ud83d, then the rest' }],
    ['comment', 'Comment', { comment: 'A NUL \u0000 inside the comment' }],
    ['location', 'Location', { location: 'https://example.test/\udfff' }],
  ])('submission: %s is refused by name', (field, label, overrides) => {
    expect(refusals(SubmitFeedbackBodySchema, { ...submission, ...overrides })).toEqual({ [field]: unstorable(label) });
  });

  it.each([
    ['adminNotes', 'Admin notes', { status: 'resolved', adminNotes: 'Half an emoji \ud83d' }],
    ['resolvedBy', 'resolvedBy', { status: 'resolved', resolvedBy: 'Ada \udfff' }],
    ['resolvedBy', 'resolvedBy', { status: 'archived', resolvedBy: 'Ada \u0000' }],
  ])('triage: %s is refused by name', (field, label, body) => {
    expect(refusals(UpdateFeedbackBodySchema, body)).toEqual({ [field]: unstorable(label) });
  });

  it('a surrogate pair (an emoji) is text', () => {
    expect(refusals(SubmitFeedbackBodySchema, { ...submission, comment: 'Works great \u{1F600} thanks' })).toBeUndefined();
    expect(refusals(UpdateFeedbackBodySchema, { adminNotes: '\u{1F600}' })).toBeUndefined();
  });
});
