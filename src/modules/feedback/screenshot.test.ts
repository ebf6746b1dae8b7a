import { describe, expect, it } from 'vitest';
import { decodedLength, MAX_SCREENSHOT_BYTES, MAX_SCREENSHOT_CHARS, screenshotProblem } from './screenshot.ts';

/** How a file of each type begins (the AVIF one: an ISO media file whose major brand is avif). */
const HEADS: Record<string, Buffer> = {
  'image/png': Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
  'image/jpeg': Buffer.from([0xff, 0xd8, 0xff, 0xe0]),
  'image/gif': Buffer.from('GIF89a'),
  'image/webp': Buffer.concat([Buffer.from('RIFF'), Buffer.from([0x24, 0, 0, 0]), Buffer.from('WEBPVP8 ')]),
  'image/avif': isoMediaHead('avif', ['avif', 'mif1', 'miaf']),
};

function isoMediaHead(major: string, compatible: string[]): Buffer {
  const size = Buffer.alloc(4);
  size.writeUInt32BE(16 + 4 * compatible.length);
  return Buffer.concat([size, Buffer.from(`ftyp${major}`), Buffer.alloc(4), Buffer.from(compatible.join(''))]);
}

/** A data URL of `bytes` bytes: `head` (by default, how a file of `type` begins), then filler. */
const dataUrl = (bytes: number, type = 'image/png', head = HEADS[type] ?? Buffer.alloc(0)) =>
  `data:${type};base64,${Buffer.concat([head, Buffer.alloc(Math.max(0, bytes - head.length), 1)]).subarray(0, bytes).toString('base64')}`;

describe('screenshotProblem', () => {
  it('decodedLength matches Buffer for every padding', () => {
    for (const bytes of [1, 2, 3, 4, 5, 1000]) {
      expect(decodedLength(Buffer.alloc(bytes).toString('base64'))).toBe(bytes);
    }
  });

  it('accepts up to exactly 5 MiB of an allowed type', () => {
    for (const type of ['image/png', 'image/jpeg', 'image/gif', 'image/webp', 'image/avif']) {
      expect(screenshotProblem(dataUrl(64, type)), type).toBeUndefined();
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

  it('refuses data that does not begin as a file of its declared type does', () => {
    expect(screenshotProblem(`data:image/png;base64,${Buffer.from('hello world').toString('base64')}`)).toBe('content');
    // Each type's bytes under every other type.
    for (const type of Object.keys(HEADS)) {
      for (const other of Object.keys(HEADS)) {
        expect(screenshotProblem(dataUrl(64, type, HEADS[other])), `${other} bytes as ${type}`).toBe(type === other ? undefined : 'content');
      }
    }
    // Shorter than its signature; one byte of it wrong.
    expect(screenshotProblem(dataUrl(3, 'image/png'))).toBe('content');
    expect(screenshotProblem(dataUrl(64, 'image/gif', Buffer.from('GIF88a')))).toBe('content');
    // AVIF: a brand among the compatible ones is enough; an MP4 (brands mp42, isom) is not AVIF.
    expect(screenshotProblem(dataUrl(64, 'image/avif', isoMediaHead('mif1', ['mif1', 'avif'])))).toBeUndefined();
    expect(screenshotProblem(dataUrl(64, 'image/avif', isoMediaHead('mp42', ['mp42', 'isom'])))).toBe('content');
    // A brand past the end of the ftyp box does not count.
    const boxEnd = isoMediaHead('mif1', ['mif1']);
    expect(screenshotProblem(dataUrl(64, 'image/avif', Buffer.concat([boxEnd, Buffer.from('avif')])))).toBe('content');
  });
});
