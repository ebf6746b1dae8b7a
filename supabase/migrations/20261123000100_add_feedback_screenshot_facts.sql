-- What the admin list says about a screenshot without carrying it: its MIME
-- type and decoded size, computed once when the row is written, so a page of
-- the list never reads (or sends) the screenshots themselves. The image is
-- served one at a time by GET /api/feedback/:id/screenshot.

alter table public.feedback
  add column screenshot_type text
    generated always as (substring(screenshot from '^data:([a-z]+/[a-z0-9.+-]+);base64,')) stored,
  -- Base64 holds 3 bytes per 4 characters, less the `=` padding.
  add column screenshot_bytes integer
    generated always as (
      (octet_length(screenshot) - position(',' in screenshot)) / 4 * 3
      - case when screenshot like '%==' then 2 when screenshot like '%=' then 1 else 0 end
    ) stored;

comment on column public.feedback.screenshot_type is 'MIME type of the screenshot data URL; null without one.';
comment on column public.feedback.screenshot_bytes is 'Decoded size of the screenshot in bytes; null without one.';
