import { describe, expect, it } from 'vitest';
import { nodeVersionWarning } from './node-version.ts';

describe('nodeVersionWarning', () => {
  it('says nothing on Node 24, and names the version otherwise', () => {
    expect(nodeVersionWarning('v24.21.0')).toBeUndefined();
    expect(nodeVersionWarning('v20.20.2')).toBe('Node v20.20.2 is not the supported Node 24 (package.json engines); npm install puts Node 24 in node_modules/.bin/node');
    expect(nodeVersionWarning('v25.0.0')).toMatch(/^Node v25\.0\.0 is not the supported Node 24/);
  });
});
