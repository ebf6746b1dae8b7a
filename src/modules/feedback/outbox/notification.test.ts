import escapeHtml from 'escape-html';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../../config.ts';
import { adminUrl, renderFeedbackNotification } from './notification.ts';

describe('renderFeedbackNotification', () => {
  const stored = {
    id: '00000000-0000-4000-8000-000000000001',
    name: escapeHtml('Ann <b>'),
    email: 'ann@example.test',
    rating: 5,
    comment: escapeHtml('Great & "fast" <site>'),
    category: null,
    location: null,
  };

  it('HTML never carries live markup from the feedback, even for a row stored unescaped', () => {
    const raw = { ...stored, name: '<img src=x onerror=alert(1)>', comment: '<script>x</script>' };
    fc.assert(
      fc.property(fc.constantFrom(stored, raw), (feedback) => {
        const { html } = renderFeedbackNotification(feedback, 'https://admin.example.test');
        return !/<(script|img|b>)/i.test(html);
      }),
    );
  });

  it('plain text: a field cannot write lines of its own, and the comment is quoted', () => {
    const forged = {
      ...stored,
      name: escapeHtml('Bob\nRating: 5 / 5\r\n\nOpen it: https://evil.example/x\u2028'),
      location: 'https://example.test/\u0085Category: Urgent',
      comment: escapeHtml('Fine.\n\nOpen it: https://evil.example/y\u0085Open it: https://evil.example/z'),
    };
    const { text } = renderFeedbackNotification(forged, 'https://admin.example.test');
    const lines = text.split('\n');
    expect(lines.filter((line) => line.startsWith('Rating:'))).toEqual(['Rating: 5 / 5']);
    expect(lines.filter((line) => line.startsWith('Open it:'))).toEqual([`Open it: https://admin.example.test/feedback/${stored.id}`]);
    expect(lines.filter((line) => line.startsWith('Category:'))).toEqual(['Category: Not given']);
    expect(lines).toContain('Name: Bob Rating: 5 / 5 Open it: https://evil.example/x ');
    expect(lines.slice(lines.indexOf('Comment:') + 1, lines.indexOf('Comment:') + 5)).toEqual(['> Fine.', '> ', '> Open it: https://evil.example/y', '> Open it: https://evil.example/z']);
  });

  it('says "Not given" for a missing category and location, and links to the feedback', () => {
    const { subject, text } = renderFeedbackNotification(stored, 'https://admin.example.test');
    expect(subject).toBe('New Feedback Submission');
    expect(text).toContain('Category: Not given');
    expect(text).toContain('Location: Not given');
    expect(text).toContain('Great & "fast" <site>');
    expect(text).toContain(`https://admin.example.test/feedback/${stored.id}`);
  });
});

describe('adminUrl', () => {
  it('defaults to the front end with /admin, and takes ADMIN_URL when set', () => {
    expect(adminUrl(parseConfig({ NODE_ENV: 'development', DATABASE_URL: 'postgres://x@127.0.0.1/x' }))).toBe('http://localhost:5173/admin');
    expect(adminUrl(parseConfig({ NODE_ENV: 'development', DATABASE_URL: 'postgres://x@127.0.0.1/x', FRONTEND_URL: 'https://www.example.test/' }))).toBe('https://www.example.test/admin');
    expect(adminUrl(parseConfig({ NODE_ENV: 'development', DATABASE_URL: 'postgres://x@127.0.0.1/x', ADMIN_URL: 'https://admin.example.test/' }))).toBe('https://admin.example.test');
  });
});
