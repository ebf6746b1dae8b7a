import escapeHtml from 'escape-html';
import type { Config } from '../../../config.ts';
import { frontendUrl } from '../../../config.ts';
import { unescapeStoredText } from '../stored-text.ts';

// The administrators' e-mail about new feedback (SPEC section 6): subject
// `New Feedback Submission`, the submitter's name and e-mail, rating,
// comment, category, location and a direct link, as HTML and plain text.

export const NOTIFICATION_SUBJECT = 'New Feedback Submission';

/** Stored feedback fields the e-mail shows; text is HTML-escaped as stored. */
export interface NotifiedFeedback {
  id: string;
  name: string;
  email: string;
  rating: number;
  comment: string;
  category: string | null;
  location: string | null;
}

export interface RenderedMail {
  subject: string;
  html: string;
  text: string;
}

/** Where the admin UI lives; the link is `${adminUrl}/feedback/<id>`. */
export function adminUrl(config: Config): string {
  return (config.ADMIN_URL ?? `${frontendUrl(config).replace(/\/+$/, '')}/admin`).replace(/\/+$/, '');
}

export function feedbackLink(base: string, id: string): string {
  return `${base}/feedback/${encodeURIComponent(id)}`;
}

// Line breaks and other control characters (C0, C1, the Unicode line and
// paragraph separators) in a one-line field of the plain text; in the
// comment, whatever a mail client may break a line on starts a quoted line.
// (The digest of notifications held back by the cap, digest.ts, shows its items with them too.)
const LINE_BREAKING = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]+/g;
export const oneLine = (value: string) => value.replace(LINE_BREAKING, ' ');
const LINE_BREAK = /\r\n|[\n\v\f\r\u001c-\u001e\u0085\u2028\u2029]/;
export const quoted = (text: string) => text.split(LINE_BREAK).map((line) => `> ${line.replace(/[\u0000-\u0008\u000e-\u001f\u007f-\u009f]/g, ' ')}`);

/** Label and value rows of an e-mail's HTML table; values escaped. */
export function fieldRows(fields: [string, string][]): string {
  return fields.map(([label, value]) => `<tr><th align="left" style="padding:4px 12px 4px 0">${label}</th><td>${escapeHtml(value)}</td></tr>`).join('\n');
}

/** A stored optional field as shown: typed text, or `Not given`. */
export const shownOrNotGiven = (value: string | null) => (value === null ? 'Not given' : unescapeStoredText(value));

export function renderFeedbackNotification(feedback: NotifiedFeedback, base: string): RenderedMail {
  const link = feedbackLink(base, feedback.id);
  // Plain text: the submitter's words as typed, but never lines of the
  // e-mail's own: a name with line breaks could otherwise write a rating or a
  // link of its own above the real ones, so one-line fields stay on their
  // line and the comment's lines are quoted.
  const fields: [string, string][] = [
    ['Name', unescapeStoredText(feedback.name)],
    ['Email', unescapeStoredText(feedback.email)],
    ['Rating', `${feedback.rating} / 5`],
    ['Category', shownOrNotGiven(feedback.category)],
    ['Location', shownOrNotGiven(feedback.location)],
  ];
  const comment = unescapeStoredText(feedback.comment);

  const text = [
    'New feedback was submitted.',
    '',
    ...fields.map(([label, value]) => `${label}: ${oneLine(value)}`),
    '',
    'Comment:',
    ...quoted(comment),
    '',
    `Open it: ${link}`,
    '',
  ].join('\n');

  // HTML: escaped once more from the plain form, so a row that reached the
  // table without the service's escaping cannot inject markup either.
  const rows = fieldRows(fields);
  const html = `<!doctype html>
<html><body style="font-family:sans-serif">
<h1 style="font-size:18px">${NOTIFICATION_SUBJECT}</h1>
<table>
${rows}
</table>
<h2 style="font-size:16px">Comment</h2>
<p style="white-space:pre-wrap">${escapeHtml(comment)}</p>
<p><a href="${escapeHtml(link)}">Open the feedback in the admin</a></p>
</body></html>
`;
  return { subject: NOTIFICATION_SUBJECT, html, text };
}
