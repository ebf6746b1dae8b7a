import { describe, expect, it } from 'vitest';
import { benchArgs, settingOverrides } from './load.ts';

// The benches' options. `--set=NAME=value` once lost its value (the option was
// split at every '='), so every tuning tried through it ran the defaults.

describe('benchArgs', () => {
  it('keeps everything after the first = as the value', () => {
    expect(benchArgs(['--set=ANALYTICS_BATCH_MAX_WAIT_MS=1,ANALYTICS_BATCH_MAX_ROWS=50', '--duration=5'])).toEqual({
      set: 'ANALYTICS_BATCH_MAX_WAIT_MS=1,ANALYTICS_BATCH_MAX_ROWS=50',
      duration: '5',
    });
  });

  it('reads an option without a value as present and empty', () => {
    const args = benchArgs(['--heap']);
    expect('heap' in args).toBe(true);
    expect(args.heap).toBe('');
    expect(benchArgs(['--heap=survivors']).heap).toBe('survivors');
  });
});

describe('settingOverrides', () => {
  it('reads each NAME=value pair, a value with = in it whole', () => {
    expect(settingOverrides(benchArgs(['--set=FEEDBACK_OUTBOX_WORKER=false,DATABASE_URL=postgres://a/b?x=1']))).toEqual({
      FEEDBACK_OUTBOX_WORKER: 'false',
      DATABASE_URL: 'postgres://a/b?x=1',
    });
    expect(settingOverrides(benchArgs(['--duration=5']))).toEqual({});
  });

  it('refuses a pair without a name', () => {
    expect(() => settingOverrides({ set: 'FEEDBACK_OUTBOX_WORKER' })).toThrow('is not NAME=value');
    expect(() => settingOverrides({ set: '=30' })).toThrow('is not NAME=value');
  });
});
