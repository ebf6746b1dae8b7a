-- Admins may delete feedback: the way to answer a sender's erasure request
-- through the API (DELETE /api/feedback/:id; docs/feedback.md, "Erasure
-- requests"). Until now only the owner could: admins had no DELETE grant and
-- no policy, so the API and the Data API both answered 42501.
--
-- The row's notification goes with it (feedback_outbox's foreign key is
-- `on delete cascade`; the cascade runs as the table's owner, past the
-- outbox's closed policies), the screenshot is a column of the row, and the
-- counts follow through their statement trigger on deletes.

grant delete on table public.feedback to authenticated;

create policy "Admins can delete feedback"
  on public.feedback for delete
  to authenticated
  using ((select public.has_role('admin')));
