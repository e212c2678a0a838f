-- 0024_webhook_every_type: an endpoint can subscribe to every event type,
-- including types added later, as '{*}' (GitHub's convention for "send me
-- everything").  Until now "every type" was stored as the list of types at
-- creation, so an endpoint created before 0023 with no filter never got
-- fact.expired or fact.restored.
alter table memory.webhook_endpoints drop constraint webhook_endpoints_event_types_check;
alter table memory.webhook_endpoints add constraint webhook_endpoints_event_types_check check (
  event_types = '{*}'
  or (cardinality(event_types) >= 1
      and event_types <@ array['fact.superseded', 'fact.retracted', 'fact.contradicted',
                               'fact.expired', 'fact.restored', 'episode.enriched',
                               'memory.wiped']));
comment on column memory.webhook_endpoints.event_types is
  'The event types the endpoint receives (memory.webhook_event_types()), or {*}: every type, including types added later.';

-- Stored lists that name every type there was when they were written (the
-- five before 0023, or all seven since) are what "no filter" used to store:
-- they become '{*}'.  An endpoint that listed those types one by one is
-- taken to want every type too; a narrower list is left as it is.  The
-- owner converts every org's rows here only, with forced row-level
-- security lifted inside this transaction.
alter table memory.webhook_endpoints no force row level security;
update memory.webhook_endpoints
   set event_types = '{*}'
 where event_types @> array['fact.superseded', 'fact.retracted', 'fact.contradicted',
                            'episode.enriched', 'memory.wiped']
   and (cardinality(event_types) = 5 or cardinality(event_types) = 7);
alter table memory.webhook_endpoints force row level security;
