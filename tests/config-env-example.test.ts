import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parse } from 'dotenv';
import { describe, expect, it } from 'vitest';
import { parseConfig, SettingsSchema } from '../src/config.ts';

// .env.example is copied to .env for `npm run dev` and `npm start` alike, so
// what it sets must be right for a deploy: `npm run dev` sets development
// itself, and a copy under `npm start` must stay production. Read with the
// parser npm start and the scripts read .env with (scripts/env-file.ts).

const example = parse(readFileSync(path.resolve(import.meta.dirname, '../.env.example'), 'utf8'));

describe('.env.example', () => {
  it('leaves NODE_ENV empty: a copy of it starts as production, which refuses the missing secrets', () => {
    expect(example.NODE_ENV).toBe('');
    expect(() => parseConfig({ ...example, DATABASE_URL: 'postgres://x@127.0.0.1/x' })).toThrowError(
      /CAPTCHA_SECRET is missing.*ADMIN_JWT_SECRET is missing.*ANALYTICS_SALT_SECRET is missing.*SUPABASE_JWT_SECRET is missing/,
    );
  });

  it('lists every variable the service reads', () => {
    expect(Object.keys(SettingsSchema.shape).filter((name) => !(name in example))).toEqual([]);
  });
});
