-- 0034_wipe_past: Wipes that keep the past consistent.
-- A close lowers a version's claimed end (asserted_until) and the row keeps
-- only the latest one; where the window was already cut shorter by another
-- version, no logged range shows the end it replaced.  A subject wipe that
-- takes that other version away must know the claimed end at every earlier
-- instant to lay the window out as if the wiped version had never been
-- asserted, so each close logs the end it replaced.
alter table memory.fact_events add column old_asserted_until timestamptz;
comment on column memory.fact_events.old_asserted_until is
  'On a close (expired, contradicted) of the version itself: its claimed end (asserted_until) before the close, ''infinity'' when it was open. NULL on other events and on closes logged before 0034.';
