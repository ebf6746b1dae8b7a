-- The country of an event's client IP (ISO 3166-1 alpha-2, looked up at
-- ingestion; the IP itself is never stored) and the campaign tags
-- (utm_source, utm_medium, utm_campaign) read from the page URL.
--
-- Nullable columns without defaults: adding them rewrites nothing. The checks
-- are NOT VALID because every existing row holds null in them, which passes
-- anyway; validating would only scan the whole table under this lock.

alter table public.analytics_events
  add column country text,
  add column utm_source text,
  add column utm_medium text,
  add column utm_campaign text,
  add constraint analytics_events_country_check check (country ~ '^[A-Z]{2}$') not valid,
  add constraint analytics_events_utm_source_check check (char_length(utm_source) between 1 and 256) not valid,
  add constraint analytics_events_utm_medium_check check (char_length(utm_medium) between 1 and 256) not valid,
  add constraint analytics_events_utm_campaign_check check (char_length(utm_campaign) between 1 and 256) not valid;
