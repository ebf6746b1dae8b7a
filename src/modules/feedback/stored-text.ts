// Feedback text is stored HTML-escaped (service.ts, SPEC section 2); what is
// not HTML (the plain-text e-mail, the CSV export) shows it as typed.

// escape-html has no inverse. Stored text went through it, so exactly its
// five entities are turned back, in one pass (`&amp;lt;` becomes `&lt;`).
const ENTITIES: Record<string, string> = { '&amp;': '&', '&lt;': '<', '&gt;': '>', '&quot;': '"', '&#39;': "'" };
export function unescapeStoredText(value: string): string {
  return value.replace(/&(?:amp|lt|gt|quot|#39);/g, (entity) => ENTITIES[entity]);
}
