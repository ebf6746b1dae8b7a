// Campaign tags read from the page URL at ingestion. The utm_* parameters are
// taken out of the stored page, so `/pricing?utm_source=x` and `/pricing`
// count as one page and the tags are counted on their own.

export interface Campaign {
  utmSource: string | null;
  utmMedium: string | null;
  utmCampaign: string | null;
}

const NONE: Campaign = { utmSource: null, utmMedium: null, utmCampaign: null };
const TAG_MAX = 256;
// utm_term and utm_content are removed from the page too: left in, they would split it.
const UTM_PARAMETERS = ['utm_source', 'utm_medium', 'utm_campaign', 'utm_term', 'utm_content'];

function tag(params: URLSearchParams, name: string): string | null {
  // Decoding can yield control characters (%00 included), which Postgres text cannot always hold.
  const value = params.get(name)?.replace(/[\u0000-\u001f\u007f]/g, '').trim();
  // By code point, as Postgres counts, so a surrogate pair is never cut in half.
  return value ? [...value].slice(0, TAG_MAX).join('') : null;
}

/** The page without its utm_* parameters, and the campaign they named. */
export function readCampaign(page: string): { page: string; campaign: Campaign } {
  // Most events carry no tags: no parsing for them.
  if (!page.includes('utm_')) return { page, campaign: NONE };
  const hashAt = page.indexOf('#');
  const beforeHash = hashAt === -1 ? page : page.slice(0, hashAt);
  const hash = hashAt === -1 ? '' : page.slice(hashAt);
  const queryAt = beforeHash.indexOf('?');
  if (queryAt === -1) return { page, campaign: NONE };
  const params = new URLSearchParams(beforeHash.slice(queryAt + 1));
  const campaign = { utmSource: tag(params, 'utm_source'), utmMedium: tag(params, 'utm_medium'), utmCampaign: tag(params, 'utm_campaign') };
  for (const name of UTM_PARAMETERS) params.delete(name);
  const rest = params.toString();
  const stripped = `${beforeHash.slice(0, queryAt)}${rest ? `?${rest}` : ''}${hash}`;
  // A page that was only a query string keeps its root.
  return { page: stripped === '' ? '/' : stripped, campaign };
}
