import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import GithubSlugger from 'github-slugger';
import { describe, expect, it } from 'vitest';

// The README and docs link to each other's sections by anchor, and a heading
// renamed (a date in it moved on) leaves such a link pointing nowhere while
// the page still renders. Anchors are made as GitHub makes them (github-slugger,
// numbered when a heading repeats), and code blocks are not read for headings
// or links.

const root = join(import.meta.dirname, '..');
const documents = ['README.md', ...readdirSync(join(root, 'docs')).filter((name) => name.endsWith('.md')).map((name) => `docs/${name}`)];

function proseLines(text: string): string[] {
  let fenced = false;
  return text.split('\n').map((line) => {
    if (/^\s*(```|~~~)/.test(line)) {
      fenced = !fenced;
      return '';
    }
    return fenced ? '' : line;
  });
}

function anchorsOf(path: string): Set<string> {
  const slugger = new GithubSlugger();
  const anchors = new Set<string>();
  for (const line of proseLines(readFileSync(join(root, path), 'utf8'))) {
    const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (heading) anchors.add(slugger.slug(heading[1].replace(/`/g, '')));
  }
  return anchors;
}

interface Link {
  document: string;
  line: number;
  target: string;
}

function relativeLinksOf(document: string): Link[] {
  const links: Link[] = [];
  proseLines(readFileSync(join(root, document), 'utf8')).forEach((line, index) => {
    // Inline code is not a link, even when it looks like one.
    const prose = line.replace(/`[^`]*`/g, '');
    for (const match of prose.matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = match[1];
      if (!/^[a-z][a-z0-9+.-]*:/i.test(target)) links.push({ document, line: index + 1, target });
    }
  });
  return links;
}

function brokenReason({ document, target }: Link): string | undefined {
  const [pathPart, anchor] = target.split('#', 2);
  const file = pathPart ? relative(root, join(root, dirname(document), decodeURIComponent(pathPart))) : document;
  if (!existsSync(join(root, file))) return `${file} does not exist`;
  if (anchor === undefined || !file.endsWith('.md')) return undefined;
  return anchorsOf(file).has(decodeURIComponent(anchor)) ? undefined : `${file} has no heading #${anchor}`;
}

describe('links between the README and docs', () => {
  it('reads links of both kinds (a check that found none would pass for nothing)', () => {
    const links = documents.flatMap(relativeLinksOf);
    expect(links.some((link) => link.target.includes('#'))).toBe(true);
    expect(links.some((link) => !link.target.includes('#'))).toBe(true);
  });

  it('point at files that exist and headings they have', () => {
    const broken = documents
      .flatMap(relativeLinksOf)
      .map((link) => ({ link, reason: brokenReason(link) }))
      .filter(({ reason }) => reason)
      .map(({ link, reason }) => `${link.document}:${link.line} (${link.target}): ${reason}`);
    expect(broken).toEqual([]);
  });
});
