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
const UTM_PARAMETERS = new Set(['utm_source', 'utm_medium', 'utm_campaign', 'utm_term', 'utm_content']);

function tag(raw: string | undefined): string | null {
  // Decoding can yield control characters (%00 included), which Postgres text cannot always hold.
  const value = raw?.replace(/[\u0000-\u001f\u007f]/g, '').trim();
  if (!value) return null;
  // By code point, as Postgres counts, so a surrogate pair is never cut in half;
  // a string of at most TAG_MAX code units has no more code points than that.
  return value.length <= TAG_MAX ? value : [...value].slice(0, TAG_MAX).join('');
}

/**
 * The name and value of one `name=value` pair as URLSearchParams decodes them
 * ('+' a space, escapes decoded, bad ones left as they are); undefined for an
 * empty pair. A pair with nothing to decode is only split at its first '=':
 * building a URLSearchParams for each pair of every tagged event was most of
 * what reading its campaign cost.
 */
export function decodePair(pair: string): [string, string] | undefined {
  // URLSearchParams also drops a leading '?' and replaces unpaired surrogates.
  if (pair.includes('%') || pair.includes('+') || pair.startsWith('?') || !pair.isWellFormed()) {
    return new URLSearchParams(pair).entries().next().value;
  }
  if (pair === '') return undefined;
  const equalsAt = pair.indexOf('=');
  return equalsAt === -1 ? [pair, ''] : [pair.slice(0, equalsAt), pair.slice(equalsAt + 1)];
}

/** The page without its utm_* parameters, and the campaign they named. */
export function readCampaign(page: string): { page: string; campaign: Campaign } {
  // Most events carry no tags: no parsing for them. A tag's name is either
  // written out or holds an escape (utm%5Fsource), so a page with neither has none.
  if (!page.includes('utm_') && !page.includes('%')) return { page, campaign: NONE };
  const hashAt = page.indexOf('#');
  const beforeHash = hashAt === -1 ? page : page.slice(0, hashAt);
  const hash = hashAt === -1 ? '' : page.slice(hashAt);
  const queryAt = beforeHash.indexOf('?');
  if (queryAt === -1) return { page, campaign: NONE };
  // The other pairs are kept exactly as sent: re-encoding them (URLSearchParams.toString)
  // made one page two, and could make it longer than the table holds.
  const kept: string[] = [];
  const tags = new Map<string, string>();
  for (const pair of beforeHash.slice(queryAt + 1).split('&')) {
    const [name, value] = decodePair(pair) ?? [];
    if (name === undefined || !UTM_PARAMETERS.has(name)) kept.push(pair);
    else if (!tags.has(name)) tags.set(name, value ?? '');
  }
  // A page that names no tag is stored as sent ('/p?' keeps its '?').
  if (tags.size === 0) return { page, campaign: NONE };
  const campaign = { utmSource: tag(tags.get('utm_source')), utmMedium: tag(tags.get('utm_medium')), utmCampaign: tag(tags.get('utm_campaign')) };
  const rest = kept.join('&');
  const stripped = `${beforeHash.slice(0, queryAt)}${rest ? `?${rest}` : ''}${hash}`;
  // A page that was only a query string keeps its root.
  return { page: stripped === '' ? '/' : stripped, campaign };
}
