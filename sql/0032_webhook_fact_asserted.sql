-- 0032_webhook_fact_asserted: a webhook event for a new fact.  Until now an
-- endpoint heard of a fact only when its window changed (superseded,
-- retracted, ...): the first time the memory learned a user's plan or
-- email, nothing was pushed.  fact.asserted joins the types an endpoint may
-- list; an endpoint subscribed to {*} receives it from now on, as that
-- subscription promises for types added later.
alter table memory.webhook_endpoints drop constraint webhook_endpoints_event_types_check;
alter table memory.webhook_endpoints add constraint webhook_endpoints_event_types_check check (
  event_types = '{*}'
  or (cardinality(event_types) >= 1
      and event_types <@ array['fact.asserted', 'fact.superseded', 'fact.retracted',
                               'fact.contradicted', 'fact.expired', 'fact.restored',
                               'episode.enriched', 'memory.wiped']));
