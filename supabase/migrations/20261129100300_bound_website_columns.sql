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
-- values: the API's fullest, 16 KiB of an array of zeros
-- (tests/websites.test.ts), is about 96 KiB stored. So 1 MiB, far above
-- anything the API writes.
--
-- A row already over a bound could not have come from the API. It is mended
-- first, since every later update of it, the API's own (a rename, or the
-- deletion's first step, which rewrites the key), would fail the check:
-- settings or metadata emptied, the prefix cut to the API's 12 characters,
-- and a hash of another length, which no key ever matches, replaced by one
-- that matches none either. A stored value may be compressed, so its size
-- is read from a fresh copy (`::text::jsonb`), as a CHECK would see it.

update public.websites
   set settings = case when pg_column_size(settings::text::jsonb) > 1048576 then '{}'::jsonb else settings end,
       metadata = case when pg_column_size(metadata::text::jsonb) > 1048576 then '{}'::jsonb else metadata end,
       api_key_prefix = case when char_length(api_key_prefix) not between 1 and 32 then left(coalesce(nullif(api_key_prefix, ''), 'unknown'), 12) else api_key_prefix end,
       api_key_hash = case when octet_length(api_key_hash) <> 32 then sha256(gen_random_uuid()::text::bytea) else api_key_hash end
 where pg_column_size(settings::text::jsonb) > 1048576
    or pg_column_size(metadata::text::jsonb) > 1048576
    or char_length(api_key_prefix) not between 1 and 32
    or octet_length(api_key_hash) <> 32;

alter table public.websites
  add constraint websites_settings_size check (pg_column_size(settings) <= 1048576),
  add constraint websites_metadata_size check (pg_column_size(metadata) <= 1048576),
  add constraint websites_api_key_prefix_length check (char_length(api_key_prefix) between 1 and 32),
  add constraint websites_api_key_hash_length check (octet_length(api_key_hash) = 32);
