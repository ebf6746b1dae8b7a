import escapeHtml from 'escape-html';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { unescapeStoredText } from './stored-text.ts';

describe('unescapeStoredText', () => {
  it('is the inverse of escape-html for every string', () => {
    fc.assert(fc.property(fc.string({ unit: 'binary' }), (text) => unescapeStoredText(escapeHtml(text)) === text));
  });

  it('turns back one level only', () => {
    expect(unescapeStoredText('&amp;lt;b&amp;gt;')).toBe('&lt;b&gt;');
  });
});
