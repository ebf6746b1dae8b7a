import { describe, expect, it } from 'vitest';
import { driverTarget } from './database-url.ts';

describe('driverTarget', () => {
  it('gives a socket directory named as the host, percent-encoded, as the host option; the URL keeps its login, port, database and parameters', () => {
    expect(driverTarget('postgres://app:pw@%2Fvar%2Frun%2Fpostgresql:5433/portfolio?sslmode=disable')).toEqual({
      url: 'postgres://app:pw@localhost:5433/portfolio?sslmode=disable',
      host: '/var/run/postgresql',
    });
    expect(driverTarget('postgresql://%2Ftmp/db')).toEqual({ url: 'postgresql://localhost/db', host: '/tmp' });
  });

  it('takes a host parameter out of the query (the server refuses it as a setting), whatever the URL had as its host', () => {
    expect(driverTarget('postgres://app:pw@localhost/portfolio?host=/var/run/postgresql')).toEqual({
      url: 'postgres://app:pw@localhost/portfolio',
      host: '/var/run/postgresql',
    });
    expect(driverTarget('postgres://app@/portfolio?sslmode=disable&host=%2Ftmp&application_name=x')).toEqual({
      url: 'postgres://app@localhost/portfolio?sslmode=disable&application_name=x',
      host: '/tmp',
    });
    expect(driverTarget('postgres:///portfolio?host=db.internal')).toEqual({ url: 'postgres://localhost/portfolio', host: 'db.internal' });
  });

  it('leaves every other URL as it is', () => {
    for (const url of [
      'postgres://app:pw@127.0.0.1:5432/portfolio',
      'postgres://u:p@h1:5432,h2:5433/db?target_session_attrs=read-write',
      'postgres://u:p%40w@[::1]:5432/db',
      'postgres://u:p@host/db?sslmode=require',
      'postgres://u:p%zz@host/db',
    ]) {
      expect(driverTarget(url), url).toEqual({ url });
    }
  });
});
