-- The API bounds what a website holds (settings and metadata at most 16 KiB
-- each as JSON, a key prefix of its own making, a SHA-256 hash), but editors
-- may also update these columns in SQL (the Data API, when a project leaves
-- it on): there a 50 MB `settings` or a megabyte of `api_key_prefix`, which
-- every viewer's website list carries, went in. The table now bounds them
-- too, as 20261128120100 bounds profile names.
--
-- The JSON bound is a ceiling against abuse, not the API's rule again:
-- anything the API accepts must pass. It is on the stored form (a CHECK sees
-- the value before compression), which takes more room than JSON for small
-- values (a 16 KiB array of zeros is 96 KiB) and less for large numbers
-- (whose text PostgreSQL writes out in full: 1e308 is 309 digits), so
-- 1 MiB, far above anything the API writes. NOT VALID: rows already there
-- are not checked (a deploy is not stopped by one), new writes are.

alter table public.websites
  add constraint websites_settings_size check (pg_column_size(settings) <= 1048576) not valid,
  add constraint websites_metadata_size check (pg_column_size(metadata) <= 1048576) not valid,
  add constraint websites_api_key_prefix_length check (char_length(api_key_prefix) between 1 and 32) not valid,
  add constraint websites_api_key_hash_length check (octet_length(api_key_hash) = 32) not valid;
