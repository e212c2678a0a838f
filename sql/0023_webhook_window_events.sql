-- 0023_webhook_window_events: two more webhook event types, so a receiver
-- that mirrors what holds learns of every change to a fact's window, not
-- only of supersessions, retractions and contradictions:
--   fact.expired   a window closed without a newer fact (memory.close_fact
--                  with its default kind, or a split emptying the versions
--                  it moves);
--   fact.restored  a window given back (a retraction or a wipe of what had
--                  closed it, a split laying a name out again).
-- The vocabulary is widened only: every stored subscription stays valid.
alter table memory.webhook_endpoints drop constraint webhook_endpoints_event_types_check;
alter table memory.webhook_endpoints add constraint webhook_endpoints_event_types_check check (
  cardinality(event_types) >= 1
  and event_types <@ array['fact.superseded', 'fact.retracted', 'fact.contradicted',
                           'fact.expired', 'fact.restored', 'episode.enriched', 'memory.wiped']);
