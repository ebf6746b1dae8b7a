import { describe, expect, it } from 'vitest';
import { decodedLength, MAX_SCREENSHOT_BYTES, MAX_SCREENSHOT_CHARS, screenshotProblem } from './screenshot.ts';

const dataUrl = (bytes: number, type = 'image/png') => `data:${type};base64,${Buffer.alloc(bytes, 1).toString('base64')}`;

describe('screenshotProblem', () => {
  it('decodedLength matches Buffer for every padding', () => {
    for (const bytes of [1, 2, 3, 4, 5, 1000]) {
      expect(decodedLength(Buffer.alloc(bytes).toString('base64'))).toBe(bytes);
    }
  });

  it('accepts up to exactly 5 MiB of an allowed type', () => {
    for (const type of ['image/png', 'image/jpeg', 'image/gif', 'image/webp', 'image/avif']) {
      expect(screenshotProblem(dataUrl(10, type))).toBeUndefined();
    }
    expect(screenshotProblem(dataUrl(MAX_SCREENSHOT_BYTES))).toBeUndefined();
    expect(screenshotProblem(dataUrl(MAX_SCREENSHOT_BYTES + 1))).toBe('size');
    expect(dataUrl(MAX_SCREENSHOT_BYTES, 'image/jpeg').length).toBeLessThanOrEqual(MAX_SCREENSHOT_CHARS);
  });

  it('refuses other types, bad base64 and other strings', () => {
    expect(screenshotProblem(dataUrl(10, 'image/svg+xml'))).toBe('type');
    expect(screenshotProblem('data:image/png;base64,')).toBe('format');
    expect(screenshotProblem('data:image/png;base64,AAA')).toBe('format');
    expect(screenshotProblem('data:image/png,rawdata')).toBe('format');
    expect(screenshotProblem('x'.repeat(MAX_SCREENSHOT_CHARS + 1))).toBe('format');
  });
});
