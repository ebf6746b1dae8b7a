// Secrets of the test stack: the auth server signs with TEST_JWT_SECRET, and
// test apps verify with it.
export const TEST_JWT_SECRET = 'test-jwt-secret-that-is-long-enough-for-hs256-0123456789';
export const TEST_ADMIN_JWT_SECRET = 'test-admin-jwt-secret-long-enough-for-hs256-9876543210';
