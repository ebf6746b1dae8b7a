import { describe, expect, it } from 'vitest';
import { benchArgs, keepsTo, ratioGoal, settingOverrides } from './load.ts';

// The benches' options. `--set=NAME=value` once lost its value (the option was
// split at every '='), so every tuning tried through it ran the defaults.
// And their verdicts: a goal was once judged on the ratio rounded to two
// decimals, so 12,703 ÷ 15,945 = 0.797 was printed as 0.8 and met.

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

describe('ratioGoal', () => {
  it('judges a goal before rounding, and shows three decimals where two would show the bound beside a NO', () => {
    expect(ratioGoal('plugins', '', '≥ 0.8× bare', 12_703, 15_945, { atLeast: 0.8 })).toMatchObject({ met: false, ratio: 0.797 });
    expect(ratioGoal('plugins', '', '≥ 0.8× bare', 12_760, 15_945, { atLeast: 0.8 })).toMatchObject({ met: true, ratio: 0.8 });
    expect(ratioGoal('ingest', '', '≥ 0.5× bare', 4_816, 15_945, { atLeast: 0.5 })).toMatchObject({ met: false, ratio: 0.3 });
    expect(ratioGoal('p99', '', '≤ 2×', 6.01, 3, { atMost: 2 })).toMatchObject({ met: false, ratio: 2.003 });
    expect(ratioGoal('p99', '', '≤ 2×', 5.99, 3, { atMost: 2 })).toMatchObject({ met: true, ratio: 2 });
  });

  it('keepsTo is the same judgement, for tables the bench prints itself', () => {
    expect(keepsTo(0.797, 1, { atLeast: 0.8 })).toBe(false);
    expect(keepsTo(0.8, 1, { atLeast: 0.8 })).toBe(true);
    expect(keepsTo(2, 1, { atMost: 2 })).toBe(true);
  });
});
