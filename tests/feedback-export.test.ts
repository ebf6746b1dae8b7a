import type { FastifyInstance } from 'fastify';
import { describe, expect, it } from 'vitest';
import { useAdminApp } from './support/admin-auth.ts';
import { testSql } from './support/db.ts';
import { createWebsite, feedbackBody } from './support/feedback-fixtures.ts';

// The feedback CSV holds the words as typed: the HTML escaping applied at
// input is for HTML, and a spreadsheet shows `&lt;` as it is. Filters,
// streaming and refusals are in tests/exports.test.ts.

const sql = testSql();
let app: FastifyInstance;
let admin: { authorization: string };

useAdminApp(sql, (built) => ({ app, admin } = built));

/** Submits and triages one feedback item; the export's line for it, without its line end. */
async function exportedLine(websiteId: string, body: Record<string, unknown>, triage: Record<string, unknown>) {
  const created = await app.inject({ method: 'POST', url: '/api/feedback', payload: feedbackBody({ websiteId, ...body }) });
  expect(created.statusCode, created.body).toBe(201);
  const id: string = created.json().data.id;
  const updated = await app.inject({ method: 'PUT', url: `/api/feedback/${id}`, headers: admin, payload: triage });
  expect(updated.statusCode, updated.body).toBe(200);
  const response = await app.inject({ method: 'GET', url: `/api/feedback/export?websiteId=${websiteId}`, headers: admin });
  expect(response.statusCode).toBe(200);
  const [row] = await sql<{ created_at: Date; updated_at: Date; resolved_at: Date }[]>`
    select created_at, updated_at, resolved_at from public.feedback where id = ${id}`;
  const lines = response.body.split('\r\n');
  expect(lines).toHaveLength(3);
  return { id, row, line: lines[1] };
}

describe('GET /api/feedback/export: plain text', () => {
  it('every text column is unescaped: the cells read as the submitter and the admin typed them', async () => {
    const websiteId = await createWebsite(sql, 'Plain export');
    const { id, row, line } = await exportedLine(
      websiteId,
      {
        name: 'Sam <b>6</b>',
        email: "o'brien+export@example.test",
        comment: 'He said "hi" & left <early>',
        location: 'https://example.com/contact?x=1&y=2',
        category: 'Bug Report',
      },
      { status: 'resolved', adminNotes: 'Fixed in <v2> & more', resolvedBy: "Ann O'Neil" },
    );
    const [createdAt, updatedAt, resolvedAt] = [row.created_at, row.updated_at, row.resolved_at].map((at) => at.toISOString());
    expect(line).toBe(
      `${id},${createdAt},${updatedAt},resolved,4,Bug Report,Sam <b>6</b>,o'brien+export@example.test,"He said ""hi"" & left <early>",` +
        `https://example.com/contact?x=1&y=2,${websiteId},Fixed in <v2> & more,Ann O'Neil,${resolvedAt}`,
    );
  });

  it('formulas are still defused after unescaping', async () => {
    const websiteId = await createWebsite(sql, 'Formula export');
    const { line } = await exportedLine(
      websiteId,
      // Stored as `=HYPERLINK(&quot;...`, `=cmd|&#39; /C calc&#39;!A0`: the formula comes back with the unescaping.
      { name: '=HYPERLINK("https://evil.example","x")', comment: "=cmd|' /C calc'!A0 & more" },
      { status: 'resolved', adminNotes: '@SUM(1+1) <x>', resolvedBy: "+1 'ops'" },
    );
    const cells = line.split(',');
    expect(line).toContain(`,"'=HYPERLINK(""https://evil.example"",""x"")",`);
    expect(line).toContain(`,'=cmd|' /C calc'!A0 & more,`);
    expect(cells.slice(-3, -1)).toEqual(["'@SUM(1+1) <x>", "'+1 'ops'"]);
  });
});
