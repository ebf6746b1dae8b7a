import { describe, expect, it } from 'vitest';
import { fromPostgresError } from './errors.ts';

describe('fromPostgresError', () => {
  it('answers a deadlock or a serialization failure as a busy database (503), which a retry gets past, not as a 500', () => {
    for (const code of ['40P01', '40001']) {
      expect(fromPostgresError({ code }), code).toMatchObject({ statusCode: 503, message: 'Database busy; try again shortly' });
    }
  });

  it('answers connection slots all taken (the server, the database or the role at its limit) as a busy database: 503, not a 500', () => {
    expect(fromPostgresError({ code: '53300' })).toMatchObject({ statusCode: 503, message: 'Database busy; try again shortly' });
    // 53400 is also temp_file_limit exceeded, which no retry gets past: not mapped, a 500.
    expect(fromPostgresError({ code: '53400' })).toBeUndefined();
  });

  it('answers a connection lost on a read or on a write alike: 503, not a 500', () => {
    for (const code of ['ECONNRESET', 'EPIPE', 'CONNECTION_CLOSED', '57P01']) {
      expect(fromPostgresError({ code }), code).toMatchObject({ statusCode: 503, message: 'Database unavailable' });
    }
  });
});
