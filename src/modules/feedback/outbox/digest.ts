import escapeHtml from 'escape-html';
import { unescapeStoredText } from '../stored-text.ts';
import { feedbackLink, fieldRows, type NotifiedFeedback, oneLine, quoted, type RenderedMail, shownOrNotGiven } from './notification.ts';

// The e-mail that carries the notifications the hourly cap held back
// (FEEDBACK_NOTIFICATIONS_PER_HOUR, docs/feedback.md): how many, and for
// each its id, name, rating, category, the start of its comment and its link,
// shown as the single notification shows them (plain text as typed with
// one-line fields and a quoted comment, HTML escaped from that plain form).

/** Notifications one digest carries at most; the rest go in the next. */
export const DIGEST_MAX_ITEMS = 100;

/** Characters of each comment a digest shows; the link opens the rest. */
export const DIGEST_COMMENT_CHARS = 200;

export const digestSubject = (count: number) => `New Feedback Submissions (${count})`;

/** The first `chars` characters (code points, so no character is cut in half), and `…` when there was more. */
export function commentStart(comment: string, chars = DIGEST_COMMENT_CHARS): string {
  const characters = Array.from(comment);
  return characters.length <= chars ? comment : `${characters.slice(0, chars).join('')}…`;
}

export function renderFeedbackDigest(items: NotifiedFeedback[], base: string): RenderedMail {
  const subject = digestSubject(items.length);
  const intro = `${items.length} feedback submissions arrived past the hourly limit of notification e-mails; this e-mail carries them all.`;
  const shown = items.map((feedback) => ({
    id: feedback.id,
    link: feedbackLink(base, feedback.id),
    fields: [
      ['Id', feedback.id],
      ['Name', unescapeStoredText(feedback.name)],
      ['Rating', `${feedback.rating} / 5`],
      ['Category', shownOrNotGiven(feedback.category)],
    ] as [string, string][],
    comment: commentStart(unescapeStoredText(feedback.comment)),
  }));

  const text = [
    intro,
    '',
    ...shown.flatMap(({ fields, comment, link }, index) => [
      `${index + 1}.`,
      ...fields.map(([label, value]) => `${label}: ${oneLine(value)}`),
      'Comment:',
      ...quoted(comment),
      `Open it: ${link}`,
      '',
    ]),
  ].join('\n');

  const html = `<!doctype html>
<html><body style="font-family:sans-serif">
<h1 style="font-size:18px">${escapeHtml(subject)}</h1>
<p>${escapeHtml(intro)}</p>
${shown
  .map(
    ({ fields, comment, link }, index) => `<h2 style="font-size:16px">${index + 1}.</h2>
<table>
${fieldRows(fields)}
</table>
<p style="white-space:pre-wrap">${escapeHtml(comment)}</p>
<p><a href="${escapeHtml(link)}">Open the feedback in the admin</a></p>`,
  )
  .join('\n')}
</body></html>
`;
  return { subject, html, text };
}
