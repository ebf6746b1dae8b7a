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

describe('fromPostgresError on a refused connection', () => {
  // What postgres.js rejects with when CONNECT on the database is revoked: the refusal of a new connection.
  const connectRevoked = {
    severity_local: 'FATAL',
    severity: 'FATAL',
    code: '42501',
    detail: 'User does not have CONNECT privilege.',
    routine: 'CheckMyDatabase',
    message: 'permission denied for database "portfolio"',
  };

  it('answers a connection the database refuses at its start (FATAL 42501) as a database outage: 503, not 403', () => {
    expect(fromPostgresError(connectRevoked)).toMatchObject({ statusCode: 503, message: 'Database unavailable' });
    // A server whose messages are translated still sends the untranslated severity; an old one only the translated.
    expect(fromPostgresError({ ...connectRevoked, severity: undefined })).toMatchObject({ statusCode: 503 });
  });

  it("keeps a statement's 42501 (a table's privilege, row-level security) the caller's: 403", () => {
    for (const severity of ['ERROR', undefined]) {
      expect(fromPostgresError({ code: '42501', severity, severity_local: severity }), String(severity)).toMatchObject({
        statusCode: 403,
        message: 'Insufficient permissions',
      });
    }
  });

  it('answers the other logins refused while the app runs (role, password, database gone) as 503, not a 500', () => {
    for (const code of ['28000', '28P01', '3D000']) {
      expect(fromPostgresError({ code, severity: 'FATAL' }), code).toMatchObject({ statusCode: 503, message: 'Database unavailable' });
    }
    // A role setting the server refuses when the connection starts ends the session too.
    expect(fromPostgresError({ code: '22023', severity: 'FATAL' })).toMatchObject({ statusCode: 503, message: 'Database unavailable' });
    expect(fromPostgresError({ code: '22023', severity: 'ERROR' })).toBeUndefined();
  });
});
